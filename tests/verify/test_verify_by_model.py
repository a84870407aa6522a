"""verify --against model code: the torch model decides which shapes count, not the file.

Issue 45: torch.onnx's dynamo exporter, given ``Dim.AUTO``, unrolls a Python loop over time
steps and writes a file that computes the example's length only, while declaring every input
dimension dynamic under labels that say nothing (``s27``). verify used to run it at one shape
("cases: fixed shapes ... PASS"). Now verify asks the torch model, with export's dimension
audit, which sizes each dimension takes, and runs the file there. The files here are written by
the real producers (torch.onnx, dynamo and TorchScript exporters), from a seeded model, and
checked at seeded inputs with batch 1 among them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from rnnx.errors import RNNXError  # noqa: E402
from rnnx.verify.models import verify_model  # noqa: E402
from tests.helpers import model_file  # noqa: E402

# A layer-normalised LSTM cell written by hand and looped in Python over x[:, t], as published
# projects write it: the length is free in the model, and the dynamo exporter unrolls the loop.
LOOPED = '''
import torch
from torch import nn


class LayerNormLSTMCell(nn.Module):
    def __init__(self, n_in, n_hidden):
        super().__init__()
        self.ih = nn.Linear(n_in, 4 * n_hidden, bias=False)
        self.hh = nn.Linear(n_hidden, 4 * n_hidden, bias=False)
        self.ln_i = nn.LayerNorm(4 * n_hidden)
        self.ln_h = nn.LayerNorm(4 * n_hidden)
        self.ln_c = nn.LayerNorm(n_hidden)

    def forward(self, x, state):
        h, c = state
        i, f, g, o = (self.ln_i(self.ih(x)) + self.ln_h(self.hh(h))).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(self.ln_c(c)), c


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = LayerNormLSTMCell(3, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        h = c = x.new_zeros(x.shape[0], 6)
        outs = []
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return self.head(torch.stack(outs, 1))


torch.manual_seed(0)
model = Tagger().eval()
example_inputs = (torch.randn(2, 5, 3),)
'''

# The same task with a native LSTM: a file exported with the length really dynamic.
NATIVE = '''
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


torch.manual_seed(1)
model = Tagger().eval()
example_inputs = (torch.randn(2, 5, 3),)
'''


def _dynamo(code: Path, source: str, out: Path) -> Path:
    """torch.onnx's dynamo exporter with every dimension Dim.AUTO, as torch's docs show it."""
    from torch.export import Dim

    ns = model_file(code, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ns["model"], ns["example_inputs"], str(out), dynamo=True,
                          dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO, 2: Dim.AUTO},))
    return out


@pytest.fixture(scope="module")
def looped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("looped")
    code = tmp / "looped.py"
    return code, _dynamo(code, LOOPED, tmp / "looped.onnx")


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx", "verify", *map(str, args)], capture_output=True, text=True, timeout=300)


def _dim(report: dict, name: str, d: int) -> dict:
    return next(x for x in report["dimensions"] if x["input"] == name and x["dim"] == d)


def test_an_unrolled_loop_fails_at_a_length_the_model_takes(looped: tuple[Path, Path]) -> None:
    """Before issue 45 this file passed ("cases: fixed shapes", exit 0): its labels name no batch
    or length. The torch model runs at other lengths (its Python loop calls the cell once per
    step), so verify runs the file at 13 too, where it computes 5 steps: exit 1, naming x dim 1."""
    code, onnx_file = looped
    run = _cli(onnx_file, "--against", f"{code}:model", "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["passed"] is False
    length = _dim(report, "x", 1)
    assert (length["file"], length["role"], length["source"]) == ("s27", "length", "the torch model"), length
    assert "a Python loop calls cell" in length["model"]
    assert report["refused"].startswith("input x dim 1 at 13: the torch model takes other sizes"), report["refused"]
    assert "--static x:1" in report["refused"]
    assert [c["name"] for c in report["cases"]][:2] == ["s27=5", "s27=13"]
    failed = {r["case"] for r in report["rows"] if not r["passed"] and r["against"] == "torch float64"}
    assert failed == {"s27=13"}, failed  # the example's length itself is right: the file is wrong elsewhere
    assert run.stderr.strip().startswith("rnnx verify: verification failed: input x dim 1 at 13") and len(run.stderr.strip().splitlines()) == 1


def test_narrowed_with_static_passes_and_says_so_and_untraced_dims_are_said(looped: tuple[Path, Path]) -> None:
    """--static x:1 narrows the length to the file's 5: the file passes, and the report says the
    dimension was narrowed. The batch of a hand-written cell reaches no recurrence the audit can
    see, so neither the model nor the file tells its role: that is said, and the dimension is run
    at the sizes the model took (batch 1 among them), each on its own."""
    code, onnx_file = looped
    report = verify_model(onnx_file, f"{code}:model", static={("x", 1)}, seed=3)
    assert report.passed, str(report)
    dims = {(d["input"], d["dim"]): d for d in report.dimensions}
    assert dims[("x", 1)]["source"] == "--static" and "narrowed by --static" in dims[("x", 1)]["line"]
    assert dims[("x", 0)]["source"] == "untraced" and dims[("x", 0)]["accepted"] == 4
    assert any("neither its recurrences nor the file say whether each is a batch or a length" in n and "x dim 0 (s77) is checked at 2, 4, 1" in n
               for n in report.notes), report.notes
    assert dims[("x", 2)]["source"] == "the torch model" and dims[("x", 2)]["model"].startswith("refuses other sizes")
    ran = {c.name: c for c in report.cases}
    assert set(ran) == {"s27=5", "s27=5, s77=4", "s27=5, s77=1"} and not any(c.error or c.skipped for c in ran.values())
    assert ran["s27=5, s77=1"].shapes["x"] == [1, 5, 3]
    text = str(report)
    assert "x dim 1 (dynamic as s27 in the file): held at one size, narrowed by --static" in text and text.endswith("PASS")


def test_an_honest_file_passes_with_its_shapes_from_the_model(tmp_path: Path) -> None:
    """A native LSTM through the same exporter keeps its length: verify varies the batch (1 and
    8) and the length (5 and 13) because the torch model says what they are, and it passes."""
    code = tmp_path / "native.py"
    onnx_file = _dynamo(code, NATIVE, tmp_path / "native.onnx")
    report = verify_model(onnx_file, f"{code}:model", seed=5)
    assert report.passed, str(report)
    dims = {(d["input"], d["dim"]): d for d in report.dimensions}
    assert (dims[("x", 0)]["role"], dims[("x", 0)]["source"]) == ("batch", "the torch model")
    assert (dims[("x", 1)]["role"], dims[("x", 1)]["source"]) == ("length", "the torch model")
    assert "rnn's time axis follows it" in dims[("x", 1)]["model"]
    shapes = {tuple(c.shapes["x"]) for c in report.cases}
    assert {(1, 5, 3), (8, 13, 3)} <= shapes, shapes
    assert "varied as a length, as the torch model says" in str(report)


def test_a_batch_the_file_fixes_fails_unless_narrowed(tmp_path: Path) -> None:
    """torch.onnx's TorchScript exporter with only the length named dynamic fixes the batch at the
    example's 2; the model takes any batch: the file refuses batch 1 (exit 1, naming x dim 0 and
    the size), and passes once --static x:0 narrows the check to the file's batch."""
    code = tmp_path / "native.py"
    ns = model_file(code, NATIVE)
    onnx_file = tmp_path / "fixed_batch.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ns["model"], ns["example_inputs"], str(onnx_file), dynamo=False, input_names=["x"], dynamic_axes={"x": {1: "seq"}})
    report = verify_model(onnx_file, f"{code}:model", seed=7)
    assert not report.passed
    assert report.refused.startswith("input x dim 0 at 1: the torch model takes other sizes (it runs at 4, as a batch: rnn's batch follows it), "
                                     "but the file refuses it (the file fixes it at 2)"), report.refused
    assert any(c.error.startswith("input x dim 0 at 1") for c in report.cases)
    narrowed = verify_model(onnx_file, f"{code}:model", static={("x", 0)}, seed=7)
    assert narrowed.passed, str(narrowed)
    assert {tuple(c.shapes["x"]) for c in narrowed.cases} == {(2, 5, 3), (2, 13, 3)}
    assert any(d["input"] == "x" and d["dim"] == 0 and d["source"] == "--static" for d in narrowed.dimensions)
    with pytest.raises(RNNXError, match=r"^--static y:0: expected an input of the file \(x\), found 'y'"):
        verify_model(onnx_file, f"{code}:model", static={("y", 0)})


# A learned start frame concatenated along time before the LSTM: the graph's wiring from the input
# to the recurrence's time axis goes through a Concat, which the file's reading does not follow.
PREFIXED = '''
import torch
from torch import nn


class Prefixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.start = nn.Parameter(torch.randn(1, 1, 3))
        self.rnn = nn.LSTM(3, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        y, _ = self.rnn(torch.cat([self.start.expand(x.shape[0], 1, 3), x], 1))
        return self.head(y)


torch.manual_seed(2)
model = Prefixed().eval()
example_inputs = (torch.randn(2, 5, 3),)
'''


def test_a_length_the_file_cannot_trace_through_a_concat_is_traced_by_the_model(tmp_path: Path) -> None:
    """Axes named p and q say nothing, and q reaches the LSTM through a Concat: the file alone
    reads both as "other" (verify used to run one shape). The torch model's recurrence tells a
    batch and a length, and they are varied, batch 1 included."""
    from rnnx.formats.onnx_read import load_model
    from rnnx.shapes.file_dims import read_file_dims

    code = tmp_path / "prefixed.py"
    ns = model_file(code, PREFIXED)
    onnx_file = tmp_path / "prefixed.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ns["model"], ns["example_inputs"], str(onnx_file), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "p", 1: "q"}})
    assert read_file_dims(load_model(onnx_file)).roles == {"p": "other", "q": "other"}  # what the file alone says
    report = verify_model(onnx_file, f"{code}:model", seed=11)
    assert report.passed, str(report)
    assert report.roles == {"p": "batch", "q": "length"}
    dims = {(d["input"], d["dim"]): d for d in report.dimensions}
    assert (dims[("x", 1)]["file_role"], dims[("x", 1)]["source"]) == ("other", "the torch model")
    assert {tuple(c.shapes["x"]) for c in report.cases} == {(1, 5, 3), (8, 5, 3), (1, 13, 3), (8, 13, 3)}
