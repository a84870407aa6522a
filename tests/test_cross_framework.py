"""A torch model's weights, moved by rnnx, run in ONNX Runtime and give torch's own outputs.

(Keras and JAX get the same treatment in tests/formats/test_keras.py and test_jax.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

import rnnx
from rnnx import parity
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats.onnx_build import build_stack_model

torch = pytest.importorskip("torch")
from rnnx.engines.torch import TorchRunner  # noqa: E402

ATOL = 3e-5  # two float32 implementations against each other


@pytest.mark.parametrize(
    ("make", "spec"),
    [
        (lambda: torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True), None),
        (lambda: torch.nn.GRU(5, 7, num_layers=3), None),
        (lambda: torch.nn.GRU(4, 6, bidirectional=True, bias=False), None),
        (lambda: torch.nn.RNN(4, 5, num_layers=2, nonlinearity="relu", bidirectional=True), "rnn_relu,input=4,hidden=5,layers=2,bidirectional"),
    ],
    ids=["lstm", "gru", "gru-nobias", "rnn-relu"],
)
@pytest.mark.parametrize("batch_first", [False, True], ids=["tbi", "bti"])
def test_torch_weights_in_onnx_runtime_give_torchs_outputs(make, spec, batch_first: bool) -> None:
    torch.manual_seed(7)
    module = make().eval()
    weights = rnnx.from_format(module.state_dict(), "torch", spec=spec)
    ort = OnnxRuntimeRunner(build_stack_model(weights, batch_first=batch_first, sequence_lens=True))
    torch_runner = TorchRunner(weights, batch_first=batch_first)
    torch_runner.module.load_state_dict(module.state_dict())  # the user's own tensors, not a copy of ours
    for k, (T, B) in enumerate([(1, 1), (9, 4), (23, 6)]):
        inputs = parity.random_inputs(weights, T, B, seed=k, ragged=True)
        if batch_first:
            inputs["X"] = inputs["X"].transpose(1, 0, 2).copy()
        got, want = ort(inputs), torch_runner(inputs)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=ATOL, rtol=0, err_msg=f"{name} T={T} B={B}")
