"""The reference's activations against the framework that defines them: Keras 3 layers
(torch backend) built with Keras's activation names, run on our weights. Keras's names map to
ONNX's functions through rnnx.layouts.keras's table, so this also pins that Keras 3's
``hard_sigmoid`` is HardSigmoid 1/6, 0.5 (Keras 2's, 0.2/0.5, is pinned by tf_keras's own
recorded outputs in tests/formats/test_onnx_activations.py)."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")

import rnnx  # noqa: E402
from rnnx import RNNSpec, RNNWeights  # noqa: E402
from rnnx.check import stack  # noqa: E402
from rnnx.layouts.keras import layer_activations  # noqa: E402
from rnnx.spec import Activation  # noqa: E402

SHAPES = [(1, 1), (7, 3), (12, 2)]  # (seq_len, batch)
CASES = [  # Keras layer, activation, recurrent_activation, bidirectional
    ("lstm", "tanh", "hard_sigmoid", False),
    ("lstm", "relu", "sigmoid", True),
    ("lstm", "softsign", "hard_sigmoid", False),
    ("lstm", "elu", "sigmoid", False),
    ("lstm", "softplus", "hard_sigmoid", True),
    ("gru", "tanh", "hard_sigmoid", True),
    ("gru", "linear", "sigmoid", False),
    ("rnn", "hard_sigmoid", None, False),
    ("rnn", "elu", None, True),
    ("rnn", "softplus", None, False),
]


@pytest.mark.parametrize(("family", "activation", "recurrent", "bidirectional"), CASES, ids=lambda v: str(v))
def test_keras3_layers_compute_what_the_reference_does(family: str, activation: str, recurrent: str | None, bidirectional: bool) -> None:
    keras.utils.set_random_seed(zlib.crc32(f"{family}{activation}{recurrent}".encode()))
    cell, acts = layer_activations(family, activation, recurrent or "sigmoid", 3)
    spec = RNNSpec(cell, input_size=3, hidden_size=4, direction="bidirectional" if bidirectional else "forward", activations=acts)
    weights = RNNWeights.random(spec, seed=zlib.crc32(str(spec).encode()), scale=0.8)
    kwargs = {"units": 4, "return_sequences": True, "return_state": True, "activation": activation}
    if family != "rnn":
        kwargs["recurrent_activation"] = recurrent
    inner = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU, "rnn": keras.layers.SimpleRNN}[family](**kwargs)
    layer = keras.layers.Bidirectional(inner) if bidirectional else inner
    layer.build((None, None, 3))
    # Keras arrays hold no activations: they go in under the plain spec, the layer sets its own
    layer.set_weights(rnnx.to_format(RNNWeights(spec.with_(activations=()), weights.tensors), "keras"))

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        states = []
        for d in range(spec.num_directions):
            states += [inputs["h0"][d]] + ([inputs["c0"][d]] if family == "lstm" else [])
        outs = [keras.ops.convert_to_numpy(o) for o in layer(inputs["X"].transpose(1, 0, 2), initial_state=states)]
        per = 2 if family == "lstm" else 1
        finals = [outs[1 + d * per: 1 + (d + 1) * per] for d in range(spec.num_directions)]
        got = {"Y": outs[0].transpose(1, 0, 2), "h_n": np.stack([f[0] for f in finals])}
        if family == "lstm":
            got["c_n"] = np.stack([f[1] for f in finals])
        return got

    report = stack.check("keras", run, weights, shapes=SHAPES)
    assert report and report.worst().max_abs < 1e-5, str(report)
    if "hard_sigmoid" in (activation, recurrent):  # Keras 2's hard_sigmoid in its place misses Keras 3's outputs
        keras2 = tuple(Activation("HardSigmoid", 0.2, 0.5) if a.name == "HardSigmoid" else a for a in spec.activations)
        assert not stack.check("keras", run, RNNWeights(spec.with_(activations=keras2), weights.tensors), shapes=SHAPES)
