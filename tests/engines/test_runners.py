"""Every CPU runner answers the same inputs with the same names, shapes and (within tolerance) numbers."""

from __future__ import annotations

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights, parity
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.reference import ReferenceRunner
from rnnx.graphs.build import build_stack_model


@pytest.mark.parametrize("text", ["lstm,input=3,hidden=4,layers=2,bidirectional", "gru,input=3,hidden=5", "rnn_relu,input=2,hidden=3,reverse"])
def test_runners_share_one_interface(text: str) -> None:
    weights = RNNWeights.random(RNNSpec.parse(text), seed=1)
    runners = [ReferenceRunner(weights), OnnxRuntimeRunner(build_stack_model(weights, sequence_lens=True))]
    if weights.spec.direction != "reverse":
        torch_engine = pytest.importorskip("rnnx.engines.torch")
        runners.append(torch_engine.TorchRunner(weights))
    inputs = parity.random_inputs(weights, 6, 3, seed=2, ragged=True)
    results = [r(inputs) for r in runners]
    assert all(set(res) == set(results[0]) for res in results)
    for runner, res in zip(runners[1:], results[1:]):
        assert runner.device == "cpu" and runner.precision
        for name, want in results[0].items():
            np.testing.assert_allclose(res[name], want, atol=3e-5, err_msg=f"{type(runner).__name__} {name}")
