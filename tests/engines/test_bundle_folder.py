"""``rnnx bundle -o DIR`` never deletes what rnnx did not write, and leaves nothing staged.

A folder once counted as "an earlier bundle" when it merely held files named BUNDLE.json and
check.py (even links to files elsewhere); it was replaced whole, and a user's file in it was
deleted, exit 0. Now a folder is replaced only when its BUNDLE.json is rnnx bundle's and lists
every file in it, unchanged, besides what the device scripts make.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from tests.helpers import rnnx_in_process  # noqa: E402

VERSION = "8.6"


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(4, 6, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("folder") / "small.onnx"
    torch.manual_seed(0)
    assert rnnx.export(Small().eval(), (torch.randn(1, 5, 4),), path).passed
    return path


def _bundle(model: Path, out: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    if cwd is None:  # in-process (rnnx.cli.main): what is written and refused is tested, not the process
        return rnnx_in_process("bundle", model, "-o", out, "--tensorrt", VERSION)
    return subprocess.run([sys.executable, "-m", "rnnx", "bundle", str(model), "-o", str(out), "--tensorrt", VERSION],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def _refused(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def _staged(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(".")]


def test_marker_files_alone_do_not_make_a_folder_rnnxs(model, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "BUNDLE.json").write_text("not json")
    (victim / "check.py").write_text("print('mine')")
    (victim / "precious.txt").write_text("keep me")
    _refused(_bundle(model, victim), "BUNDLE.json is not one rnnx bundle wrote")
    assert (victim / "precious.txt").read_text() == "keep me" and sorted(p.name for p in victim.iterdir()) == ["BUNDLE.json", "check.py", "precious.txt"]
    # the same with both markers links to files elsewhere, and a BUNDLE.json that parses but is not rnnx's
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "BUNDLE.json").write_text(json.dumps({"format": 2, "files": {}}))
    (elsewhere / "check.py").write_text("x")
    linked = tmp_path / "linked"
    linked.mkdir()
    for name in ("BUNDLE.json", "check.py"):
        (linked / name).symlink_to(elsewhere / name)
    (linked / "precious.txt").write_text("keep me")
    _refused(_bundle(model, linked), "not a plain file")
    _refused(_bundle(model, elsewhere), "not one rnnx bundle wrote")
    assert (linked / "precious.txt").exists() and (elsewhere / "check.py").read_text() == "x"
    assert not _staged(tmp_path)


def test_an_earlier_bundle_is_replaced_only_while_it_holds_nothing_else(model, tmp_path: Path) -> None:
    folder = tmp_path / "b"
    assert _bundle(model, folder).returncode == 0
    for name, content in (("model.engine", b"engine"), ("build.log", b"log"), ("timing.cache", b"cache"), ("out/example/0.json", b"[]")):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)  # what build.sh and check.sh leave on the device
    assert _bundle(model, folder).returncode == 0 and not (folder / "model.engine").exists()
    (folder / "notes" ).mkdir()
    (folder / "notes" / "precious.txt").write_text("mine")
    _refused(_bundle(model, folder), "notes/precious.txt", "did not write", "nothing was deleted")
    assert (folder / "notes" / "precious.txt").read_text() == "mine"
    (folder / "notes" / "precious.txt").unlink()
    (folder / "notes").rmdir()
    with open(folder / "build.sh", "a") as f:
        f.write("# my edit\n")
    _refused(_bundle(model, folder), "build.sh", "changed since")
    assert (folder / "build.sh").read_text().endswith("# my edit\n")
    (folder / "build.sh").write_text((folder / "build.sh").read_text().replace("# my edit\n", ""))
    (folder / "out").mkdir()
    (folder / "out" / "secret").symlink_to(tmp_path / "elsewhere.txt")
    _refused(_bundle(model, folder), "out/secret", "symbolic link")
    assert not _staged(tmp_path)


def test_dot_inside_an_earlier_bundle_and_a_long_name(model, tmp_path: Path) -> None:
    folder = tmp_path / "b"
    assert _bundle(model, folder).returncode == 0
    done = _bundle(model, ".", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert (folder / "BUNDLE.json").is_file() and not _staged(tmp_path), _staged(tmp_path)
    long = tmp_path / ("n" * 250)  # a valid name; the staging folder's own name is short
    done = _bundle(model, long)
    assert done.returncode == 0 and long.is_dir(), done.stderr


@pytest.mark.parametrize("after", [pytest.param(0.5, marks=pytest.mark.slow), 2.0, pytest.param(4.0, marks=pytest.mark.slow)])
def test_sigterm_leaves_nothing_staged(model, tmp_path: Path, after: float) -> None:
    out = tmp_path / "b"
    child = subprocess.Popen([sys.executable, "-m", "rnnx", "bundle", str(model), "-o", str(out), "--tensorrt", VERSION],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(after)
    child.send_signal(signal.SIGTERM)
    start = time.monotonic()
    _, err = child.communicate(timeout=60)
    assert time.monotonic() - start < 3, "SIGTERM took more than 3 s to act"
    assert child.returncode in (0, 128 + signal.SIGTERM, -signal.SIGTERM), err  # -15: stopped before rnnx set its handler
    assert not _staged(tmp_path), _staged(tmp_path)
    if child.returncode:
        assert not out.exists()
    if child.returncode == 128 + signal.SIGTERM:
        assert "no output was left behind" in err
