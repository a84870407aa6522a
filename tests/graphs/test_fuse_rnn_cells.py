"""rnnx fuse on decomposed plain RNN cells: torch's RNNCell (tanh and relu) and a hand-written
``tanh(x @ W.T + b + h @ U.T + c)`` cell, each stepped in a Python loop, become one RNN node
that torch itself is the judge of, at other lengths and batches than the export's."""

from __future__ import annotations

import collections
import warnings
import zlib

import numpy as np
import onnx
import pytest

from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.pipelines.fuse import fuse_file

torch = pytest.importorskip("torch")
nn = torch.nn


class SteppedRNNCell(nn.Module):
    def __init__(self, nonlinearity: str) -> None:
        super().__init__()
        self.cell = nn.RNNCell(4, 5, nonlinearity=nonlinearity)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], 5)
        ys = []
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
            ys.append(h)
        return torch.stack(ys)


class HandWrittenCell(nn.Module):
    """The cell as published code writes it: two products, two biases, one tanh."""

    def __init__(self) -> None:
        super().__init__()
        self.W, self.U = nn.Parameter(torch.randn(5, 4) * 0.5), nn.Parameter(torch.randn(5, 5) * 0.5)
        self.b, self.c = nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[1], 5)
        ys = []
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] @ self.W.T + self.b + h @ self.U.T + self.c)
            ys.append(h)
        return torch.stack(ys)


CASES = {"rnncell-tanh": lambda: SteppedRNNCell("tanh"), "rnncell-relu": lambda: SteppedRNNCell("relu"), "hand-written": HandWrittenCell}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("steps", [1, 4])
def test_stepped_rnn_cell_becomes_one_rnn_node(tmp_path, case: str, steps: int, dynamo: bool) -> None:
    """The dynamo exporter fixes the batch and, for the hand-written cell, folds the first
    step's zero state away (``0 @ U.T + c`` becomes a (batch, hidden) constant): that step
    still joins the chain, as a step with no initial state."""
    torch.manual_seed(zlib.crc32(case.encode()))
    model = CASES[case]().eval()
    src, out = tmp_path / "unrolled.onnx", tmp_path / "fused.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, (torch.randn(steps, 3, 4),), str(src), dynamo=True, opset_version=18, input_names=["x"])
        else:
            torch.onnx.export(model, (torch.randn(steps, 3, 4),), str(src), dynamo=False, opset_version=17, dynamic_axes={"x": {1: "batch"}}, input_names=["x"])
    report = fuse_file(src, out)
    if dynamo and steps == 1 and case == "hand-written":  # tanh(x @ W.T + b + c): no recurrence is left to see
        assert not report.cells and "nothing to fuse" in str(report)
        return
    assert report.check and len(report.cells) == steps and not report.left_alone
    graph = onnx.load(str(out)).graph
    ops = collections.Counter(n.op_type for n in graph.node)
    assert ops["RNN"] == 1 and not {"Tanh", "Relu", "Gemm", "MatMul"} & set(ops), ops
    (node,) = [n for n in graph.node if n.op_type == "RNN"]
    acts = [a.strings for a in node.attribute if a.name == "activations"]
    assert (acts == [[b"Relu"]]) == (case == "rnncell-relu")
    if steps == 1:
        return  # one step fuses to a one-step node; its length stays the export's
    runner = OnnxRuntimeRunner(out)
    rng = np.random.default_rng(zlib.crc32(f"{case}-{steps}".encode()))
    for T, B in ((steps + 3, 3), (1, 3), (2, 3)) if dynamo else ((steps + 3, 3), (1, 1), (2, 2)):
        x = rng.standard_normal((T, B, 4)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        got = runner({runner.input_names[0]: x})[runner.output_names[0]]
        np.testing.assert_allclose(got, want, atol=3e-5)
