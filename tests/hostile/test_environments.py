"""Hostile environments (issue 30): an input the user may not read, an output folder it may not
write, a full disk. Each is bad input: exit 2, one line on stderr, no traceback, nothing written.
And --json: a failing run prints exactly one JSON object on stdout, valid against
rnnx/cli/schema/error.json.

The suite runs as root, which ignores permissions, so the permission tests run the real CLI in a
child process that drops to the unprivileged user 65534 (nobody) before it starts.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rnnx.cli.main import _without_prefix, main

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "rnnx" / "cli" / "schema" / "error.json").read_text())
NOBODY = 65534


def _drop() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _child_env() -> dict[str, str]:
    # The venv's interpreter may lie under a folder nobody may enter (/root/.pyenv): the child may
    # then run another build of the same Python, finding rnnx and its dependencies by PYTHONPATH.
    paths = [str(ROOT), *site.getsitepackages()]
    # The suite's log of written ONNX files (RNNX_WRITTEN_LOG) is root's: user 65534 may not append to it.
    inherited = {k: v for k, v in os.environ.items() if k != "RNNX_WRITTEN_LOG"}
    return {**inherited, "PYTHONPATH": os.pathsep.join(paths), "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}


_interpreter: list[str | None] = []


def _unprivileged_python() -> str:
    """An interpreter the unprivileged user can run with rnnx importable, or a skip saying why not."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the CLI as an unprivileged user (a non-root user cannot make a file unreadable to itself portably)")
    if not _interpreter:
        found = None
        for candidate in dict.fromkeys([sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", ""),
                                        shutil.which("python3") or "", "/usr/bin/python3"]):
            if not candidate:
                continue
            try:
                probe = subprocess.run([candidate, "-c", "import rnnx.cli.main, numpy, torch"], preexec_fn=_drop, env=_child_env(),
                                       capture_output=True, timeout=120)
            except (OSError, subprocess.SubprocessError):
                continue
            if probe.returncode == 0 and sys.version_info[:2] == tuple(map(int, subprocess.run(
                    [candidate, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"], preexec_fn=_drop,
                    capture_output=True, text=True).stdout.split())):
                found = candidate
                break
        _interpreter.append(found)
    if _interpreter[0] is None:
        pytest.skip("no Python interpreter that user 65534 may run imports rnnx (the venv lies in a folder it may not enter)")
    return _interpreter[0]  # type: ignore[return-value]


def _as_nobody(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_unprivileged_python(), "-m", "rnnx", *args], cwd=cwd, preexec_fn=_drop, env=_child_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder user 65534 may enter (pytest's tmp_path lies under a 0700 folder) holding an LSTM
    state_dict it may read, one it may not, the ONNX file of the first, and a folder it may not write."""
    folder = Path(tempfile.mkdtemp(prefix="rnnx-env-", dir="/tmp"))
    try:
        folder.chmod(0o777)
        torch.manual_seed(0)
        torch.save(torch.nn.LSTM(4, 8).state_dict(), folder / "lstm.pt")
        (folder / "lstm.pt").chmod(0o644)
        shutil.copy(folder / "lstm.pt", folder / "secret.pt")
        (folder / "secret.pt").chmod(0o600)
        assert main(["convert", str(folder / "lstm.pt"), "-o", str(folder / "lstm.onnx")]) == 0
        (folder / "lstm.onnx").chmod(0o644)
        (folder / "locked").mkdir(mode=0o555)
        (folder / "locked").chmod(0o555)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _refused(run: subprocess.CompletedProcess[str], *words: str) -> str:
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_an_input_the_user_may_not_read_is_bad_input(shared: Path) -> None:
    before = _listing(shared)
    for verb in (["convert", "secret.pt", "-o", "out.safetensors"], ["inspect", "secret.pt"]):
        line = _refused(_as_nobody(verb, shared), "secret.pt", "permission denied")
        assert "pickle" not in line  # not the format reader's guess
    assert _listing(shared) == before


def test_an_output_folder_the_user_may_not_write_is_bad_input(shared: Path) -> None:
    _refused(_as_nobody(["convert", "lstm.pt", "-o", "locked/out.onnx"], shared), "locked")
    _refused(_as_nobody(["verify", "lstm.onnx", "--report", "locked/report.json"], shared), "locked")
    assert _listing(shared / "locked") == set()


def test_bundle_as_an_unprivileged_user(shared: Path) -> None:
    """A bundle written by user 65534 where it may write; one into a folder it may not write,
    or from a file it may not read, is bad input and leaves nothing."""
    done = _as_nobody(["bundle", "lstm.onnx", "-o", "nobody-bundle", "--jetpack", "5.1.2"], shared)
    try:
        assert done.returncode == 0, done.stderr
        assert (shared / "nobody-bundle" / "check.py").is_file() and (shared / "nobody-bundle").stat().st_uid == NOBODY
    finally:
        shutil.rmtree(shared / "nobody-bundle", ignore_errors=True)
    before = _listing(shared)
    _refused(_as_nobody(["bundle", "lstm.onnx", "-o", "locked/b", "--jetpack", "5.1.2"], shared), "locked")
    _refused(_as_nobody(["bundle", "secret.pt", "-o", "b2"], shared), "secret.pt")
    assert _listing(shared / "locked") == set() and _listing(shared) == before


def test_json_failure_as_an_unprivileged_user(shared: Path) -> None:
    run = _as_nobody(["--json", "convert", "secret.pt", "-o", "out.onnx"], shared)
    line = _refused(run)
    found = _one_json_object(run.stdout)
    assert found["error"] == line and found["exit_code"] == 2 and found["path"] == "secret.pt"


# A full disk, without root: the lowest write call fails as the kernel reports it.


def _state(folder: Path, hidden: int = 8) -> Path:
    torch.manual_seed(0)
    path = folder / "lstm.pt"
    torch.save(torch.nn.LSTM(4, hidden).state_dict(), path)
    return path


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_a_full_disk_at_fsync_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = _state(tmp_path)
    before = _listing(tmp_path)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("rnnx.fileio.os.fsync", full)
    for out in ("out.safetensors", "out.onnx", "out.bin"):
        assert main(["convert", str(src), "-o", str(tmp_path / out)]) == 2
        _one_line(capsys, "full", "nothing was written")
    assert _listing(tmp_path) == before


def test_torch_save_on_a_full_disk_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = _state(tmp_path)
    (tmp_path / "in.safetensors").write_bytes(b"")
    assert main(["convert", str(src), "-o", str(tmp_path / "in.safetensors"), "--to", "torch"]) == 0
    before = _listing(tmp_path)
    capsys.readouterr()

    def save(obj: object, f: str) -> None:  # what torch's zip writer says when the disk fills
        Path(f).write_bytes(b"PK partial")
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 1664 vs 1558")

    class Full:
        f_bavail, f_frsize = 0, 4096

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr("rnnx.fileio.os.statvfs", lambda folder: Full())
    assert main(["convert", str(tmp_path / "in.safetensors"), "-o", str(tmp_path / "out.pt")]) == 2
    _one_line(capsys, "out.pt", "full", "nothing was written")
    assert _listing(tmp_path) == before


def test_a_real_full_file_system(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(tiny)], capture_output=True).returncode:
        pytest.skip("cannot mount a 16 KiB tmpfs here (needs root and mount rights)")
    try:
        src = _state(tmp_path, hidden=64)  # 130 KB of weights, 16 KiB of room
        assert main(["convert", str(src), "-o", str(tiny / "out.onnx")]) == 2
        _one_line(capsys, "full", "nothing was written")
        assert _listing(tiny) == set()
    finally:
        subprocess.run(["umount", str(tiny)], check=False)


def test_mixed_key_naming_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = torch.nn.LSTM(4, 8).state_dict()
    state["bias_ih"] = state.pop("bias_ih_l0")
    torch.save(state, tmp_path / "mixed.pt")
    assert main(["convert", str(tmp_path / "mixed.pt"), "-o", str(tmp_path / "out.onnx")]) == 2
    _one_line(capsys, "bias_ih", "weight_ih_l0")
    assert not (tmp_path / "out.onnx").exists()


# The --json contract.


def _one_json_object(stdout: str) -> dict:
    found = json.loads(stdout)  # exactly one value: json.loads refuses trailing data
    assert isinstance(found, dict)
    try:
        import jsonschema
    except ImportError:
        for key, kind in (("passed", bool), ("exit_code", int), ("error", str), ("kind", str)):
            assert isinstance(found[key], kind), key
        assert found["passed"] is False and "\n" not in found["error"]
    else:
        jsonschema.validate(found, SCHEMA)
    return found


@pytest.mark.parametrize("argv", [
    ["convert", "{d}/none.pt", "-o", "{d}/out.onnx"],
    ["export", "{d}/none.py:model", "-o", "{d}/out.onnx", "--input", "1x2x4"],
    ["verify", "{d}/none.onnx"],
    ["inspect", "{d}/none.onnx"],
    ["fuse", "{d}/none.onnx", "-o", "{d}/out.onnx"],
    ["lower", "{d}/none.onnx", "-o", "{d}/out.onnx"],
    ["layout"],
    ["convert", "{d}/none.pt", "--no-such-flag"],
])
@pytest.mark.parametrize("where", ["before", "after"])
def test_a_failing_run_prints_one_json_object(argv: list[str], where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(d=tmp_path) for a in argv]
    argv = ["--json", *argv] if where == "before" else [argv[0], "--json", *argv[1:]]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2, err
    found = _one_json_object(out)
    assert found["exit_code"] == 2 and found["error"] == err.strip() and len(err.strip().splitlines()) == 1
    if found["kind"] == "bad_input" and found["error"].split(": ")[1].endswith(("none.pt", "none.onnx")):  # the message starts with the path
        assert "none" in found["path"]


def test_export_json_has_passed() -> None:
    from rnnx.exporters.writing import ExportReport

    assert ExportReport(path="m.onnx", opset=17, op_types={}, recurrences=[]).to_json()["passed"] is True


def test_messages_carry_the_verb_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _without_prefix("rnnx export: rnnx export needs PyTorch", "export") == "rnnx export needs PyTorch"
    assert _without_prefix("rnnx export: needs PyTorch", "export") == "needs PyTorch"
    assert _without_prefix("export: no example inputs", "export") == "no example inputs"
    assert _without_prefix("exports: x", "export") == "exports: x"
    blob = tmp_path / "w.bin"
    blob.write_bytes(b"\0" * 1792)
    assert main(["layout", str(blob)]) == 2
    line = _one_line(capsys, "--spec SPEC", "without the file")
    assert line.count("rnnx layout:") == 1
