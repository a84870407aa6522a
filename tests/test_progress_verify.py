"""verify says which case it runs through rnnx.progress, as the other long verbs say their steps:
on a terminal's stderr, and nothing from Python (nor in a pipeline: tests/test_progress.py holds
that for every stepped verb)."""

from __future__ import annotations

import re
from pathlib import Path

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.pipelines.convert import convert
from rnnx.verify.models import verify_file
from tests.test_progress import _on_a_terminal


def _file(tmp_path: Path) -> Path:
    weights = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=3), weights)
    convert(weights, tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


def test_verify_shows_each_case_on_a_terminal_and_nothing_from_python(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = _file(tmp_path)
    status, drawn = _on_a_terminal(["verify", str(path), "--seq-lens", "1,6", "--batch", "1,2"], tmp_path)
    assert status == 0, drawn
    said = sorted(set(re.findall(r"rnnx verify: case (\d) of (\d)", drawn)))
    assert said == [("1", "4"), ("2", "4"), ("3", "4"), ("4", "4")], drawn
    report = verify_file(path, seq_lens=[1, 6], batches=[1, 2])  # from Python: the same cases, nothing drawn
    assert report.passed and len(report.cases) == 4
    assert capsys.readouterr().err == ""


def test_stack_verify_shows_each_case_on_a_terminal_and_nothing_with_json_or_from_python(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """verify MODEL --against WEIGHTS (the stack verify) says each case and dtype as a step, as
    whole-model verify does; --json draws nothing, and a Python caller sees nothing."""
    from rnnx.verify import verify

    path = _file(tmp_path)
    args = ["verify", str(path), "--against", "w.safetensors", "--seq-lens", "1,6", "--batch", "1,2", "--dtype", "fp32,fp64"]
    status, drawn = _on_a_terminal(args, tmp_path)
    assert status == 0, drawn
    said = sorted(set(re.findall(r"rnnx verify: case (\d) of (\d): T=\d, B=\d, (fp\d\d)", drawn)))
    assert said == [(str(k), "8", "fp32" if k <= 4 else "fp64") for k in range(1, 9)], drawn
    status, drawn = _on_a_terminal([*args, "--json"], tmp_path)
    assert status == 0 and "rnnx verify" not in drawn, drawn
    report = verify(tmp_path / "w.safetensors", path, seq_lens=[1, 6], batches=[1, 2], dtypes=["fp32", "fp64"])
    assert report.passed
    assert capsys.readouterr().err == ""
