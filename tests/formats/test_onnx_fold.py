"""Weights torch.onnx's default exporter leaves as Slices and Concats of torch's tensors are
read as their values, proven against the torch module that was exported."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import rnnx
from rnnx import reference
from rnnx.pipelines.convert import convert


def _export(module: torch.nn.Module, x: torch.Tensor, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=True, verbose=False)


def test_a_default_torch_onnx_export_reads_as_the_module_it_came_from(tmp_path: Path) -> None:
    """Hidden 600 is past the exporter's folding limit: W and R come out as
    ``Unsqueeze(Concat(Slice(weight_ih_l0), ...))``. Read back, the float64 reference on them
    gives the torch module's own outputs (float64) at several shapes, batch 1 included, and
    the converted file runs in ONNX Runtime."""
    import onnx

    torch.manual_seed(3)
    module = torch.nn.LSTM(64, 600, num_layers=2, bidirectional=True).eval()
    path = tmp_path / "dynamo.onnx"
    _export(module, torch.randn(5, 2, 64), path)
    ops = {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}
    assert {"Slice", "Concat"} <= ops, ops  # the case this test is about: weights not folded by the exporter
    weights = rnnx.load(path)
    assert weights.spec == rnnx.RNNSpec.parse("lstm,input=64,hidden=600,layers=2,bidirectional")
    double = module.double()
    for T, B in ((1, 1), (7, 3), (4, 5)):
        x = np.random.default_rng(T * 10 + B).standard_normal((T, B, 64))
        with torch.no_grad():
            want, (h, c) = double(torch.from_numpy(x))
        got = reference.forward(weights, x)
        np.testing.assert_allclose(got.y, want.numpy(), atol=1e-6)
        np.testing.assert_allclose(got.h_n, h.numpy(), atol=1e-6)
        np.testing.assert_allclose(got.c_n, c.numpy(), atol=1e-6)
    result = convert(path, tmp_path / "native.onnx")
    assert result.written and result.report


def test_a_weight_computed_by_anything_else_is_still_refused(tmp_path: Path) -> None:
    """Only operators that cut and join data are folded: a W made by Expand (which could make a
    small file claim a huge tensor) or from a graph input stays refused, in one line."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    H, I = 3, 2
    rng = np.random.default_rng(0)
    seed_w = numpy_helper.from_array(rng.standard_normal((1, 1, I)).astype(np.float32), "w_row")
    shape = numpy_helper.from_array(np.array([1, 4 * H, I], np.int64), "w_shape")
    R = numpy_helper.from_array(rng.standard_normal((1, 4 * H, H)).astype(np.float32), "R")
    nodes = [helper.make_node("Expand", ["w_row", "w_shape"], ["W"]), helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=H)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["t", "b", I])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [seed_w, shape, R])
    path = tmp_path / "expand.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(rnnx.RNNXError, match="W comes from a computed tensor"):
        rnnx.load(path)
