"""Opset 13, what TensorRT 8.0 and 8.2 (JetPack 4.6.x) parse: files without LSTM/GRU/RNN's
layout attribute (new in 14), batch-major models through explicit Transposes, checked in ONNX
Runtime like every other opset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, reference
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.graphs.legalize import time_major_recurrences

torch = pytest.importorskip("torch")


def _opset(path: Path) -> int:
    return next(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))


def _no_layout(path: Path) -> bool:
    model = onnx.load(str(path))
    return not any(a.name == "layout" for n in model.graph.node for a in n.attribute)


class BatchFirst(torch.nn.Module):
    """A Conv1d front end, a batch-first 2-layer bidirectional GRU, a Linear and a log-softmax."""

    def __init__(self, cell: str) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.rnn = getattr(torch.nn, cell)(8, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = torch.nn.Linear(32, 5)

    def forward(self, x):  # (batch, 4, time)
        y, _ = self.rnn(self.conv(x).transpose(1, 2))
        return torch.log_softmax(self.fc(y), -1)


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_a_batch_first_model_exports_at_opset_13_and_runs_as_torch_does(cell: str, tmp_path: Path) -> None:
    model = BatchFirst(cell).eval()
    path = tmp_path / "m13.onnx"
    report = rnnx.export(model, (torch.randn(2, 4, 20),), path, opset=13)
    assert report.passed and _opset(path) == 13 and _no_layout(path)
    runner = OnnxRuntimeRunner(path)
    for batch, steps in ((1, 1), (3, 33)):
        x = torch.randn(batch, 4, steps)
        with torch.no_grad():
            want = model(x).double().numpy()
        got = next(iter(runner({runner.input_names[0]: x.numpy()}).values()))
        assert np.abs(got - want).max() < 1e-4, (batch, steps)


@pytest.mark.parametrize("spec", ["lstm,input=5,hidden=6,layers=2,bidirectional", "gru,input=5,hidden=6,proj=0", "rnn_tanh,input=3,hidden=4",
                                  "lstm,input=5,hidden=6,proj=4,bidirectional"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_convert_writes_opset_13_and_its_check_passes(spec: str, batch_first: bool, tmp_path: Path) -> None:
    from rnnx.pipelines.convert import convert

    weights = RNNWeights.random(RNNSpec.parse(spec.replace(",proj=0", "")), seed=5)
    source = tmp_path / "w.safetensors"
    rnnx.save(weights, source)
    out = tmp_path / "w13.onnx"
    result = convert(source, out, opset=13, batch_first=batch_first)
    assert result.written and result.report and _opset(out) == 13 and _no_layout(out)
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)


def test_layout_1_nodes_become_time_major_between_transposes(tmp_path: Path) -> None:
    """A layout=1 GRU (what torch.onnx writes for batch_first) made layout 0 computes the same in ONNX Runtime."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    D, H, I = 2, 3, 4
    inits = [numpy_helper.from_array(rng.standard_normal((D, 3 * H, I)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((D, 3 * H, H)).astype(np.float32), "R")]
    node = helper.make_node("GRU", ["X", "W", "R", "", "", "h0"], ["Y", "Y_h"], hidden_size=H, direction="bidirectional", layout=1, name="gru")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", "t", I]),
                                            helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["b", D, H])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None), helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    feeds = {"X": rng.standard_normal((2, 5, I)).astype(np.float32), "h0": rng.standard_normal((2, D, H)).astype(np.float32)}
    # ONNX Runtime runs no layout=1 node: the float64 reference on the node's weights says what it means
    path = tmp_path / "gru.onnx"
    onnx.save(model, str(path))
    weights = rnnx.load(path)
    ref = reference.forward(weights, feeds["X"], feeds["h0"].transpose(1, 0, 2), batch_first=True)
    time_major_recurrences(model)
    assert not any(a.name == "layout" for n in model.graph.node for a in n.attribute)
    assert [n.op_type for n in model.graph.node] == ["Transpose", "Transpose", "GRU", "Transpose", "Transpose"]
    got = OnnxRuntimeRunner(model)(feeds)
    assert got["Y"].shape == (2, 5, D, H) and got["Y_h"].shape == (2, D, H)
    np.testing.assert_allclose(got["Y"].reshape(2, 5, D * H), ref.y, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["Y_h"], ref.h_n.transpose(1, 0, 2), rtol=0, atol=1e-5)
