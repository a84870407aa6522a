"""rnnx fuse on GRU cells written as published code writes them, in other algebraic forms than
PyTorch's GRUCell: reset before or after the recurrent product, the output as
``(1-z)*n + z*h``, ``n + z*(h-n)`` or with z meaning the other way round, ``z*n + (1-z)*h``.
Each, stepped in a Python loop, must become one GRU node that torch itself is the judge of."""

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


class WrittenGRU(nn.Module):
    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form
        self.Wz, self.Wr, self.Wn = (nn.Linear(4, 5) for _ in range(3))
        self.Uz, self.Ur, self.Un = (nn.Linear(5, 5, bias=form != "reset-before") for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[1], 5)
        ys = []
        for t in range(x.shape[0]):
            z = torch.sigmoid(self.Wz(x[t]) + self.Uz(h))
            r = torch.sigmoid(self.Wr(x[t]) + self.Ur(h))
            if self.form == "reset-before":
                n = torch.tanh(self.Wn(x[t]) + self.Un(r * h))
            else:
                n = torch.tanh(self.Wn(x[t]) + r * self.Un(h))
            if self.form == "z-swapped":
                h = z * n + (1 - z) * h
            elif self.form == "lerp":
                h = n + z * (h - n)
            else:
                h = (1 - z) * n + z * h
            ys.append(h)
        return torch.stack(ys)


@pytest.mark.parametrize("form", ["reset-after", "reset-before", "z-swapped", "lerp"])
def test_gru_written_another_way_becomes_one_gru_node(tmp_path, form: str) -> None:
    torch.manual_seed(zlib.crc32(form.encode()))
    model = WrittenGRU(form).eval()
    src, out = tmp_path / "unrolled.onnx", tmp_path / "fused.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(3, 2, 4),), str(src), dynamo=False, opset_version=17, input_names=["x"], dynamic_axes={"x": {1: "batch"}})
    report = fuse_file(src, out)
    assert report.check and len(report.cells) == 3 and report.chains and not report.left_alone, str(report)
    graph = onnx.load(str(out)).graph
    ops = collections.Counter(n.op_type for n in graph.node)
    assert ops["GRU"] == 1 and not {"Sigmoid", "Tanh", "Gemm", "MatMul", "Mul"} & set(ops), ops
    (node,) = [n for n in graph.node if n.op_type == "GRU"]
    lbr = next((a.i for a in node.attribute if a.name == "linear_before_reset"), 0)
    assert lbr == (0 if form == "reset-before" else 1)
    runner = OnnxRuntimeRunner(out)
    rng = np.random.default_rng(zlib.crc32(f"{form}-run".encode()))
    for T, B in ((8, 2), (1, 1), (5, 1)):
        x = rng.standard_normal((T, B, 4)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(runner({"x": x})[runner.output_names[0]], want, atol=3e-5)
