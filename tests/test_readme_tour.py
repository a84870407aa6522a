"""The README's five-minute tour runs as written: each ``rnnx`` command of its tour, in order,
from a fresh folder holding what the repository ships (examples/, the tf2onnx fixture),
exits 0. The docs check (tests/test_docs.py) parses every other command."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tour_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", tour, re.S)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines() if line.startswith("rnnx ")]


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    commands = tour_commands()
    assert [c[1] for c in commands][:2] == ["export", "verify"] and len(commands) >= 7
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for command in commands:
        for arg in command:  # the repository's own files the tour names, where the user's clone has them
            if arg.startswith("tests/fixtures/"):
                (tmp_path / arg).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / arg, tmp_path / arg)
    (tmp_path / "out").mkdir()
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "rnnx.cli", *command[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, f"{shlex.join(command)}: exit {done.returncode}: {done.stderr.strip()[-500:]}"
