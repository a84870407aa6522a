"""jax.experimental.rnn.lstm hands rnnx's jax vector to cuDNN: its outputs must be the reference's."""

from __future__ import annotations

import os

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, parity
from rnnx.check import stack

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch's tests
jax = pytest.importorskip("jax")


def _has_gpu() -> bool:
    try:
        return any(d.platform == "gpu" for d in jax.devices())
    except RuntimeError:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_gpu(), reason="needs jax with a CUDA GPU (none found)")]


@pytest.mark.parametrize("text", ["lstm,input=5,hidden=7", "lstm,input=6,hidden=8,layers=2,bidirectional", "lstm,input=3,hidden=4,layers=3"])
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_jax_cudnn_lstm_matches_reference(text: str, ragged: bool) -> None:
    import jax.numpy as jnp
    from jax.experimental import rnn as jrnn

    spec = RNNSpec.parse(text)
    weights = RNNWeights.random(spec, seed=5)
    vector = jnp.asarray(rnnx.to_format(weights, "jax"))
    for k, (T, B) in enumerate([(1, 1), (12, 3), (40, 8)]):
        inputs = parity.random_inputs(weights, T, B, seed=k, ragged=ragged)
        lens = inputs.get("seq_lens", np.full(B, T)).astype(np.int32)
        y, h, c = jrnn.lstm(
            jnp.asarray(inputs["X"].transpose(1, 0, 2)), jnp.asarray(inputs["h0"]), jnp.asarray(inputs["c0"]), vector,
            jnp.asarray(lens), input_size=spec.input_size, hidden_size=spec.hidden_size, num_layers=spec.num_layers,
            dropout=0.0, bidirectional=spec.direction == "bidirectional", precision=jax.lax.Precision.HIGHEST,
        )
        got = {"Y": np.asarray(y).transpose(1, 0, 2), "h_n": np.asarray(h), "c_n": np.asarray(c)}
        rows = stack.compare("jax-cudnn", got, parity.reference_outputs(weights, inputs), T, B)
        assert all(r.passed for r in rows), rows
