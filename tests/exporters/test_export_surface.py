"""What users touch around rnnx.export (issue 26): torch.onnx.export's keywords, the exception
a failed self-check raises, --dynamic ranges and torch's suggested ones, training checkpoints,
torch.jit.trace files, and errors in the example's sizes on one line of stderr.

Real torch models, real files, real ONNX Runtime sessions; the CLI in-process, and as a subprocess where its stderr is the point."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

import rnnx  # noqa: E402
from rnnx import ExportCheckFailed, ParityError, RNNXError  # noqa: E402
from rnnx.exporters import export_trace  # noqa: E402
from rnnx.exporters.loading import load_checkpoint, parse_dim  # noqa: E402
from rnnx.exporters.modules import swap_recurrent_modules  # noqa: E402
from rnnx.exporters.scripted import recurrence_of  # noqa: E402
from rnnx.exporters.shapes import Overrides, leaves_of, offered_shapes  # noqa: E402
from rnnx.exporters.writing import first_line  # noqa: E402
from tests.helpers import rnnx_in_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SYMBOL = re.compile(r"\b[su]\d+\b")


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx.cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=300)


def cli_here(*args: object) -> subprocess.CompletedProcess[str]:
    """``cli`` in this process (rnnx.cli.main), for tests about what export does, not about the
    process; ``cli`` stays where the process's own stderr is the point (torch's logging)."""
    return rnnx_in_process(*args)


class Tagger(nn.Module):
    """Batch-first LSTM tagger: (batch, frames, 8) -> (batch, frames, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.out = nn.Linear(16, 5)

    def forward(self, feats):
        y, _ = self.rnn(feats)
        return self.out(y)


class StatefulGRU(nn.Module):
    """Seq-first two-layer GRU that takes its initial state."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(3, 6, num_layers=2)

    def forward(self, x, h0):
        y, h = self.rnn(x, h0)
        return y, h


class TracedOnly(nn.Module):
    """Computes something else when traced for export than when run: every file disagrees with it."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(3, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        if torch.compiler.is_exporting() or torch.jit.is_tracing():
            y = y + 1.0
        return y


CONV_FILE = '''
import torch
from torch import nn


class Net(nn.Module):
    """A Conv1d front end (kernel 5, 40 channels) before a batch-first LSTM."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(40, 16, 5)
        self.rnn = nn.LSTM(16, 24, batch_first=True)
        self.out = nn.Linear(24, 10)

    def forward(self, feats):
        y, _ = self.rnn(self.conv(feats).transpose(1, 2))
        return self.out(y)


example_inputs = lambda: (torch.randn(2, 40, 50),)
'''

MISMATCH_FILE = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(40, 16)
        self.rnn = nn.GRU(16, 24, batch_first=True)

    def forward(self, feats):
        return self.rnn(self.proj(feats))[0]


example_inputs = lambda: (torch.randn(2, 30, 50),)  # 50 features where the model takes 40
'''

TRACED_ONLY_FILE = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        if torch.compiler.is_exporting() or torch.jit.is_tracing():
            y = y + 1.0
        return y


example_inputs = lambda: (torch.randn(5, 2, 3),)
'''


def run_ort(path: Path, feeds: dict[str, torch.Tensor]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in feeds.items()})


def close(got: np.ndarray, want: torch.Tensor) -> None:
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-3, atol=1e-4)


def shapes_of(path: Path) -> tuple[dict[str, list[int | str]], dict[str, list[int | str]]]:
    graph = onnx.load(str(path)).graph

    def dims(v: onnx.ValueInfoProto) -> list[int | str]:
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    return {i.name: dims(i) for i in graph.input}, {o.name: dims(o) for o in graph.output}


# 1. torch.onnx.export's keywords -------------------------------------------------------------


def test_a_torch_onnx_export_call_runs_unchanged_as_rnnx_export(tmp_path: Path) -> None:
    """The same keywords to both exporters give the same graph names and dynamic axes, and
    rnnx's file has a native LSTM and matches torch at batch 1 and at a larger batch and length."""
    torch.manual_seed(0)
    model, x = Tagger().eval(), torch.randn(2, 7, 8)
    keywords = dict(
        input_names=["feats"], output_names=["logits"], opset_version=17,
        dynamic_axes={"feats": {0: "batch", 1: "frames"}, "logits": {0: "batch", 1: "frames"}},
        export_params=True, do_constant_folding=True, verbose=False, keep_initializers_as_inputs=False, dynamo=False,
        training=torch.onnx.TrainingMode.EVAL, operator_export_type=torch.onnx.OperatorExportTypes.ONNX,
    )
    torch.onnx.export(model, (x,), str(tmp_path / "torch.onnx"), **keywords)
    report = rnnx.export(model, (x,), tmp_path / "rnnx.onnx", **keywords)
    assert report.passed and report.opset == 17 and report.axes == {"feats": {0: "batch", 1: "frames"}}, str(report)
    assert shapes_of(tmp_path / "rnnx.onnx") == shapes_of(tmp_path / "torch.onnx") == (
        {"feats": ["batch", "frames", 8]}, {"logits": ["batch", "frames", 5]})
    assert [n.op_type for n in onnx.load(str(tmp_path / "rnnx.onnx")).graph.node].count("LSTM") == 1
    for batch, frames in ((1, 3), (5, 12)):
        feats = torch.randn(batch, frames, 8)
        (got,) = run_ort(tmp_path / "rnnx.onnx", {"feats": feats})
        close(got, model(feats))


def test_dimensions_dynamic_axes_leaves_out_are_static_as_in_torch_onnx(tmp_path: Path) -> None:
    """A list names no labels (rnnx names them by where they flow); the dimensions it does not
    list stay at the example's size, in torch.onnx's file and in rnnx's."""
    torch.manual_seed(0)
    model, x, h0 = StatefulGRU().eval(), torch.randn(7, 2, 3), torch.randn(2, 2, 6)
    keywords = dict(input_names=["x", "h0"], output_names=["y", "h"], dynamic_axes={"x": [1], "h0": [1]})
    torch.onnx.export(model, (x, h0), str(tmp_path / "torch.onnx"), dynamo=False, **copy.deepcopy(keywords))  # it names list axes in place
    report = rnnx.export(model, (x, h0), tmp_path / "rnnx.onnx", **keywords)
    assert report.axes == {"x": {1: "batch"}, "h0": {1: "batch"}}, str(report)
    inputs, _ = shapes_of(tmp_path / "rnnx.onnx")
    torch_inputs, _ = shapes_of(tmp_path / "torch.onnx")
    assert inputs == {"x": [7, "batch", 3], "h0": [2, "batch", 6]}
    assert [d if isinstance(d, int) else "dynamic" for d in inputs["x"]] == [d if isinstance(d, int) else "dynamic" for d in torch_inputs["x"]]
    for batch in (1, 5):
        feeds = {"x": torch.randn(7, batch, 3), "h0": torch.randn(2, batch, 6)}
        y, h = run_ort(tmp_path / "rnnx.onnx", feeds)
        want_y, want_h = model(feeds["x"], feeds["h0"])
        close(y, want_y)
        close(h, want_h)


def test_torch_onnx_names_for_the_inputs_the_path_and_keyword_inputs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x, h0 = StatefulGRU().eval(), torch.randn(7, 2, 3), torch.randn(2, 2, 6)
    report = rnnx.export(model, args=(x,), kwargs={"h0": h0}, f=str(tmp_path / "g.onnx"), opset_version=15, verify=True, optimize=True,
                         external_data=True, autograd_inlining=True)
    assert report.passed and report.opset == 15 and any("external_data=True" in n for n in report.notes), str(report)
    y, h = run_ort(tmp_path / "g.onnx", {"x": torch.randn(9, 1, 3), "h0": torch.zeros(2, 1, 6)})
    assert y.shape == (9, 1, 6) and h.shape == (2, 1, 6)
    rnnx.export(model, (x, h0), tmp_path / "named.onnx", input_names=["feats"])  # as in torch.onnx, the first inputs' names only
    assert list(shapes_of(tmp_path / "named.onnx")[0]) == ["feats", "h0"]
    with pytest.raises(RNNXError, match="found kwargs 'hidden'"):
        rnnx.export(model, (x,), tmp_path / "k.onnx", kwargs={"hidden": h0})
    with pytest.raises(RNNXError, match="given twice"):
        rnnx.export(model, (x, h0), tmp_path / "k.onnx", f=tmp_path / "other.onnx")
    with pytest.raises(RNNXError, match="expected one opset, found opset=17 and opset_version=15"):
        rnnx.export(model, (x, h0), tmp_path / "k.onnx", opset=17, opset_version=15)
    assert not (tmp_path / "k.onnx").exists()


REFUSED = [
    ("training", "TrainingMode.TRAINING"),
    ("operator_export_type", "OperatorExportTypes.ONNX_ATEN_FALLBACK"),
    ("custom_opsets", {"com.example": 1}),
    ("export_params", False),
    ("keep_initializers_as_inputs", True),
    ("export_modules_as_functions", True),
    ("report", True),
    ("dump_exported_program", True),
    ("profile", True),
    ("custom_translation_table", "table"),
    ("frobnicate", 1),  # not torch.onnx's either
]


@pytest.mark.parametrize(("keyword", "value"), REFUSED, ids=[k for k, _ in REFUSED])
def test_keywords_rnnx_cannot_honour_are_refused_by_name(keyword: str, value: object, tmp_path: Path) -> None:
    if value == "TrainingMode.TRAINING":
        value = torch.onnx.TrainingMode.TRAINING
    elif value == "OperatorExportTypes.ONNX_ATEN_FALLBACK":
        value = torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK
    elif value == "table":
        value = {torch.ops.aten.add.Tensor: lambda a, b: a}
    with pytest.raises(RNNXError) as refused:
        rnnx.export(nn.GRU(3, 4), (torch.randn(5, 2, 3),), tmp_path / "g.onnx", **{keyword: value})
    message = str(refused.value)
    assert keyword in message and "expected" in message and "found" in message and "\n" not in message, message
    assert not list(tmp_path.iterdir())


def test_preserving_a_training_mode_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RNNXError, match="training=TrainingMode.PRESERVE of a model in training mode"):
        rnnx.export(nn.GRU(3, 4).train(), (torch.randn(5, 2, 3),), tmp_path / "g.onnx", training=torch.onnx.TrainingMode.PRESERVE)


@pytest.mark.parametrize(("axes", "output_names", "message"), [
    ({"nope": {0: "b"}}, ["y", "h"], "expected an input name (input) or an output name (y, h), found 'nope'"),
    ({"y": {0: "b"}}, None, "none given; pass output_names"),
    ({"input": {"0": "b"}}, None, "expected integer dimensions"),
    ({"input": "batch"}, None, "expected {dim: label} or [dims]"),
    ({"input": {0: "b", 5: "c"}}, None, "input input has 3 dimensions"),
])
def test_dynamic_axes_are_checked_by_name(axes: dict, output_names: list[str] | None, message: str, tmp_path: Path) -> None:
    with pytest.raises(RNNXError) as refused:
        rnnx.export(nn.GRU(3, 4), (torch.randn(5, 2, 3),), tmp_path / "g.onnx", dynamic_axes=axes, output_names=output_names)
    assert message in str(refused.value)


# 2. A failed self-check raises ---------------------------------------------------------------


def test_a_failed_self_check_raises_export_check_failed_with_the_report(tmp_path: Path) -> None:
    with pytest.raises(ExportCheckFailed) as failed:
        rnnx.export(TracedOnly().eval(), (torch.randn(5, 2, 3),), tmp_path / "t.onnx")
    assert isinstance(failed.value, ParityError) and isinstance(failed.value, RNNXError) and rnnx.ExportCheckFailed is ExportCheckFailed
    report = failed.value.report
    assert not report.passed and not report.written and report.check.failure() in str(failed.value)
    assert "differs from torch" in str(failed.value) and "nothing was written" in str(failed.value)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_exits_1_when_the_self_check_fails(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(TRACED_ONLY_FILE)
    done = cli_here("export", f"{tmp_path / 'm.py'}:Net", "-o", tmp_path / "m.onnx", "--json")
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "differs from torch" in done.stderr, done.stderr
    assert json.loads(done.stdout)["check"]["passed"] is False  # the report still says which cases failed
    assert not (tmp_path / "m.onnx").exists()


# 3. --dynamic ranges, and torch's suggested ones ---------------------------------------------


def test_dynamic_parses_a_range() -> None:
    assert parse_dim("feats:2=frames", "--dynamic") == ("feats", 2, "frames")
    assert parse_dim("feats:2=frames:6", "--dynamic") == ("feats", 2, ("frames", 6, None))
    assert parse_dim("feats:2=frames:6:4096", "--dynamic") == ("feats", 2, ("frames", 6, 4096))
    for bad, message in (("feats:2=frames:x", "non-negative integers"), ("feats:2=frames:9:3", "expected min < max"),
                         ("feats:2=:3", "NAME:DIM[=LABEL]"), ("feats:2=frames:1:2:3", "NAME:DIM=LABEL:MIN[:MAX]")):
        with pytest.raises(RNNXError, match=re.escape(message)):
            parse_dim(bad, "--dynamic")


def test_a_range_reaches_torch_as_a_dim_with_min_and_max() -> None:
    leaves, _ = leaves_of(Tagger(), (torch.randn(2, 7, 8),))
    specs, labels = offered_shapes(leaves, Overrides({"feats": {1: ("frames", 3, 400), 0: torch.export.Dim("n", min=1, max=64)}}))
    frames, n = specs[0][1], specs[0][0]
    assert (frames.__name__, frames.min, frames.max) == ("frames", 3, 400) and (n.__name__, n.min, n.max) == ("n", 1, 64)
    assert labels == {(0, 0): "n", (0, 1): "frames"} and specs[0][2] is torch.export.Dim.AUTO
    with pytest.raises(RNNXError, match="given two ranges"):
        offered_shapes(leaves, Overrides({"feats": {0: ("t", 2, 9), 1: ("t", 3, 9)}}))


def test_the_cli_gives_torch_the_range(tmp_path: Path) -> None:
    (tmp_path / "conv.py").write_text(CONV_FILE)
    done = cli_here("export", f"{tmp_path / 'conv.py'}:Net", "--dynamic", "feats:2=frames:6:400", "-o", tmp_path / "c.onnx", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["axes"]["feats"] == {"0": "batch", "2": "frames"} and report["check"]["passed"], report
    (got,) = run_ort(tmp_path / "c.onnx", {"feats": torch.randn(1, 40, 31)})
    assert got.shape == (1, 27, 10)


def test_torchs_suggested_fix_is_kept_whole_in_the_message() -> None:
    """torch.export refuses a named dimension a Conv1d (kernel 5) cannot take at every size, and
    says which range it can: that suggestion is what the user needs, so it is never cut."""
    namespace: dict = {}
    exec(CONV_FILE, namespace)  # noqa: S102  our own model source, as the CLI imports it
    model, dims = namespace["Net"]().eval(), torch.export.Dim
    swap_recurrent_modules(model)  # as rnnx traces it: the LSTM one native op, its length free
    with pytest.raises(torch._dynamo.exc.UserError) as refused:
        torch.export.export(model, (torch.randn(2, 40, 50),), dynamic_shapes=({0: dims.AUTO, 1: dims.AUTO, 2: dims("frames")},), strict=False)
    line = first_line(refused.value)
    assert line.startswith("Constraints violated (frames)") and line.endswith("(torch suggests: frames = Dim('frames', min=6))"), line


@pytest.mark.xfail(not hasattr(export_trace, "refined_shapes"), strict=True,
                   reason="needs the _trace patch in the issue-26 report: torch's refine_dynamic_shapes_from_suggested_fixes fails on Dim.AUTO")
def test_torchs_suggested_range_is_applied(tmp_path: Path) -> None:
    """--dynamic feats:2=frames on a Conv1d front end: torch says frames >= 6, and rnnx applies it."""
    (tmp_path / "conv.py").write_text(CONV_FILE)
    done = cli_here("export", f"{tmp_path / 'conv.py'}:Net", "--dynamic", "feats:2=frames", "-o", tmp_path / "c.onnx", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["axes"]["feats"] == {"0": "batch", "2": "frames"} and "Dim('frames', min=6)" in report["tracing"], report
    for batch, frames in ((1, 6), (3, 77)):
        (got,) = run_ort(tmp_path / "c.onnx", {"feats": torch.randn(batch, 40, frames)})
        assert got.shape == (batch, frames - 4, 10)


# 4. Training checkpoints ---------------------------------------------------------------------


class Lightning(nn.Module):
    """What a LightningModule that holds the model as self.model saves: keys under "model.",
    and its loss's buffer beside them."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss(weight=torch.ones(5))


def _checkpoints(model: nn.Module) -> dict[str, tuple[object, str]]:
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 3, 8)).sum().backward()
    optimizer.step()
    return {
        "dataparallel": ({"epoch": 7, "state_dict": nn.DataParallel(model).state_dict(), "optimizer": optimizer.state_dict()},
                         "['state_dict'] with the prefix 'module.' removed (DataParallel's)"),
        "lightning": ({"epoch": 2, "global_step": 40, "pytorch-lightning_version": "2.4.0", "state_dict": Lightning(model).state_dict(),
                       "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [], "hyper_parameters": {"lr": 1e-3}},
                      "['state_dict'] with the prefix 'model.' removed (Lightning's); ignored 1 key(s) the model has no place for (loss.weight)"),
        "model": ({"model": model.state_dict(), "epoch": 1}, "['model']"),
        "model_state_dict": ({"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "loss": 0.5},
                             "['model_state_dict']"),
        "net": ({"net": model.state_dict(), "acc": 91.5}, "['net']"),
        "compiled": ({"state_dict": {f"_orig_mod.{k}": v for k, v in model.state_dict().items()}},
                     "['state_dict'] with the prefix '_orig_mod.' removed (torch.compile's)"),
    }


@pytest.mark.parametrize("kind", ["dataparallel", "lightning", "model", "model_state_dict", "net", "compiled"])
def test_a_training_checkpoint_loads_and_says_how(kind: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    trained = Tagger()
    checkpoint, said = _checkpoints(trained)[kind]
    torch.save(checkpoint, tmp_path / "ck.pt")
    fresh = Tagger()
    line = load_checkpoint(fresh, tmp_path / "ck.pt")
    assert line == f"checkpoint: loaded {tmp_path / 'ck.pt'}{said}"
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), trained.state_dict().values()))
    assert load_checkpoint(Tagger(), _saved(trained.state_dict(), tmp_path / "plain.pt")) is None  # a plain state_dict: nothing to say


def _saved(obj: object, path: Path) -> Path:
    torch.save(obj, path)
    return path


TAGGER_FILE = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.out = nn.Linear(16, 5)

    def forward(self, feats):
        y, _ = self.rnn(feats)
        return self.out(y)


example_inputs = lambda: (torch.randn(2, 7, 8),)
'''


def test_the_cli_exports_a_dataparallel_training_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "tagger.py").write_text(TAGGER_FILE)
    torch.manual_seed(0)
    trained = Tagger()
    torch.save({"epoch": 3, "state_dict": nn.DataParallel(trained).state_dict()}, tmp_path / "ck.pt")
    done = cli_here("export", f"{tmp_path / 'tagger.py'}:Net", "--checkpoint", tmp_path / "ck.pt", "-o", tmp_path / "t.onnx")
    assert done.returncode == 0, done.stderr
    assert "note: checkpoint: loaded" in done.stdout and "['state_dict'] with the prefix 'module.' removed" in done.stdout, done.stdout
    feats = torch.randn(1, 11, 8)
    (got,) = run_ort(tmp_path / "t.onnx", {"feats": feats})
    close(got, trained.eval()(feats))  # the trained weights, not the model file's fresh ones


def test_a_checkpoint_lightning_wrote_loads(tmp_path: Path) -> None:
    """A .ckpt written by Lightning's own Trainer (hparams, loops, callbacks, optimizer states
    beside the state_dict) loads weights-only, the LightningModule's "model." prefix removed."""
    lightning = pytest.importorskip("lightning")

    class Module(lightning.LightningModule):
        def __init__(self, lr: float = 1e-3) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.model = Tagger()

        def training_step(self, batch, index):
            x, y = batch
            return nn.functional.mse_loss(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(8, 6, 8), torch.randn(8, 6, 5))
    module = Module()
    trainer = lightning.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                                enable_checkpointing=False, default_root_dir=str(tmp_path))
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))
    trainer.save_checkpoint(str(tmp_path / "last.ckpt"))
    fresh = Tagger()
    assert load_checkpoint(fresh, tmp_path / "last.ckpt") == f"checkpoint: loaded {tmp_path / 'last.ckpt'}['state_dict'] with the prefix 'model.' removed (Lightning's)"
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), module.model.state_dict().values()))


def test_a_checkpoint_that_does_not_fit_keeps_torchs_key_lists(tmp_path: Path) -> None:
    torch.save({"epoch": 1, "state_dict": nn.GRU(3, 3).state_dict()}, tmp_path / "other.pt")
    with pytest.raises(RNNXError) as refused:
        load_checkpoint(Tagger(), tmp_path / "other.pt")
    message = str(refused.value)
    assert "['state_dict']: does not fit the model" in message and "\n" not in message
    assert 'Missing key(s) in state_dict: "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0", ... (2 more)' in message
    assert 'Unexpected key(s) in state_dict: "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"' in message
    state = Tagger().state_dict()
    state["out.weight"] = torch.zeros(3, 16)
    with pytest.raises(RNNXError, match=re.escape("size mismatch for out.weight: copying a param with shape torch.Size([3, 16])")):
        load_checkpoint(Tagger(), _saved({"model": state}, tmp_path / "size.pt"))
    with pytest.raises(RNNXError, match="expected a state_dict, or a training checkpoint"):
        load_checkpoint(Tagger(), _saved({"epoch": 1, "optimizer": {}}, tmp_path / "none.pt"))


class Config:
    lr = 0.1


def test_a_checkpoint_is_loaded_weights_only(tmp_path: Path) -> None:
    torch.save({"state_dict": Tagger().state_dict(), "config": Config()}, tmp_path / "pickled.pt")
    with pytest.raises(RNNXError, match="cannot load as weights only"):
        load_checkpoint(Tagger(), tmp_path / "pickled.pt")


# 5. torch.jit.trace and torch.jit.script files -----------------------------------------------


class BatchFirstLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(24, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.out(y)


def _compiled(how: str, model: nn.Module, example: tuple[torch.Tensor, ...], path: Path) -> Path:
    (torch.jit.trace(model, example) if how == "trace" else torch.jit.script(model)).save(str(path))
    return path


@pytest.mark.parametrize("how", ["trace", "script"])
@pytest.mark.parametrize("which", ["batch_first_lstm", "seq_first_gru_with_state"])
def test_traced_and_scripted_files_export_and_match_at_new_shapes(how: str, which: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    if which == "batch_first_lstm":
        model, example = BatchFirstLSTM().eval(), (torch.randn(3, 7, 8),)
        args = ["--input", "3x7x8"]

        def inputs(batch: int, steps: int) -> tuple[torch.Tensor, ...]:
            return (torch.randn(batch, steps, 8),)
    else:
        model, example = StatefulGRU().eval(), (torch.randn(7, 3, 3), torch.randn(2, 3, 6))
        args = ["--input", "7x3x3", "--input", "2x3x6"]

        def inputs(batch: int, steps: int) -> tuple[torch.Tensor, ...]:
            return torch.randn(steps, batch, 3), torch.randn(2, batch, 6)
    saved = _compiled(how, model, example, tmp_path / f"model.{how}d.pt")
    done = cli_here("export", saved, *args, "-o", tmp_path / "m.onnx", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["check"]["passed"] and report["op_types"].get("LSTM" if "lstm" in which else "GRU", 0) == 2, report
    loaded = torch.jit.load(str(saved))
    for batch, steps in ((1, 7), (5, 13)):
        feeds = inputs(batch, steps)
        got = run_ort(tmp_path / "m.onnx", {f"input_{i}": t for i, t in enumerate(feeds)})
        want = loaded(*feeds)
        for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
            close(g, w)


def test_a_traced_module_tells_its_layout_from_its_parameters_and_graph() -> None:
    for module, example in ((nn.LSTM(4, 6, num_layers=3, bidirectional=True, batch_first=True, proj_size=2), torch.randn(2, 5, 4)),
                            (nn.GRU(4, 6), torch.randn(5, 2, 4)), (nn.RNN(4, 6, nonlinearity="relu", batch_first=True), torch.randn(2, 5, 4))):
        traced, scripted = torch.jit.trace(module, (example,)), torch.jit.script(module)
        assert not hasattr(traced, "batch_first")
        want = (module.batch_first, module.num_layers, module.bidirectional, module.hidden_size, getattr(module, "proj_size", 0))
        for compiled in (traced, scripted):
            found = recurrence_of(compiled)
            assert (found.batch_first, found.num_layers, found.bidirectional, found.hidden_size, found.proj_size) == want


# 6. Errors in the example's sizes, and one line on stderr --------------------------------------


def test_errors_give_the_examples_sizes_not_torchs_symbols(tmp_path: Path) -> None:
    """A (batch, frames, channels) example for a model that takes (batch, channels, frames):
    torch's message reads "expected input[s24, s66, s76] ... got s66 channels"."""
    namespace: dict = {}
    exec(CONV_FILE, namespace)  # noqa: S102
    with pytest.raises(RNNXError) as refused:
        rnnx.export(namespace["Net"]().eval(), (torch.randn(2, 50, 40),), tmp_path / "c.onnx")
    message = str(refused.value)
    assert "expected input[2, 50, 40] to have 40 channels, but got 50 channels instead" in message, message
    assert not SYMBOL.search(message), message


def test_a_failed_export_says_one_line_on_stderr(tmp_path: Path) -> None:
    """torch's fake tensors log the failed shape check's traceback (~19 lines) at ERROR before
    the exception reaches rnnx; stderr holds rnnx's line only."""
    (tmp_path / "m.py").write_text(MISMATCH_FILE)
    done = cli("export", f"{tmp_path / 'm.py'}:Net", "-o", tmp_path / "m.onnx")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rnnx export: "), done.stderr
    # the model itself refuses its example: said in the model's own words, before any route runs
    assert "the model raised on the example as given (feats 2x30x50 float32)" in lines[0], lines[0]
    assert "mat1 and mat2 shapes cannot be multiplied (60x50 and 40x16)" in lines[0] and not SYMBOL.search(lines[0]), lines[0]
    assert not (tmp_path / "m.onnx").exists()
