"""rnnx.export against the torch modules it exports: ONNX Runtime at new shapes, op types asserted."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

import rnnx  # noqa: E402
from rnnx import RNNXError  # noqa: E402
from rnnx.engines.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from tests.exporters.models import CASES, CalledOnce, Case, SteppedWithSideUse  # noqa: E402

UNROLLED_OPS = {"Sigmoid", "Tanh", "Gemm"}  # what a decomposed cell leaves in the main graph


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_export_is_native_dynamic_and_matches_torch(case: Case, tmp_path) -> None:
    torch.manual_seed(0)
    model = case.make()
    path = tmp_path / f"{case.name}.onnx"
    report = rnnx.export(model, case.example(), path)
    assert report.passed, str(report)
    # The self-check ran at two (seq, batch) pairs, both unlike the example's.
    shapes = {(r.seq_len, r.batch) for r in report.check.rows}
    assert len(shapes) == 2 and all(r.passed for r in report.check.rows)
    proto = onnx.load(str(path))
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert ops[case.native] >= 1, ops
    assert not UNROLLED_OPS & set(ops), f"unrolled cell ops in the main graph: {ops}"
    assert proto.opset_import[0].version == 17
    # Independently of the report: run ONNX Runtime here at yet another shape.
    _check_again(model, case, path, seq=9, batch=5)


def _check_again(model, case: Case, path, seq: int, batch: int) -> None:
    from torch.utils._pytree import tree_flatten

    example = case.example()
    gen = torch.Generator().manual_seed(42)
    new = []
    for x in example:
        if x.is_floating_point():
            shape = list(x.shape)
            if x.dim() == 3 and x.shape[0] in (2, 4) and x is not example[0]:
                shape[1] = batch
            elif getattr(model, "batch_first", False) or case.name == "packed-sequence":
                shape[0], shape[1] = batch, seq
            else:
                shape[0], shape[1] = seq, batch
            new.append(torch.randn(*shape, generator=gen))
        else:
            lens = torch.sort(torch.randint(1, seq + 1, (batch,), generator=gen), descending=True).values
            lens[0] = seq
            new.append(lens)
    model.eval()
    with torch.no_grad():
        want, _ = tree_flatten(model(*new))
    runner = OnnxRuntimeRunner(path)
    got = runner(dict(zip(runner.input_names, [x.numpy() for x in new])))
    for name, w in zip(runner.output_names, want):
        np.testing.assert_allclose(got[name], w.numpy(), atol=3e-5, err_msg=name)


def test_user_model_is_untouched(tmp_path) -> None:
    case = CASES[0]
    model = case.make().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rnnx.export(model, case.example(), tmp_path / "m.onnx")
    assert model.training and isinstance(model.rnn, torch.nn.LSTM)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("opset", [14, 17, 18, 20])
def test_opset_choice(tmp_path, opset: int) -> None:
    report = rnnx.export(torch.nn.GRU(3, 4), (torch.randn(4, 2, 3),), tmp_path / "g.onnx", opset=opset)
    assert report.opset == opset and report.passed


def test_size_one_example_axes_are_refused(tmp_path) -> None:
    with pytest.raises(RNNXError, match="batch axis .* is 1 in the example"):
        rnnx.export(torch.nn.GRU(3, 4), (torch.randn(4, 1, 3),), tmp_path / "g.onnx")
    assert not (tmp_path / "g.onnx").exists()


def test_stepped_cell_fuses_into_one_node_with_dynamic_length(tmp_path) -> None:
    case = next(c for c in CASES if c.name == "lstmcell-stepped")
    report = rnnx.export(case.make(), case.example(), tmp_path / "c.onnx")
    assert report.fused == [{"op": "LSTM", "steps": 7, "source": "x", "node": report.fused[0]["node"], "stack": "output_0", "dynamic_seq": True}]
    proto = onnx.load(str(tmp_path / "c.onnx"))
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "seq"
    assert len(proto.graph.node) < 10  # torch.onnx's TorchScript exporter writes 1,803 nodes for 100 steps
    assert {r.seq_len for r in report.check.rows} == {13, 24}


def test_a_chain_with_side_uses_is_left_alone_with_a_reason(tmp_path) -> None:
    report = rnnx.export(SteppedWithSideUse(), (torch.randn(5, 3, 4),), tmp_path / "s.onnx")
    assert report.passed and not report.fused and report.unrolled_cells == ["cell"]
    assert any("h is used outside the chain" in n for n in report.notes), report.notes
    assert {r.seq_len for r in report.check.rows} == {5}  # the graph keeps the example's length
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "s.onnx")).graph.node)
    assert ops["GRU"] == 5 and not UNROLLED_OPS & set(ops)  # one native node per step, not decomposed


def test_a_cell_called_once_stays_a_one_step_node(tmp_path) -> None:
    report = rnnx.export(CalledOnce(), (torch.randn(3, 4), torch.randn(3, 6), torch.randn(3, 6)), tmp_path / "o.onnx",
                         dynamic_axes=[{0: "batch"}] * 3)
    assert report.passed and not report.unrolled_cells and not report.notes
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "o.onnx")).graph.node)
    assert ops["LSTM"] == 1 and not UNROLLED_OPS & set(ops)


def test_large_weights_go_to_external_data(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the protobuf limit weights are written as external data (limit lowered for the test)."""
    from rnnx.graphs import build

    monkeypatch.setattr(build, "EXTERNAL_DATA_BYTES", 1000)
    path = tmp_path / "big.onnx"
    report = rnnx.export(torch.nn.LSTM(16, 32), (torch.randn(4, 2, 16),), path)
    assert report.external_data and report.passed
    assert (tmp_path / "big.onnx.data").stat().st_size > 1000
    assert path.stat().st_size < 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]


def test_export_after_a_torchscript_export_in_the_same_process(tmp_path) -> None:
    """torch.onnx's own down-conversion fails once its TorchScript exporter has run; rnnx's does not."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.nn.LSTM(8, 16).eval(), (torch.randn(5, 2, 8),), str(tmp_path / "ts.onnx"), dynamo=False, opset_version=17)
    report = rnnx.export(torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True), (torch.randn(5, 3, 8),), tmp_path / "m.onnx")
    assert report.passed and report.opset == 17


def test_torchscript_files_export_with_native_nodes(tmp_path) -> None:
    import subprocess
    import sys

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.GRU(4, 5, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.rnn(x)
            return self.head(y)

    scripted = tmp_path / "tagger.ts.pt"
    torch.jit.script(Tagger()).save(str(scripted))
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "export", str(scripted), "--input", "3x6x4", "-o", str(tmp_path / "t.onnx"), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    report = json.loads(out.stdout)
    assert report["op_types"]["GRU"] == 2 and report["check"]["passed"]
    assert {(r["seq_len"], r["batch"]) for r in report["check"]["rows"]} == {(12, 7), (23, 4)}
    state_dict = tmp_path / "sd.pt"
    torch.save(Tagger().state_dict(), state_dict)
    bad = subprocess.run([sys.executable, "-m", "rnnx.cli", "export", str(state_dict), "--input", "3x6x4", "-o", str(tmp_path / "u.onnx")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not a TorchScript file" in bad.stderr
