"""ruff and mypy pass with the settings in pyproject.toml ([tool.ruff], [tool.mypy]).

ruff checks rnnx and the tests; mypy checks rnnx (the modules its ratchet list leaves out until
their errors are fixed). Each fails with the tool's own report. mypy keeps its cache in the
checkout's .mypy_cache, so a second run takes seconds; a fresh clone pays a full run once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    """The tool installed beside this Python (the test extra pins it), else skip naming the install."""
    found = Path(sys.executable).with_name(name)
    if found.exists():
        return str(found)
    on_path = shutil.which(name)
    if on_path is None:
        pytest.skip(f"{name} is not installed: pip install -c constraints.txt -e '.[test]'")
    return on_path


def test_ruff_passes_on_the_package_and_the_tests() -> None:
    done = subprocess.run([_tool("ruff"), "check", "--no-cache", "rnnx", "tests"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_passes_on_the_package() -> None:
    done = subprocess.run([_tool("mypy"), "rnnx"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_linters_are_pinned_where_the_tests_install_them() -> None:
    """The versions whose rules the code meets: a newer ruff adds rules, a newer mypy new errors."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    pins = {line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()}
    for pin in ("ruff==0.16.9", "mypy==2.4.0"):
        assert pin in extra and pin in pins, pin
