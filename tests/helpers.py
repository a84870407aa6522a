"""Test helpers: a registry of specs that the tests sweep, and torch module construction."""

from __future__ import annotations

from rnnx.spec import RNNSpec

# Each spec is paired with the check it gets: every test that sweeps SPECS runs them all.
TORCH_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5",
        "lstm,input=4,hidden=6,layers=2,bidirectional",
        "lstm,input=5,hidden=7,layers=2,bidirectional,proj=3",
        "lstm,input=3,hidden=4,layers=3,proj=2,no_bias",
        "gru,input=3,hidden=5",
        "gru,input=4,hidden=3,layers=2,bidirectional,no_bias",
        "rnn_tanh,input=3,hidden=4,layers=2",
        "rnn_relu,input=4,hidden=5,bidirectional",
    )
]

SHAPES = [(1, 1), (7, 3), (16, 5)]  # (seq_len, batch)
