"""The dimension audit (rnnx.exporters.audit): every shape the torch model accepts, the file
accepts, or the export says by name why not.

Each model below is written the way other authors' packages write it (the failure classes
found on them: an input the API passes and the model never reads, a batch-1 example whose
second size-1 axis the forward squeezes, a branch on an episode-start mask, a recurrence
written as a Python loop, twin recurrences of one size, token ids with padding). Each is
exported from a batch-3 and from a batch-1 example with no axes given, and the file is run in
ONNX Runtime at three shapes the example does not have, against torch eager.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.formats.onnx_metadata import EXPORT_KEY, read_metadata, set_metadata  # noqa: E402
from tests.helpers import MadeOnFirstUse, model_file, rnnx_in_process  # noqa: E402

MODELS = '''
import torch
from torch import nn


class OCR(nn.Module):
    """A CRNN recogniser whose forward takes the text too (training passes it; inference ignores it)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((1, None))
        self.rnn = nn.LSTM(4, 6, batch_first=True, bidirectional=True)
        self.head = nn.Linear(12, 7)

    def forward(self, image, text):
        features = self.pool(torch.relu(self.conv(image))).squeeze(2).permute(0, 2, 1)
        return self.head(self.rnn(features)[0])


class Enhancer(nn.Module):
    """A speech enhancer fed a complex spectrum (B, 1, T, F, 2) and a magnitude (B, 1, T, F)."""

    def __init__(self, freq=8):
        super().__init__()
        self.rnn = nn.LSTM(3 * freq, 10, batch_first=True)
        self.mask = nn.Linear(10, freq)

    def forward(self, spec, mag):
        spec, mag = spec.squeeze(1), mag.squeeze(1)
        b, t, f, _ = spec.shape
        y, _ = self.rnn(torch.cat([spec.reshape(b, t, 2 * f), mag], -1))
        return torch.sigmoid(self.mask(y)) * mag


class Policy(nn.Module):
    """A recurrent policy that skips the per-step reset loop when no episode starts."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8)
        self.pi = nn.Linear(8, 3)

    def forward(self, obs, h, c, episode_starts):
        n = h.shape[1]
        x, starts = obs.reshape(-1, n, 4), episode_starts.reshape(-1, n)
        if torch.all(starts == 0.0):
            y, (h, c) = self.lstm(x, (h, c))
        else:
            ys = []
            for t in range(x.shape[0]):
                keep = (1.0 - starts[t]).view(1, n, 1)
                yt, (h, c) = self.lstm(x[t:t + 1], (h * keep, c * keep))
                ys.append(yt)
            y = torch.cat(ys)
        return self.pi(y.reshape(-1, 8)), h, c


class HandLSTM(nn.Module):
    """An LSTM written from Linear layers and gate chunks, looped over time in Python."""

    def __init__(self):
        super().__init__()
        self.ih = nn.Linear(5, 24)
        self.hh = nn.Linear(6, 24, bias=False)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        h = c = x.new_zeros(x.shape[0], 6)
        for t in range(x.size(1)):
            i, f, g, o = (self.ih(x[:, t]) + self.hh(h)).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.head(h)


class LayerNormLSTM(HandLSTM):
    """The same loop with layer-normalised gates (as speech toolkits ship): no ONNX node computes it."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(24)

    def forward(self, x):
        h = c = x.new_zeros(x.shape[0], 6)
        for t in range(x.size(1)):
            i, f, g, o = self.norm(self.ih(x[:, t]) + self.hh(h)).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.head(h)


class TwinRNN(nn.Module):
    """Two recurrences of one size, one forward in time and one backward (as imputation
    models run them); a check on the data first, which torch.export cannot trace."""

    def __init__(self):
        super().__init__()
        self.rnn_f = nn.LSTM(4, 8, batch_first=True)
        self.rnn_b = nn.LSTM(4, 8, batch_first=True)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        if bool(torch.isnan(x).any()):
            x = torch.nan_to_num(x)
        f, _ = self.rnn_f(x)
        b, _ = self.rnn_b(x.flip(1))
        return self.out(torch.cat([f, b.flip(1)], -1))


class MaskedAttention(nn.Module):
    """Self-attention over an LSTM's outputs, its energies masked in place through .data (as
    Tacotron 2's Attention masks its alignment)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(5, 8, batch_first=True)
        self.q = nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x, mask):
        h, _ = self.rnn(x)
        energies = self.q(h) @ h.transpose(1, 2)
        energies.data.masked_fill_(~mask[:, None, :], -float("inf"))
        return self.out(torch.softmax(energies, -1) @ h)


class LogIds(nn.Module):
    """A tagger finite only on ids of 1 and above (id 0 is reserved): log-scaled embeddings."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.rnn = nn.GRU(6, 8, batch_first=True)
        self.out = nn.Linear(8, 3)

    def forward(self, ids):
        x = self.emb(ids) * torch.log(ids.float())[..., None]
        return self.out(self.rnn(x)[0])
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("audit") / "authors.py"
    return path, model_file(path, MODELS)


def _from_batch_1(folder: Path, ns: dict, name: str) -> tuple[Path, Any]:
    """``name`` exported from a batch-1 example, weights seeded with 0 and saved beside it
    (``name``.pt): the file and the export's report."""
    torch.manual_seed(0)
    model = ns[name]().eval()
    torch.save(model.state_dict(), folder / f"{name}.pt")
    example = CASES[name](ns, 1, 6, torch.Generator().manual_seed(0)) if name in CASES else (torch.randn(1, 6, 5),)
    return folder / f"{name}.onnx", rnnx.export(model, example, folder / f"{name}.onnx")


@pytest.fixture(scope="module")
def from_batch_1(models, tmp_path_factory: pytest.TempPathFactory) -> MadeOnFirstUse:
    """One export per model for the tests that read the same batch-1 file (none changes it)."""
    _, ns = models
    folder = tmp_path_factory.mktemp("batch1")
    return MadeOnFirstUse({name: (lambda name=name: _from_batch_1(folder, ns, name)) for name in ("OCR", "Enhancer", "MaskedAttention", "HandLSTM")})


def _ocr(ns: dict, b: int, t: int, g: torch.Generator) -> tuple:
    return torch.randn(b, 1, 8, t, generator=g), torch.randint(2, 9, (b, 5), generator=g)


def _enhancer(ns: dict, b: int, t: int, g: torch.Generator) -> tuple:
    return torch.randn(b, 1, t, 8, 2, generator=g), torch.rand(b, 1, t, 8, generator=g)


def _masked(ns: dict, b: int, t: int, g: torch.Generator) -> tuple:
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0] = t
    return torch.randn(b, t, 5, generator=g), torch.arange(t)[None, :] < lengths[:, None]


CASES = {"OCR": _ocr, "Enhancer": _enhancer, "MaskedAttention": _masked}


def _run_file(path: Path, inputs: tuple) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})


@pytest.mark.parametrize("batch", [3, 1])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_file_takes_every_batch_and_length_the_model_takes(models, tmp_path: Path, name: str, batch: int) -> None:
    _, ns = models
    torch.manual_seed(0)
    model = ns[name]().eval()
    g = torch.Generator().manual_seed(1)
    report = rnnx.export(model, CASES[name](ns, batch, 6, g), tmp_path / "m.onnx")
    assert report.passed and report.written, str(report)
    dims = {(d["input"], d["dim"]): d for d in report.check.dims}
    assert not [d for d in dims.values() if d["verdict"] == "missed"]
    for b, t in [(1, 4), (2, 9), (5, 13)]:
        inputs = CASES[name](ns, b, t, torch.Generator().manual_seed(b * 100 + t))
        with torch.no_grad():
            want = model(*inputs)
        got = _run_file(tmp_path / "m.onnx", inputs)
        np.testing.assert_allclose(got[0], want.numpy(), atol=1e-5, rtol=1e-4, err_msg=f"batch {b}, length {t}")
    # the self-check ran a shape other than the example's for each dynamic dimension
    for d in dims.values():
        if d["verdict"] == "dynamic":
            assert any(case["shapes"][d["input"]][d["dim"]] != d["size"] for case in report.check.to_json()["cases"]), d


def test_an_input_the_model_never_reads_takes_any_size_and_its_batch_stays_tied(from_batch_1: MadeOnFirstUse) -> None:
    path, report = from_batch_1["OCR"]
    shapes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(str(path)).graph.input}
    assert shapes["text"] == ["batch", "text_dim1"] and shapes["image"][0] == "batch"
    text = [d for d in report.check.dims if d["input"] == "text"]
    assert all(d["verdict"] == "dynamic" and "never reads" in d["why"] for d in text)
    assert any("inputs the file never reads take any size: text[0=batch, 1=text_dim1]" in n for n in report.notes)


def test_an_input_that_reaches_only_a_branch_condition_is_kept_and_the_traced_branch_refused(models, tmp_path: Path) -> None:
    _, ns = models
    policy = ns["Policy"]().eval()
    example = (torch.randn(18, 4), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(18))
    with pytest.raises(rnnx.ExportCheckFailed) as raised:
        rnnx.export(policy, example, tmp_path / "p.onnx")
    line = str(raised.value)
    assert "the file ignores input episode_starts, but torch's outputs change when episode_starts is all 1s" in line
    assert "torch.cond" in line and "\n" not in line
    assert not (tmp_path / "p.onnx").exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("batch", [3, 1])
def test_a_hand_written_lstm_loop_becomes_one_native_node_over_any_length(models, tmp_path: Path, batch: int) -> None:
    _, ns = models
    torch.manual_seed(0)
    model = ns["HandLSTM"]().eval()
    report = rnnx.export(model, (torch.randn(batch, 5, 5),), tmp_path / "h.onnx")
    assert report.passed and report.axes["x"][1] == "seq", str(report)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "h.onnx")).graph.node]
    assert ops.count("LSTM") == 1 and "Sigmoid" not in ops  # one node over the sequence, not five steps
    for b, t in [(1, 4), (2, 9), (5, 13)]:
        x = torch.randn(b, t, 5, generator=torch.Generator().manual_seed(t))
        with torch.no_grad():
            np.testing.assert_allclose(_run_file(tmp_path / "h.onnx", (x,))[0], model(x).numpy(), atol=1e-5, rtol=1e-4)


def test_a_hand_written_loop_no_node_computes_is_rerolled_not_written_at_the_example_length(models, tmp_path: Path) -> None:
    # the audit finds a Python loop over x dim 1; the unrolled steps are re-rolled into one
    # ONNX Loop (rnnx.graphs.reroll), so the file takes the lengths the model runs with
    _, ns = models
    report = rnnx.export(ns["LayerNormLSTM"]().eval(), (torch.randn(2, 5, 5),), tmp_path / "h.onnx")
    assert report.passed and report.written, str(report)
    by = {(d["input"], d["dim"]): d for d in report.check.dims}
    assert by[("x", 1)]["verdict"] == "dynamic" and by[("x", 1)]["role"] == "length"
    assert any("a Python loop over x dim 1" in n and "re-rolled into one ONNX Loop" in n for n in report.notes), report.notes
    assert [n.op_type for n in onnx.load(str(tmp_path / "h.onnx")).graph.node].count("Loop") == 1


def test_a_dimension_the_model_requires_is_static_and_said_so(models, tmp_path: Path) -> None:
    _, ns = models
    report = rnnx.export(ns["Enhancer"]().eval(), _enhancer(ns, 2, 6, torch.Generator().manual_seed(0)), tmp_path / "e.onnx")
    by = {(d["input"], d["dim"]): d for d in report.check.dims}
    assert by[("spec", 1)]["verdict"] == "static: required" and by[("spec", 4)]["verdict"] == "static: required"
    assert by[("spec", 0)]["verdict"] == "dynamic" and by[("spec", 0)]["label"] == by[("mag", 0)]["label"] == "batch"
    assert "dimensions, asked of the torch model:" in str(report)


def test_twin_recurrences_of_one_size_are_paired_by_provenance(models, tmp_path: Path) -> None:
    # torch.export cannot trace the data check, so the TorchScript exporter makes the file;
    # its nodes are named after their modules' call scopes, which the record reads
    _, ns = models
    torch.manual_seed(3)
    report = rnnx.export(ns["TwinRNN"]().eval(), (torch.randn(2, 6, 4),), tmp_path / "t.onnx")
    assert report.passed and "TorchScript" in report.route, str(report)
    records = json.loads({p.key: p.value for p in onnx.load(str(tmp_path / "t.onnx")).metadata_props}["rnnx.recurrences"])
    assert {r["module"]: r["nodes"] for r in records} == {"rnn_f": ["/rnn_f/LSTM"], "rnn_b": ["/rnn_b/LSTM"]}
    assert [la["truth"] for la in report.check.layers] == ["torch module 'rnn_f'", "torch module 'rnn_b'"]


def test_by_spec_a_layer_two_modules_could_own_is_not_paired_on_a_guess(models) -> None:
    # a file of another exporter (no record), two layers each of which either module could own
    from rnnx.verify.layers import find_layers
    from rnnx.verify.models import layer_truths

    _, ns = models
    model = ns["TwinRNN"]().eval()
    truths, notes = layer_truths(model, find_layers(_twin_file(model)), [])
    assert truths == {}
    assert any("could come from any of torch modules 'rnn_f', 'rnn_b'" in n for n in notes), notes


def _twin_file(model: torch.nn.Module) -> onnx.ModelProto:
    import io

    buffer = io.BytesIO()
    torch.onnx.export(model, (torch.randn(2, 6, 4),), buffer, dynamo=False, opset_version=17)
    return onnx.load_from_string(buffer.getvalue())


def test_verify_draws_integer_inputs_from_the_recorded_example_and_a_nan_reference_is_bad_input(models, tmp_path: Path) -> None:
    path, ns = models
    torch.manual_seed(0)
    model = ns["LogIds"]().eval()
    torch.save(model.state_dict(), tmp_path / "w.pt")
    report = rnnx.export(model, (torch.randint(1, 20, (1, 7), generator=torch.Generator().manual_seed(0)),), tmp_path / "ids.onnx")
    assert report.passed
    export, _ = read_metadata(onnx.load(str(tmp_path / "ids.onnx")))
    assert export["values"]["ids"]["min"] >= 1
    # in-process (rnnx.cli.main): what verify draws is tested, not the process
    verify = ["verify", "--against", f"{path}:LogIds", "--checkpoint", str(tmp_path / "w.pt")]
    done = rnnx_in_process(*verify, tmp_path / "ids.onnx")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # a file whose record does not say which ids the example held: verify draws the embedding's
    # rows, id 0 among them, the model's own output is not finite: an input problem, exit 2
    proto = onnx.load(str(tmp_path / "ids.onnx"))
    export.pop("values")
    set_metadata(proto, {EXPORT_KEY: json.dumps(export)})
    onnx.save(proto, str(tmp_path / "old.onnx"))
    done = rnnx_in_process(*verify, tmp_path / "old.onnx")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = done.stderr.strip()
    assert "the torch model's own output" in line and "the model does not take such inputs" in line and "Traceback" not in line


def test_a_write_through_data_is_traced_and_the_patch_is_undone(models, tmp_path: Path) -> None:
    # eagerly, energies.data.masked_fill_ changes energies; traced as it is, the write is lost
    # and the file would ignore the mask (the audit refuses such a file); rnnx traces it
    _, ns = models
    before = torch.Tensor.__dict__.get("data")
    report = rnnx.export(ns["MaskedAttention"]().eval(), _masked(ns, 1, 6, torch.Generator().manual_seed(0)), tmp_path / "a.onnx")
    assert report.passed and report.axes["mask"] == {0: "batch", 1: "seq"}
    ops = {n.op_type for n in onnx.load(str(tmp_path / "a.onnx")).graph.node}
    assert "Where" in ops and "LSTM" in ops
    assert torch.Tensor.__dict__.get("data") is before
    x = torch.randn(2, 3)
    x.data.mul_(0)  # .data is the detached alias again
    assert x.data is not x and float(x.abs().sum()) == 0


@pytest.mark.parametrize("name", ["OCR", "Enhancer", "MaskedAttention", "HandLSTM"])
def test_verify_against_the_model_code_passes_on_what_rnnx_exported_from_batch_1(models, from_batch_1: MadeOnFirstUse, name: str) -> None:
    path, _ = models
    onnx_file, exported = from_batch_1[name]
    assert exported.passed
    done = rnnx_in_process("verify", onnx_file, "--against", f"{path}:{name}", "--checkpoint", onnx_file.with_suffix(".pt"), "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    ran = [c for c in report["cases"] if not c.get("skipped")]
    assert report["passed"] and len({tuple(sorted(c["sizes"].items())) for c in ran}) >= 3


def test_a_static_feature_dimension_from_a_batch_1_example_keeps_the_batch_dynamic(models, tmp_path: Path) -> None:
    _, ns = models
    report = rnnx.export(ns["Enhancer"]().eval(), _enhancer(ns, 1, 6, torch.Generator().manual_seed(0)), tmp_path / "e.onnx", static={"spec": [3]})
    assert report.passed and report.axes["spec"] == {0: "batch", 2: "seq"}, str(report)
    by = {(d["input"], d["dim"]): d["verdict"] for d in report.check.dims}
    assert by[("spec", 3)] == "static: asked" and by[("spec", 0)] == "dynamic"


def test_an_output_dimension_declared_static_that_runs_at_other_sizes_is_declared_dynamic(tmp_path: Path) -> None:
    # what torch.onnx declared for easyocr from a batch-1 example: the input's batch dynamic, the
    # output's declared 1; ONNX Runtime runs it at any batch (and warns on every run)
    from rnnx.exporters import record
    from rnnx.exporters.selfcheck import run_self_check
    from rnnx.exporters.shapes import Naming, leaves_of

    model = torch.nn.GRU(3, 4, batch_first=True).eval()
    example = (torch.randn(1, 5, 3),)
    assert rnnx.export(model, example, tmp_path / "g.onnx").passed
    proto = onnx.load(str(tmp_path / "g.onnx"))
    out = proto.graph.output[0].type.tensor_type.shape.dim
    assert proto.graph.output[0].name == "Y" and out[0].dim_param == "batch"
    out[0].dim_value = 1  # declared static, as torch.onnx left easyocr's
    onnx.save(proto, str(tmp_path / "bad.onnx"))
    leaves, structure = leaves_of(model, example)
    naming = Naming({}, {"batch": "batch", "seq": "length"}, {leaves[0].name: ["batch", "seq", 3]}, {})
    check = run_self_check(model, leaves, structure, naming, tmp_path / "bad.onnx")
    assert check and {c.output_shapes["Y"][0] for c in check.cases if c.output_shapes} >= {1, 3}
    assert record.free_output_dims(proto, check.cases) == ["Y[0]=batch"]
    assert proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
