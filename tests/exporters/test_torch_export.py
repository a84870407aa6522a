"""rnnx.export against the torch modules it exports: ONNX Runtime at new shapes, op types asserted."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

ort = pytest.importorskip("onnxruntime")

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
    # The self-check ran at batch 1, at everything larger, and with each dynamic axis on its own.
    names = [c.name for c in report.check.cases]
    assert names[1:3] == ["batch=1", "all larger"] and any(n.startswith("seq=") for n in names), names
    assert all(c.passed and not c.skipped for c in report.check.cases)
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


def test_batch_one_examples_export_with_a_dynamic_batch(tmp_path) -> None:
    """torch fixes size-1 dimensions; rnnx traces on a copy grown along those the model
    also runs with, and says so."""
    gru = torch.nn.GRU(3, 4)
    report = rnnx.export(gru, (torch.randn(4, 1, 3),), tmp_path / "g.onnx")
    assert report.passed and report.axes == {"input": {0: "seq", 1: "batch"}}
    assert "grown to 2 along input dim 1" in report.tracing
    assert {c.sizes["batch"] for c in report.check.cases} >= {1, 3}
    session = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    x = torch.randn(9, 6, 3)
    y, h = session.run(None, {"input": x.numpy()})
    want_y, want_h = gru(x)
    np.testing.assert_allclose(y, want_y.detach().numpy(), atol=1e-5)


def test_a_real_size_one_dimension_stays_static(tmp_path) -> None:
    """An image's single channel is not a variable: the model does not run with 2, so it stays 1."""
    class Crnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
            self.rnn = torch.nn.LSTM(4 * 8, 5, bidirectional=True)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            f = self.conv(image)  # (B, 4, 8, W)
            b, c, h, w = f.size()
            return self.rnn(f.view(b, c * h, w).permute(2, 0, 1))[0]

    report = rnnx.export(Crnn().eval(), (torch.randn(1, 1, 8, 20),), tmp_path / "c.onnx")
    assert report.passed, str(report)
    assert report.axes == {"image": {0: "batch", 3: "seq"}}
    dims = onnx.load(str(tmp_path / "c.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 1, 8, "seq"]


def test_opset_below_13_is_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(RNNXError, match=r"^opset: expected 13 to \d+ \(this onnx's newest\), found 12"):
        rnnx.export(torch.nn.GRU(3, 4), (torch.randn(4, 2, 3),), tmp_path / "g.onnx", opset=12)


class Pooled(torch.nn.Module):
    """Reductions, a split and (optionally) a layer norm after a GRU: what broke opset 17."""

    def __init__(self, norm: bool) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(4, 6, batch_first=True)
        self.head = torch.nn.Linear(6, 3)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        a, b = torch.split(y, 3, dim=-1)
        out = self.head(y.mean(1)) + y.max(1).values.sum(-1, keepdim=True) + y.std(1).sum(-1, keepdim=True)
        out = out + y.norm(dim=-1).mean(-1, keepdim=True) + a.sum() - b.sum()
        return torch.nn.functional.layer_norm(out, (3,)) if self.norm else out


# The layer-norm model is the reductions model with a layer norm after it: every opset runs it by
# default; the reductions model alone runs at 17 by default and at every opset with --slow.
@pytest.mark.parametrize(("norm", "opset"), [
    pytest.param(norm, opset, id=f"{'layer-norm' if norm else 'reductions'}-{opset}",
                 marks=pytest.mark.slow if not norm and opset != 17 else ())
    for norm in (False, True) for opset in (14, 15, 16, 17, 18, 20, 23)])
def test_every_opset_exports_reductions_splits_and_norms(tmp_path, opset: int, norm: bool) -> None:
    report = rnnx.export(Pooled(norm).eval(), (torch.randn(1, 5, 4),), tmp_path / "p.onnx", opset=opset)
    assert report.passed and report.opset == opset, str(report)
    proto = onnx.load(str(tmp_path / "p.onnx"))
    assert [o.version for o in proto.opset_import if o.domain == ""] == [opset]
    assert ("LayerNormalization" in {n.op_type for n in proto.graph.node}) == (norm and opset >= 17)


def test_transparent_modules_keep_attributes_methods_and_identity(tmp_path) -> None:
    """Model code that reads the recurrent module's attributes and calls its methods runs
    unchanged while exporting."""
    seen = {}

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True, proj_size=3)
            self.lstm.tag = "mine"
            self.cell = torch.nn.GRUCell(6, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.lstm.flatten_parameters()
            m = self.lstm
            seen.update(isinstance=isinstance(m, torch.nn.LSTM), tag=m.tag, weights=len(m.all_weights), flat=len(m._flat_weights),
                        batch_first=m.batch_first, proj=m.proj_size, cell=self.cell.hidden_size, cls=type(m).__name__)
            d = 2 if m.bidirectional else 1
            h = x.new_zeros(m.num_layers * d, x.size(0), m.proj_size or m.hidden_size)
            c = x.new_zeros(m.num_layers * d, x.size(0), m.hidden_size)
            y, _ = m(x, (h, c))
            return self.cell(y[:, -1], x.new_zeros(x.size(0), self.cell.hidden_size))

    report = rnnx.export(Tagger().eval(), (torch.randn(2, 7, 5),), tmp_path / "t.onnx")
    assert report.passed, str(report)
    assert seen == {"isinstance": True, "tag": "mine", "weights": 2 * 2, "flat": 2 * 2 * 5, "batch_first": True, "proj": 3, "cell": 4, "cls": "LSTM"}


def test_independent_lengths_get_their_own_axes(tmp_path) -> None:
    """An encoder-decoder whose source and target lengths differ: two lengths, one batch."""
    class Seq2Seq(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(11, 6)
            self.enc = torch.nn.GRU(6, 8, batch_first=True)
            self.dec = torch.nn.GRU(6, 8, batch_first=True)
            self.out = torch.nn.Linear(16, 11)

        def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            memory, h = self.enc(self.emb(src))
            y, _ = self.dec(self.emb(tgt), h)
            attn = torch.softmax(y @ memory.transpose(1, 2), dim=-1) @ memory
            return self.out(torch.cat([y, attn], dim=-1))

    src, tgt = torch.randint(0, 11, (3, 9)), torch.randint(0, 11, (3, 6))
    report = rnnx.export(Seq2Seq().eval(), (src, tgt), tmp_path / "s.onnx")
    assert report.passed, str(report)
    assert report.axes == {"src": {0: "batch", 1: "src_seq"}, "tgt": {0: "batch", 1: "tgt_seq"}}
    varied = {c.name for c in report.check.cases}
    assert {"src_seq=12", "tgt_seq=9", "batch=1"} <= varied


def test_axes_from_the_user_override_torch_and_rnnx(tmp_path) -> None:
    gru = torch.nn.GRU(3, 4, batch_first=True)
    x = (torch.randn(2, 6, 3),)
    named = rnnx.export(gru, x, tmp_path / "a.onnx", dynamic={"input": {1: "frames"}}, static={"input": [0]}, input_names=["feats"], output_names=["y", "h"])
    assert named.passed and named.axes == {"feats": {1: "frames"}}
    proto = onnx.load(str(tmp_path / "a.onnx"))
    assert [i.name for i in proto.graph.input] == ["feats"] and [o.name for o in proto.graph.output] == ["y", "h"]
    assert [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == [2, "frames", 3]
    from torch.export import Dim

    passed = rnnx.export(gru, x, tmp_path / "b.onnx", dynamic_shapes=({0: Dim("n"), 1: Dim("t")},))
    assert passed.passed and passed.axes == {"input": {0: "n", 1: "t"}}
    with pytest.raises(RNNXError, match="expected an input name among input, found 'x'"):
        rnnx.export(gru, x, tmp_path / "c.onnx", dynamic={"x": {1: None}})


def test_a_failing_self_check_writes_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong translation (the GRU's reset mode flipped) is caught at every shape and no file is left."""
    from rnnx.exporters import ops, torchscript_route

    wrong = ops.TRANSLATIONS[torch.ops.rnnx.gru.default]
    monkeypatch.setitem(ops.TRANSLATIONS, torch.ops.rnnx.gru.default,
                        lambda x, w, r, b, lens, h0, hidden_size, direction, linear_before_reset: wrong(x, w, r, b, lens, h0, hidden_size, direction, 1 - linear_before_reset))
    path = tmp_path / "g.onnx"
    # The second route (torch.onnx's TorchScript exporter) translates the GRU right: it writes
    # the file, and the report says the first route's file failed its check.
    report = rnnx.export(torch.nn.GRU(3, 4), (torch.randn(5, 2, 3),), path)
    assert report.passed and report.route == torchscript_route.ROUTE and path.exists()
    assert any("failed its self-check" in n and "differs from torch" in n for n in report.notes), report.notes
    path.unlink()

    def refuse(*args, **kwargs):
        raise RNNXError("the second route is off for this test")

    monkeypatch.setattr(torchscript_route, "translate", refuse)
    with pytest.raises(rnnx.ExportCheckFailed) as failed:
        rnnx.export(torch.nn.GRU(3, 4), (torch.randn(5, 2, 3),), path)
    report = failed.value.report
    assert not report.passed and not report.written and not path.exists() and list(tmp_path.iterdir()) == []
    assert "differs from torch" in report.check.failure() and "input: " in report.check.failure()


def test_the_file_records_its_recurrences(tmp_path) -> None:
    from rnnx.formats.onnx_metadata import read_metadata

    case = CASES[0]
    rnnx.export(case.make(), case.example(), tmp_path / "m.onnx", output_names=["logits", "h_n", "c_n"])
    export, recurrences = read_metadata(onnx.load(str(tmp_path / "m.onnx")))
    assert export["inputs"] == {"x": ["seq", "batch", 6], "h0": [4, "batch", 10], "c0": [4, "batch", 10]}
    assert export["roles"] == {"seq": "length", "batch": "batch"}
    (rec,) = recurrences
    assert rec["module"] == "rnn" and rec["spec"] == "lstm,input=8,hidden=10,layers=2,bidirectional" and rec["layout"] == "seq_first"
    assert rec["inputs"] == {"X": ["x"], "initial_h": ["h0"], "initial_c": ["c0"]}
    assert rec["outputs"] == {"Y": ["logits"], "Y_h": ["h_n"], "Y_c": ["c_n"]}
    assert len(rec["nodes"]) == 2


def test_stepped_cell_fuses_into_one_node_with_dynamic_length(tmp_path) -> None:
    case = next(c for c in CASES if c.name == "lstmcell-stepped")
    report = rnnx.export(case.make(), case.example(), tmp_path / "c.onnx")
    assert report.fused == [{"op": "LSTM", "steps": 7, "source": "x", "axis": 0, "node": report.fused[0]["node"], "stack": "output",
                              "steps_outputs": {"output": 0}, "dynamic_seq": True, "seq_label": "seq"}]
    proto = onnx.load(str(tmp_path / "c.onnx"))
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "seq"
    assert len(proto.graph.node) < 10  # torch.onnx's TorchScript exporter writes 1,803 nodes for 100 steps
    assert {c.sizes["seq"] for c in report.check.cases} == {3, 7, 10}


class TeacherForced(torch.nn.Module):
    """A decoder loop that applies a layer norm, an activation and a Linear to every step's h."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(4, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.proj = torch.nn.Linear(6, 3)
        self.drop = torch.nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.size(1), self.cell.hidden_size)
        c = torch.zeros_like(h)
        outs = []
        for t in range(x.size(0)):
            h, c = self.cell(x[t], (h, c))
            outs.append(self.proj(self.drop(torch.tanh(self.norm(h)))))
        return torch.stack(outs)


def test_per_step_operations_do_not_prevent_fusion(tmp_path) -> None:
    model = TeacherForced().eval()
    report = rnnx.export(model, (torch.randn(6, 1, 4),), tmp_path / "t.onnx")
    assert report.passed, str(report)
    (fused,) = report.fused
    assert fused["steps"] == 6 and fused["dynamic_seq"] and fused["hoisted"] == ["LayerNormalization", "Tanh", "Gemm"]
    assert report.axes == {"x": {0: "seq", 1: "batch"}} and not report.unrolled_cells
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "t.onnx")).graph.node)
    assert ops["LSTM"] == 1 and ops["Gemm"] == 1 and ops["LayerNormalization"] == 1
    session = ort.InferenceSession(str(tmp_path / "t.onnx"), providers=["CPUExecutionProvider"])
    x = torch.randn(11, 4, 4)
    (got,) = session.run(None, {"x": x.numpy()})
    np.testing.assert_allclose(got, model(x).detach().numpy(), atol=1e-5)


class BatchFirstDecoder(torch.nn.Module):
    """The batch-first loop published decoders write: x[:, t], a head per step, stack on dim 1."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.GRUCell(8, 16)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.size(0), 16)
        outs = []
        for t in range(x.size(1)):
            h = self.cell(x[:, t], h)
            outs.append(torch.log_softmax(self.out(h), dim=-1))
        return torch.stack(outs, 1)


def test_batch_first_cell_loops_fuse_too(tmp_path) -> None:
    model = BatchFirstDecoder().eval()
    report = rnnx.export(model, (torch.randn(1, 7, 8),), tmp_path / "d.onnx")
    assert report.passed and report.native_nodes == 1 and not report.unrolled_cells, str(report)
    assert report.axes == {"x": {0: "batch", 1: "seq"}}
    proto = onnx.load(str(tmp_path / "d.onnx"))
    assert [d.dim_param or d.dim_value for d in proto.graph.output[0].type.tensor_type.shape.dim] == ["batch", "seq", 5]
    session = ort.InferenceSession(str(tmp_path / "d.onnx"), providers=["CPUExecutionProvider"])
    x = torch.randn(4, 13, 8)
    np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], model(x).detach().numpy(), atol=1e-5)


class Autoregressive(torch.nn.Module):
    """Each step's input is the last step's output (through a prenet), with attention over a memory."""

    def __init__(self, steps: int = 4) -> None:
        super().__init__()
        self.steps = steps
        self.prenet = torch.nn.Linear(3, 5)
        self.cell = torch.nn.LSTMCell(5 + 6, 6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, memory: torch.Tensor) -> torch.Tensor:
        frame = memory.new_zeros(memory.size(0), 3)
        h = memory.new_zeros(memory.size(0), 6)
        c = torch.zeros_like(h)
        frames = []
        for _ in range(self.steps):
            context = (torch.softmax((memory @ h.unsqueeze(-1)).squeeze(-1), dim=1).unsqueeze(1) @ memory).squeeze(1)
            h, c = self.cell(torch.cat([torch.relu(self.prenet(frame)), context], dim=-1), (h, c))
            frame = self.out(h)
            frames.append(frame)
        return torch.stack(frames, dim=1)


def test_an_autoregressive_loop_keeps_its_steps_and_every_other_axis_dynamic(tmp_path) -> None:
    report = rnnx.export(Autoregressive().eval(), (torch.randn(1, 7, 6),), tmp_path / "a.onnx")
    assert report.passed, str(report)
    assert report.axes == {"memory": {0: "batch", 1: "memory_dim1"}}
    assert report.unrolled_cells == ["cell"] and any("step count is fixed" in n and "autoregressive loop" in n for n in report.notes)
    assert {c.name for c in report.check.cases} >= {"batch=1", "memory_dim1=9"}
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "a.onnx")).graph.node)
    assert ops["LSTM"] == 4 and not UNROLLED_OPS - {"Gemm"} & set(ops)


def test_a_chain_with_side_uses_is_re_rolled_or_kept_at_its_length_when_asked(tmp_path) -> None:
    # the model runs at any length: the unrolled steps (which native-node fusion declines, for the
    # side use) are re-rolled into one Loop with the length dynamic, checked by the self-check at other lengths
    report = rnnx.export(SteppedWithSideUse(), (torch.randn(5, 3, 4),), tmp_path / "s.onnx")
    assert report.passed and report.axes == {"x": {0: "seq", 1: "batch"}}, str(report)
    assert {"shorter", "seq=8"} <= {c.name for c in report.check.cases}
    assert any("re-rolled into one ONNX Loop" in n for n in report.notes), report.notes
    assert collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "s.onnx")).graph.node)["Loop"] == 1
    # asked static, the file keeps the example's length and says why
    report = rnnx.export(SteppedWithSideUse(), (torch.randn(5, 3, 4),), tmp_path / "s.onnx", static={"x": [0]})
    assert report.passed and not report.fused and report.unrolled_cells == ["cell"]
    assert {"input": "x", "dim": 0, "size": 5, "verdict": "static: asked"}.items() <= report.check.dims[0].items()
    assert any("per-step Add reads" in n and "neither the step's h nor a constant" in n for n in report.notes), report.notes
    assert report.axes == {"x": {1: "batch"}}  # the graph keeps the example's length, and says why
    assert any("step count is fixed" in n for n in report.notes)
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "s.onnx")).graph.node)
    assert ops["GRU"] == 5 and not UNROLLED_OPS & set(ops)  # one native node per step, not decomposed


def test_a_cell_called_once_stays_a_one_step_node(tmp_path) -> None:
    report = rnnx.export(CalledOnce().eval(), (torch.randn(3, 4), torch.randn(3, 6), torch.randn(3, 6)), tmp_path / "o.onnx")
    assert report.passed and not report.unrolled_cells and not report.notes
    assert report.axes == {"x": {0: "batch"}, "h": {0: "batch"}, "c": {0: "batch"}}
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "o.onnx")).graph.node)
    assert ops["LSTM"] == 1 and not UNROLLED_OPS & set(ops)


def test_large_weights_go_to_external_data(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the protobuf limit weights are written as external data (limit lowered for the test)."""
    from rnnx.formats import onnx_build as build

    monkeypatch.setattr(build, "EXTERNAL_DATA_BYTES", 1000)
    path = tmp_path / "big.onnx"
    report = rnnx.export(torch.nn.LSTM(16, 32), (torch.randn(4, 2, 16),), path)
    assert report.external_data and report.passed
    assert (tmp_path / "big.onnx.data").stat().st_size > 1000
    assert path.stat().st_size < 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]


def test_weights_in_constants_count_toward_external_data(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A projected LSTM keeps its weights in Constant nodes beside and inside its Scans; they
    count toward the limit and go to external data like initializers."""
    from rnnx.formats import onnx_build as build

    monkeypatch.setattr(build, "EXTERNAL_DATA_BYTES", 1000)
    path = tmp_path / "proj.onnx"
    report = rnnx.export(torch.nn.LSTM(16, 32, proj_size=8), (torch.randn(4, 2, 16),), path)
    assert report.external_data and report.passed
    model = onnx.load(str(path), load_external_data=False)
    assert not model.graph.initializer or all(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer if t.ByteSize() > 1024)
    assert (tmp_path / "proj.onnx.data").stat().st_size > 16 * 32 * 4 * 4


def test_export_after_a_torchscript_export_in_the_same_process(tmp_path) -> None:
    """torch.onnx's own down-conversion fails once its TorchScript exporter has run; rnnx's does not."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.nn.LSTM(8, 16).eval(), (torch.randn(5, 2, 8),), str(tmp_path / "ts.onnx"), dynamo=False, opset_version=17)
    report = rnnx.export(torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True), (torch.randn(5, 3, 8),), tmp_path / "m.onnx")
    assert report.passed and report.opset == 17


def test_torchscript_files_export_with_native_nodes(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.main import main

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
    # in-process, as users' notebooks call it: tests/test_cli.py runs the export verb as a subprocess
    code = main(["export", str(scripted), "--input", "3x6x4", "-o", str(tmp_path / "t.onnx"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    import json

    report = json.loads(out)
    assert report["op_types"]["GRU"] == 2 and report["check"]["passed"]
    assert {c["name"] for c in report["check"]["cases"]} == {"the example as given", "batch=1", "all larger", "shorter", "seq=9"}
    state_dict = tmp_path / "sd.pt"
    torch.save(Tagger().state_dict(), state_dict)
    code = main(["export", str(state_dict), "--input", "3x6x4", "-o", str(tmp_path / "u.onnx")])
    assert code == 2 and "not a TorchScript file" in capsys.readouterr().err


class Spectrogram(torch.nn.Module):
    """DeepSpeech-style: the frequency axis reaches the GRU's input size through a strided
    conv, which torch cannot pin, so it offers it as dynamic; only 40 works."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(1, 4, (5, 3), stride=(2, 1), padding=(2, 1)), torch.nn.Hardtanh(0, 20))
        self.rnn = torch.nn.GRU(4 * 20, 8, bidirectional=True)

    def forward(self, spect: torch.Tensor) -> torch.Tensor:
        x = self.conv(spect.unsqueeze(1))
        b, c, f, t = x.size()
        return self.rnn(x.view(b, c * f, t).permute(2, 0, 1))[0]


def test_a_dimension_the_model_refuses_to_vary_is_made_static(tmp_path) -> None:
    report = rnnx.export(Spectrogram().eval(), (torch.randn(2, 40, 50),), tmp_path / "s.onnx")
    assert report.passed and report.axes == {"spect": {0: "batch", 2: "seq"}}, str(report)
    assert any(n.startswith("spect_dim1 is static at 40") for n in report.notes)
    assert all(not c.skipped for c in report.check.cases)
    dims = onnx.load(str(tmp_path / "s.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 40, "seq"]


def test_user_mistakes_are_one_line(tmp_path) -> None:
    with pytest.raises(RNNXError, match="float64, which ONNX Runtime and TensorRT have no LSTM/GRU/RNN kernels for; export a float32 copy"):
        rnnx.export(torch.nn.GRU(3, 4).double(), (torch.randn(5, 2, 3, dtype=torch.float64),), tmp_path / "d.onnx")
    with pytest.raises(RNNXError, match="is a folder"):
        rnnx.export(torch.nn.GRU(3, 4), (torch.randn(5, 2, 3),), tmp_path)
    with pytest.raises(RNNXError, match="expected a torch.nn.Module, found a function"):
        rnnx.export(lambda x: x, (torch.randn(5, 2, 3),), tmp_path / "f.onnx")
    with pytest.raises(RNNXError, match="distinct names"):
        rnnx.export(torch.nn.GRU(3, 4), (torch.randn(5, 2, 3),), tmp_path / "g.onnx", output_names=["y", "y"])
    with pytest.raises(RNNXError, match="asked to be both dynamic and static"):
        rnnx.export(torch.nn.GRU(3, 4), (torch.randn(5, 2, 3),), tmp_path / "g.onnx", dynamic={"input": {0: None}}, static={"input": [0]})
    report = rnnx.export(torch.nn.GRU(3, 4).train(), (torch.randn(5, 2, 3),), tmp_path / "t.onnx")
    assert report.passed and any("training mode" in n for n in report.notes)
    from rnnx.exporters.loading import load_model

    (tmp_path / "boom.py").write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(RNNXError, match=r"importing .*boom.py raised RuntimeError: boom at import"):
        load_model(f"{tmp_path / 'boom.py'}:X")
