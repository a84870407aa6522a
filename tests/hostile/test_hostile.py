"""The hostile corpus: every attack in :mod:`tests.hostile.attacks`, run through the real CLI.

Each run is a separate process, as a user's is, so that its peak memory (the ONNX Runtime
child included) and its reaction to SIGTERM are measured for real. Besides what each attack
asks for, every run must hold:

- no traceback, and an exit status of 0, 1 or 2 (3 is rnnx's own bug);
- a refusal is one line on stderr;
- every input file is unchanged, byte for byte, and keeps its kind and mode;
- nothing is left behind: no temporary file, and no output unless the run succeeded;
- peak memory under the attack's budget (1 GiB unless it says otherwise).

The default run builds each attack once (under two minutes); ``--slow`` builds each
RNNX_HOSTILE_ROUNDS times (default 60) with different sizes and names: thousands of files.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("h5py")

from tests.hostile.attacks import ATTACKS, Attack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _snapshot(folder: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``folder``: (kind, mode, content hash)."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            seen[str(path.relative_to(folder))] = ("file", stat.S_IMODE(st.st_mode), digest)
        else:
            kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "special"
            seen[str(path.relative_to(folder))] = (kind, stat.S_IMODE(st.st_mode), os.readlink(path) if kind == "link" else "")
    return seen


def _limit_file_size(nbytes: int | None) -> Callable[[], None] | None:
    if nbytes is None:
        return None

    def limit() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return limit


# The CLI is started by this small launcher, not by pytest itself: Linux counts a forked
# child's resident set from its parent's at the fork, so a child of a pytest process that has
# grown to a gigabyte would report that gigabyte as its own peak. The launcher reports the
# CLI's own peak (its ONNX Runtime child included) and exit status, and passes SIGTERM on.
_LAUNCHER = """
import os, signal, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda s, f: child.send_signal(s))
_, status, usage = os.wait4(child.pid, 0)
child.returncode = os.waitstatus_to_exitcode(status)
with open(sys.argv[1], "w") as f:
    f.write(f"{child.returncode} {usage.ru_maxrss}")
"""


def _run(argv: list[str], folder: Path, term_after: float | None, timeout: float = 120, file_size_limit: int | None = None) -> tuple[int, str, float, int]:
    """(exit status, stderr, seconds, peak RSS in KiB of the CLI and its children)."""
    err_path = folder.parent / f"{folder.name}.stderr"
    result_path = folder.parent / f"{folder.name}.result"
    with open(err_path, "wb") as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(result_path), sys.executable, "-m", "rnnx.cli", *argv], cwd=folder,
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                preexec_fn=_limit_file_size(file_size_limit), start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        if term_after is not None:
            threading.Timer(term_after, lambda: proc.poll() is None and proc.send_signal(signal.SIGTERM)).start()
        proc.wait()
        timer.cancel()
        seconds = time.monotonic() - start
    code, rss_kib = (int(v) for v in result_path.read_text().split())
    return code, err_path.read_text(errors="replace"), seconds, rss_kib


def run_attack(name: str, folder: Path, seed: int) -> None:
    folder.mkdir()
    attack: Attack = ATTACKS[name](folder, np.random.default_rng(seed))
    before = _snapshot(folder)
    code, stderr, seconds, rss_kib = _run(attack.argv, folder, attack.term_after, file_size_limit=attack.file_size_limit)
    after = _snapshot(folder)
    where = f"attack {name} (seed {seed}): rnnx {' '.join(a[:60] for a in attack.argv)}"
    assert "Traceback" not in stderr, f"{where}: traceback\n{stderr[-2000:]}"
    assert code in attack.exits, f"{where}: exit {code}, expected {attack.exits}\n{stderr[-1000:]}"
    if code == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rnnx "), f"{where}: a refusal must be one line, found\n{stderr[-1000:]}"
        assert attack.says.lower() in stderr.lower(), f"{where}: expected the message to say {attack.says!r}, found {stderr.strip()}"
    created = {p for p in after if p not in before}
    allowed = {str(p.relative_to(folder)) for p in attack.outputs} if code == 0 else set()
    assert created <= allowed, f"{where}: left behind {sorted(created - allowed)} (exit {code})"
    for path, entry in before.items():
        if code == 0 and path in {str(p.relative_to(folder)) for p in attack.outputs}:
            continue
        assert after.get(path) == entry, f"{where}: input {path} changed: {entry} -> {after.get(path)}"
    assert rss_kib < attack.max_rss_mib * 1024, f"{where}: peak memory {rss_kib // 1024} MiB > {attack.max_rss_mib} MiB"
    assert seconds < 60, f"{where}: took {seconds:.0f} s"
    if attack.check is not None:
        problem = attack.check(folder)
        assert problem is None, f"{where}: {problem}"


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    rounds = int(os.environ.get("RNNX_HOSTILE_ROUNDS", "60")) if request.config.getoption("--slow") else 1
    for seed in range(rounds):
        run_attack(name, tmp_path / f"round{seed}", seed)
