"""Long verbs say what they are doing on a terminal's stderr, and nothing in a pipeline."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import rnnx
from rnnx import RNNSpec, RNNWeights, progress


def _weights(tmp_path: Path) -> Path:
    path = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4,layers=2"), seed=1), path)
    return path


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal of 40 rows and 120 columns; what it drew there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "rnnx", *args], stdout=subprocess.DEVNULL, stderr=slave, cwd=cwd)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    return proc.wait(timeout=300), drawn.decode(errors="replace")


def test_convert_shows_its_steps_on_a_terminal(tmp_path: Path) -> None:
    source = _weights(tmp_path)
    status, drawn = _on_a_terminal(["convert", str(source), "-o", "m.onnx"], tmp_path)
    assert status == 0
    for step in ("rnnx convert: reading w.safetensors", "rnnx convert: writing m.onnx", "rnnx convert: checking the written file"):
        assert step in drawn, drawn


def test_nothing_is_drawn_in_a_pipeline_or_with_json(tmp_path: Path) -> None:
    source = _weights(tmp_path)
    piped = subprocess.run([sys.executable, "-m", "rnnx", "convert", str(source), "-o", "m.onnx"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert piped.returncode == 0 and piped.stderr == ""
    status, drawn = _on_a_terminal(["convert", str(source), "-o", "n.onnx", "--json"], tmp_path)
    assert status == 0 and "rnnx convert" not in drawn


def test_steps_cost_nothing_without_a_display(capsys) -> None:  # type: ignore[no-untyped-def]
    progress.step("reading")  # the library's calls, from Python: no output at all
    with progress.shown("rnnx test", enabled=False):
        progress.step("writing")
    assert capsys.readouterr() == ("", "")


def test_a_large_write_shows_how_many_megabytes_are_written(tmp_path: Path) -> None:
    """A streamed write counts its megabytes on the terminal, for ONNX and for a raw blob."""
    source = tmp_path / "big.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=256,hidden=512,layers=2,bidirectional"), seed=2), source)
    for target in ("m.onnx", "m.bin"):
        status, drawn = _on_a_terminal(["convert", str(source), "-o", target, "--no-check"], tmp_path)
        assert status == 0
        counts = [int(n) for n in re.findall(rf"writing {re.escape(target)}: (\d+) of 38 MB", drawn)]
        assert len(set(counts)) >= 5 and counts == sorted(counts) and counts[-1] == 38, drawn


def test_the_elapsed_time_moves_during_a_long_step(monkeypatch: object) -> None:
    """A step that sits in one library call for seconds still redraws the line, with the time."""
    import io
    import time

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)  # type: ignore[attr-defined]
    with progress.shown("rnnx export", True):
        progress.step("tracing with torch.export")
        time.sleep(1.3)
    drawn = err.getvalue()
    assert drawn.count("rnnx export: tracing with torch.export [") >= 3  # the step, then at least two redraws as the seconds pass
