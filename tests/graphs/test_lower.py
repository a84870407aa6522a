"""Lowering native nodes to hoisted-input Scans (the TensorRT-oriented form), held against the reference."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.check import stack
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats.onnx_build import build_stack_model
from rnnx.graphs.lower import lower_recurrences
from tests.formats.test_onnx import ONNX_SPECS, PROJ_SPECS
from tests.helpers import SHAPES


@pytest.mark.parametrize("spec", ONNX_SPECS + PROJ_SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_lowered_form_matches_reference(spec: RNNSpec, ragged: bool) -> None:
    weights = RNNWeights.random(spec, seed=21, scale=0.8)
    model = build_stack_model(weights, sequence_lens=ragged)
    result = lower_recurrences(model)
    assert len(result.rewritten) == spec.num_layers or spec.proj_size  # projected layers were Scans already
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Scan"] == spec.num_layers * spec.num_directions and not {"LSTM", "GRU", "RNN"} & set(ops)
    report = stack.check("onnxruntime", OnnxRuntimeRunner(model), weights, shapes=SHAPES, ragged=ragged)
    assert report, str(report)


def test_input_product_is_hoisted_as_torch_stacks_its_gates() -> None:
    """Outside the Scan: one MatMul by the input matrix with its gates stacked as torch's
    ``weight_ih`` stacks them (i,f,g,o, which is also cuDNN's order); inside: no product with it."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    module = torch.nn.LSTM(3, 4)
    weights = rnnx.from_format(module.state_dict(), "torch")
    model = build_stack_model(weights)
    lower_recurrences(model)
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"}
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 1
    np.testing.assert_array_equal(consts[matmuls[0].input[1]], module.weight_ih_l0.detach().numpy().T)
    (scan,) = [n for n in model.graph.node if n.op_type == "Scan"]
    body_ops = collections.Counter(n.op_type for n in scan.attribute[0].g.node)
    assert body_ops["MatMul"] == 1  # the recurrent product only


def test_select_and_refusals(tmp_path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4,layers=2"), seed=1)
    model = build_stack_model(weights)
    result = lower_recurrences(model, select="GRU_l1")
    assert result.rewritten == ["GRU_l1"] and [n.op_type for n in model.graph.node].count("GRU") == 1
    with pytest.raises(RNNXError, match="no LSTM, GRU or RNN node named 'nope'"):
        lower_recurrences(build_stack_model(weights), select="nope")


def test_cli(tmp_path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(build_stack_model(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,bidirectional,peepholes"))), str(src))
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "lower", str(src), "-o", str(tmp_path / "l.onnx"), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["lowered"] == ["LSTM_l0"] and result["check"]["passed"]
