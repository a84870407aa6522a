"""Checks that must check (issue 49's rule): every check fails, or refuses, when what it checks
is missing, empty, not run, or held to a truth that says nothing.

Each test is a hostile input that a check once passed (exit 0) or crashed on (exit 3). Those
whose cause lies in a verb's own module, not in the check harness, are marked xfail (strict) and
name the cause, so that the fix there turns them into passes.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rnnx.check import Rule, judge
from rnnx.tolerance import Tolerance

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402

from rnnx.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# Torch models a hostile user hands to verify and export (small: H=4).
MODELS = '''
import torch
from torch import nn


class Honest(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = nn.LSTM(3, 4)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return y, h, c


class Lies(Honest):
    """float64 and float32 disagree by a shift of 3: its float32 run is no honest run of its float64 one."""

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        shift = 3.0 if y.dtype == torch.float64 else 0.0
        return y + shift, h + shift, c + shift


class Noisy(Honest):
    """Draws new noise on every call: no two runs agree."""

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return y + torch.randn_like(y), h + torch.randn_like(h), c + torch.randn_like(c)


class NanElsewhere(nn.Module):
    """Finite at the example's shape (batch 1, length 5) only: every case that varies a dimension is skipped."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = nn.LSTM(3, 4, batch_first=True)

    def forward(self, x):
        y, _ = self.lstm(x)
        bad = (x.shape[1] != 5) | (x.shape[0] != 1)
        return y * torch.where(torch.tensor(bad), torch.tensor(float("nan")), torch.tensor(1.0))
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stack's weights, its ONNX file (rnnx convert), the models above, and hostile copies of the file."""
    here = tmp_path_factory.mktemp("checks_that_check")
    (here / "models.py").write_text(MODELS)
    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(3, 4).state_dict(), here / "w.pt")
    assert main(["convert", str(here / "w.pt"), "-o", str(here / "s.onnx"), "--no-check"]) == 0
    base = onnx.load(str(here / "s.onnx"))
    for name, edit in EDITS.items():
        model = copy.deepcopy(base)
        edit(model.graph)
        onnx.save(model, str(here / f"{name}.onnx"))
    return here


def _renamed(graph: Any, output: str, new: str) -> None:
    for node in graph.node:
        for k, name in enumerate(node.output):
            if name == output:
                node.output[k] = new


def _times(value: float, outputs: tuple[str, ...]) -> Any:
    """An edit: each of ``outputs`` multiplied by ``value`` (0: every value zero; NaN: none finite)."""

    def edit(graph: Any) -> None:
        graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), "hostile_c"))
        for out in outputs:
            _renamed(graph, out, out + "_before")
            graph.node.append(helper.make_node("Mul", [out + "_before", "hostile_c"], [out]))

    return edit


def _no_outputs(graph: Any) -> None:
    del graph.output[:]


EDITS = {"all_zero": _times(0.0, ("Y", "h_n", "c_n")), "y_nan": _times(float("nan"), ("Y",)), "no_outputs": _no_outputs}


def _rnnx(*args: object) -> int:
    return main([str(a) for a in args])


# -- the judge: a truth whose own low-precision run is another computation gives no rounding floor


def test_an_honest_run_far_from_its_truth_gives_no_floor_that_passes_zeros() -> None:
    """The calibrated rule's floor is the honest run's distance from the truth; an honest run 3 off
    (a forward that branches on its dtype) made a floor of 3, and an output of zeros passed."""
    rng = np.random.default_rng(0)
    truth = rng.standard_normal((5, 2, 4)) * 0.3 + 3.0
    honest = (truth - 3.0).astype(np.float32)
    row = judge(np.zeros_like(honest), truth, Rule(Tolerance(1e-4, 1e-3), honest, "float32"))
    assert not row.passed and "no rounding floor" in row.note
    # ... while a candidate that matches the truth still passes, under the fixed tolerance
    assert judge(truth.astype(np.float32), truth, Rule(Tolerance(1e-4, 1e-3), honest, "float32")).passed


def test_an_honest_run_that_is_honest_still_calibrates() -> None:
    rng = np.random.default_rng(1)
    truth = rng.standard_normal((7, 3, 4))
    honest = truth.astype(np.float32)
    row = judge(honest, truth, Rule(Tolerance(1e-4, 1e-3), honest, "float32"))
    assert row.passed and row.floor is not None and not row.note


def test_an_empty_truth_says_it_was_empty_not_non_finite() -> None:
    row = judge(np.zeros((3, 0)), np.zeros((3, 0)), Rule(Tolerance(1e-4, 1e-3)))
    assert not row.passed and row.compared == 0 and "no values" in row.note


@pytest.mark.parametrize(("got", "truth"), [
    (np.array(["1.0", "2.0"]), np.array([1.0, 2.0])),  # strings that read as the truth's numbers passed
    (np.array([{"a": 1}], dtype=object), np.zeros(1)),  # raised TypeError (a traceback in the verb)
    (np.array(["a"]), np.array(["a"])),  # raised ValueError
], ids=["strings-as-numbers", "objects", "strings"])
def test_what_is_not_numbers_fails_compared_nothing(got: Any, truth: Any) -> None:
    row = judge(got, truth, Rule(Tolerance(1e-4, 1e-3)))
    assert not row.passed and row.compared == 0 and "expected numbers" in row.note


def test_a_complex_output_is_held_in_its_imaginary_part_too() -> None:
    """float64 keeps a complex number's real part alone: 1+5j against 1+1j passed."""
    rule = Rule(Tolerance(1e-4, 1e-3))
    assert not judge(np.array([1 + 1j]), np.array([1 + 5j]), rule).passed
    assert judge(np.array([1 + 5j], np.complex64), np.array([1 + 5j]), rule).passed


@pytest.mark.parametrize("model", ["Lies", "Noisy"])
def test_verify_fails_a_file_of_zeros_against_a_model_whose_truth_moves(folder: Path, model: str) -> None:
    """verify all_zero.onnx (every output times 0) against a model whose float32 run is far from
    its float64 one passed: the floor came from that distance."""
    assert _rnnx("verify", folder / "s.onnx", "--against", f"{folder / 'models.py'}:Honest", "--seq-lens", "3", "--batch", "2") == 0
    assert _rnnx("verify", folder / "all_zero.onnx", "--against", f"{folder / 'models.py'}:{model}", "--seq-lens", "3", "--batch", "2") in (1, 2)


# -- causes in the verbs' own modules: xfail until fixed there


def test_verify_against_weights_does_not_pass_a_file_whose_output_y_is_nan(folder: Path) -> None:
    assert _rnnx("verify", folder / "y_nan.onnx", "--against", folder / "w.pt", "--backends", "ort", "--seq-lens", "3", "--batch", "2") in (1, 2)


@pytest.mark.parametrize("name", ["no_outputs", "y_nan"])
def test_verify_alone_does_not_pass_a_file_that_returns_nothing_or_nan(folder: Path, name: str) -> None:
    assert _rnnx("verify", folder / f"{name}.onnx", "--seq-lens", "3", "--batch", "2") in (1, 2)


@pytest.fixture(scope="module")
def nan_elsewhere(folder: Path) -> tuple[int, dict[str, Any]]:
    """rnnx export --json of NanElsewhere: its exit status and its JSON (one export, for the two tests below)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = _rnnx("export", f"{folder / 'models.py'}:NanElsewhere", "--input", "1x5x3", "-o", folder / "nan_elsewhere.onnx", "--json")
    return status, json.loads(out.getvalue())


def test_export_does_not_pass_when_no_case_varied_a_dynamic_dimension(nan_elsewhere: tuple[int, dict[str, Any]]) -> None:
    assert nan_elsewhere[0] in (1, 2)


def test_export_json_never_says_passed_beside_a_case_that_compared_nothing(nan_elsewhere: tuple[int, dict[str, Any]]) -> None:
    status, report = nan_elsewhere
    cases = (report.get("check") or {}).get("cases") or []
    if not cases:  # refused before any case was reported: then it must say so, not pass with nothing (the rule itself: test_selfcheck_unvaried.py)
        assert status == 2 and report.get("passed") is False and report.get("error"), (status, report)
    assert all(c.get("passed") is not True for c in cases if not c.get("outputs"))


def test_export_declares_no_dimension_dynamic_that_the_file_refuses_at_every_other_size(folder: Path) -> None:
    model = folder / "ignores.py"
    model.write_text("import torch\nfrom torch import nn\n\n\nclass Ignores(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        torch.manual_seed(0)\n        self.lstm = nn.LSTM(3, 4, batch_first=True)\n\n"
                     "    def forward(self, x):\n        return self.lstm(torch.zeros_like(x))[0]\n")
    path = folder / "ignores.onnx"
    assert _rnnx("export", f"{model}:Ignores", "--input", "1x5x3", "-o", path) == 0
    import onnxruntime

    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    if dims[2].dim_param:  # declared dynamic: the file must then run at another size
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        session.run(None, {session.get_inputs()[0].name: np.zeros((1, 5, 5), np.float32)})


def test_export_refuses_an_example_of_batch_0_without_dying(folder: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "rnnx", "export", f"{folder / 'models.py'}:NanElsewhere", "--input", "0x5x3", "-o",
                           str(folder / "batch0.onnx")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])


def test_verify_of_a_quantized_file_does_not_let_its_own_scales_loosen_the_bound_to_nothing(folder: Path) -> None:
    quantized = folder / "q.onnx"
    assert _rnnx("convert", folder / "w.pt", "-o", quantized, "--quantize", "dynamic") == 0
    model = onnx.load(str(quantized))
    for init in model.graph.initializer:  # each weight at 1/100 the resolution: the same range, int8 values -1, 0 or 1
        values = numpy_helper.to_array(init)
        if init.name.endswith("_scale"):
            init.CopyFrom(numpy_helper.from_array((values * 100).astype(np.float32), init.name))
        elif init.name.endswith("_quantized"):
            init.CopyFrom(numpy_helper.from_array(np.round(values.astype(np.float64) / 100).astype(values.dtype), init.name))
    onnx.save(model, str(folder / "q_coarse.onnx"))
    assert _rnnx("verify", quantized, "--against", folder / "w.pt", "--seq-lens", "3,17", "--batch", "2") == 0
    assert _rnnx("verify", folder / "q_coarse.onnx", "--against", folder / "w.pt", "--seq-lens", "3,17", "--batch", "2") in (1, 2)


def _streaming(folder: Path) -> Path:
    """A --streaming GRU file whose state output is zeros: a chunked run that carries it differs."""
    model = folder / "stream.py"
    model.write_text("import torch\nfrom torch import nn\n\n\nclass S(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        torch.manual_seed(0)\n        self.gru = nn.GRU(3, 4, batch_first=True)\n\n"
                     "    def forward(self, x):\n        return self.gru(x)[0]\n")
    path = folder / "stream.onnx"
    if not path.exists():
        assert _rnnx("export", f"{model}:S", "--input", "1x6x3", "--streaming", "-o", path) == 0
    proto = onnx.load(str(path))
    graph = proto.graph
    state = next(o.name for o in graph.output if o.name.endswith("h_out"))
    _times(0.0, (state,))(graph)
    onnx.save(proto, str(folder / "stream_broken.onnx"))
    return folder / "stream_broken.onnx"


def test_verify_chunks_does_not_pass_when_no_state_is_ever_carried(folder: Path) -> None:
    broken = _streaming(folder)
    assert _rnnx("verify", broken, "--against", f"{folder / 'stream.py'}:S", "--chunks", "3") == 1  # the chunks do carry: it fails
    assert _rnnx("verify", broken, "--against", f"{folder / 'stream.py'}:S", "--chunks", "3", "--seq-lens", "2") in (1, 2)


def test_bundle_check_refuses_a_missing_trtexec_output_with_exit_2(folder: Path) -> None:
    bundle = folder / "bundle"
    if not bundle.exists():
        assert _rnnx("bundle", folder / "s.onnx", "-o", bundle) == 0
    (bundle / "model.engine").write_bytes(b"an engine")
    manifest = json.loads((bundle / "cases.json").read_text())
    export = manifest["cases"][0]["chunks"][0]["export"]
    (bundle / export).parent.mkdir(parents=True, exist_ok=True)
    (bundle / export).unlink(missing_ok=True)  # trtexec never ran on this case
    done = subprocess.run([sys.executable, "check.py"], cwd=bundle, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 2, done.stderr
