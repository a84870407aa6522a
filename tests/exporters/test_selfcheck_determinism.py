"""The export's self-check holds a file to a truth that does not move, and a model that exits
is a failed export.

A forward that multiplies by ``1 + 0.05 * random.random()`` or reads a counter it bumps per
call passed the calibrated rule before (its own move, between torch's float32 run and its
float64 copy's, became the rounding floor: "0.94x its floor" with the file 1.03x off). Now it is
refused (exit 2) unless a tolerance is given for it. A forward that calls ``sys.exit`` ended
``rnnx export --json`` with exit 0, nothing printed and nothing written; now it is one line,
exit 2, and the JSON error object.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402
from rnnx.exporters.determinism import NOISE_ULPS, check_determinism, noise_bound  # noqa: E402
from rnnx.exporters.loading import load_model  # noqa: E402
from rnnx.exporters.shapes import Leaf  # noqa: E402

MODELS = '''
import random
import sys

import torch
from torch import nn


class Tagger(nn.Module):
    """nn.LSTM + Linear: honest."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class Jitter(Tagger):
    def forward(self, x):
        return super().forward(x) * (1 + 0.05 * random.random())


CALLS = [0]


class Counter(Tagger):
    def forward(self, x):
        CALLS[0] += 1
        return super().forward(x) + 0.01 * CALLS[0]


class ExitsAtOtherSizes(Tagger):
    def forward(self, x):
        if x.shape[2] != 8:
            sys.exit(0)
        return super().forward(x)


class ExitsAlways(Tagger):
    def forward(self, x):
        sys.exit(3)
'''


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def rnnx_cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx.cli", *map(str, args)], capture_output=True, text=True, timeout=300)


def namespace(models: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    exec(compile(models.read_text(), str(models), "exec"), found)  # noqa: S102  the test's own model code
    return found


def leaves_of(*values: object) -> list[Leaf]:
    return [Leaf(i, f"x{i}", v) for i, v in enumerate(values)]


def left_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".py" and p.name != "__pycache__")


# --- not deterministic: refused, or held to the tolerance the user gives ----------------------------

def test_a_random_forward_is_refused_naming_the_output_and_the_difference(models: Path, tmp_path: Path) -> None:
    out = tmp_path / "jitter.onnx"
    run = rnnx_cli("export", f"{models}:Jitter", "--input", "x:2x5x8", "-o", out, "--json")
    assert run.returncode == 2, run.stderr
    error = json.loads(run.stdout)
    assert error["kind"] == "bad_input" and error["exit_code"] == 2
    assert "not deterministic" in error["error"] and "the output by up to" in error["error"]
    assert "--nondeterministic-atol" in error["error"] and "eval" in error["error"]
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert left_in(tmp_path) == []


def test_a_counter_read_in_forward_is_refused_with_its_step(models: Path, tmp_path: Path) -> None:
    model = namespace(models)["Counter"]()
    with pytest.raises(RNNXError, match=r"not deterministic: two runs on the example as given \(float64, eval mode\) differ in "
                                        r"output 'logits' by up to 0\.01,"):
        rnnx.export(model, (torch.randn(2, 5, 8),), tmp_path / "counter.onnx", output_names=["logits"])
    assert left_in(tmp_path) == []


def test_a_tolerance_below_the_models_own_move_is_refused(models: Path, tmp_path: Path) -> None:
    model = namespace(models)["Counter"]()
    with pytest.raises(RNNXError, match=r"by up to 0\.01, more than the nondeterministic_atol=0\.001 given"):
        rnnx.export(model, (torch.randn(2, 5, 8),), tmp_path / "counter.onnx", nondeterministic_atol=1e-3)
    with pytest.raises(RNNXError, match="nondeterministic_atol: expected a finite, non-negative number"):
        rnnx.export(model, (torch.randn(2, 5, 8),), tmp_path / "counter.onnx", nondeterministic_atol=float("nan"))


def test_with_the_users_tolerance_the_file_is_written_and_the_report_says_whose_it_was(models: Path, tmp_path: Path,
                                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.main import main

    out = tmp_path / "jitter.onnx"
    assert main(["export", f"{models}:Jitter", "--input", "x:2x5x8", "-o", str(out), "--json", "--nondeterministic-atol", "0.2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["written"] and out.is_file()
    moved = report["check"]["nondeterministic"]
    assert moved["tolerance"] == 0.2 and moved["tolerance_from"] == "user" and moved["dtype"] == "float64"
    assert list(moved["outputs"]) == ["output"] and 0 < moved["outputs"]["output"] <= 0.05 * 1.2
    for case in report["check"]["cases"]:  # never a floor: max abs error within the user's tolerance
        (output,) = case["outputs"]
        assert output["floor"] is None and output["atol"] == 0.2 and output["stat"] == "max", case
        assert "nondeterministic_atol" in output["note"]
    assert any("the tolerance you gave" in n for n in report["check"]["notes"])
    out.unlink()  # its random multiplier is no layer's: nothing more for the session's verify to show


def test_an_honest_model_keeps_its_floor_and_dropout_in_training_mode_is_not_randomness(tmp_path: Path) -> None:
    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.rnn = torch.nn.LSTM(8, 16, batch_first=True)
            self.drop = torch.nn.Dropout(0.5)
            self.head = torch.nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.drop(self.rnn(x)[0]))

    model = Tagger().train()  # rnnx checks in eval mode: dropout off, the runs agree
    report = rnnx.export(model, (torch.randn(2, 5, 8),), tmp_path / "tagger.onnx")
    assert report.passed and report.written
    assert report.check.nondeterministic is None and report.check.to_json()["nondeterministic"] is None
    ran = [o for c in report.check.cases if not c.skipped for o in c.rows]
    assert ran and all(o.floor is not None and o.ratio is not None and o.ratio <= o.multiple for o in ran)
    assert not any("deterministic" in n for n in report.check.notes)


def test_float64_noise_is_tiny_but_not_zero_and_a_move_beyond_it_is_seen() -> None:
    calls = [0]

    class Nudged(torch.nn.Module):
        """Adds ``steps[k]`` units of float64's epsilon (at scale 2) on its k-th call."""

        def __init__(self, steps: list[int]) -> None:
            super().__init__()
            self.steps = steps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            k, calls[0] = calls[0], calls[0] + 1
            return x + self.steps[k] * 2.0 ** -52 * 2.0

    x = torch.full((3, 4), 2.0, dtype=torch.float64)
    assert noise_bound(2.0) == NOISE_ULPS * 2.0 ** -52 * 2.0 and noise_bound(0.1) == noise_bound(1.0)
    calls[0] = 0
    assert check_determinism(Nudged([0, NOISE_ULPS // 2]), leaves_of(x), _structure(x)) is None  # within the noise: agrees
    calls[0] = 0
    with pytest.raises(RNNXError, match="not deterministic"):
        check_determinism(Nudged([0, NOISE_ULPS * 4]), leaves_of(x), _structure(x))


def _structure(*values: object) -> object:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(tuple(values))[1]


# --- a model that calls exit has failed the export ------------------------------------------------

def test_exit_at_the_audits_other_sizes_is_a_json_refusal_with_nothing_written(models: Path, tmp_path: Path) -> None:
    out = tmp_path / "exits.onnx"
    run = rnnx_cli("export", f"{models}:ExitsAtOtherSizes", "--input", "x:2x5x8", "-o", out, "--json")
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    error = json.loads(run.stdout)
    assert error["kind"] == "bad_input" and error["exit_code"] == 2 and error["verb"] == "export"
    assert "the model called exit(0) in forward (models.py:" in error["error"]
    assert "while rnnx was asking the torch model which sizes it accepts" in error["error"]
    assert left_in(tmp_path) == []


def test_exit_at_every_call_is_one_line_on_stderr(models: Path, tmp_path: Path) -> None:
    run = rnnx_cli("export", f"{models}:ExitsAlways", "--input", "x:2x5x8", "-o", tmp_path / "exits.onnx")
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert line.startswith("rnnx export: the model called exit(3) in forward (models.py:") and "running the model on the example" in line
    assert left_in(tmp_path) == []


@pytest.mark.parametrize("when, stage", [
    ("type(x) is not torch.Tensor", "tracing with torch.export"),  # torch.export's fake tensors only
    # the self-check's float64 truth only, run before the file is written (rnnx.exporters.bounded)
    ("x.dtype == torch.float64 and x.shape[0] == 1", "running the torch model at batch=1"),
])
def test_exit_in_any_stage_is_refused_and_leaves_no_partial_file(when: str, stage: str, tmp_path: Path) -> None:
    import sys as _sys

    class Exits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.GRU(8, 6, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if eval(when):  # noqa: S307  the test's own condition
                _sys.exit(5)
            return self.rnn(x)[0]

    with pytest.raises(RNNXError, match=rf"the model called exit\(5\) in forward \(test_selfcheck_determinism.py:\d+\) while rnnx was {stage}"):
        rnnx.export(Exits(), (torch.randn(2, 5, 8),), tmp_path / "exits.onnx")
    assert left_in(tmp_path) == []


def test_a_model_file_that_exits_while_imported_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "script.py"
    path.write_text("import argparse\nargparse.ArgumentParser().parse_args(['--unknown'])\n")
    with pytest.raises(RNNXError, match=r"the model called exit\(2\) in <module> \(script.py:2\) while rnnx was importing torch and loading"):
        load_model(f"{path}:Net")
