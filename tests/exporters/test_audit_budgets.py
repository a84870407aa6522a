"""The export's runs of the torch model at sizes it was not given are bounded, and leave nothing behind.

The dimension audit and the self-check run the user's forward at shapes other than the example's.
Before, a forward that slept 15 s there was still running at 150 s, one whose memory grows with
the batch squared reached 8 GB, and one that called ``os._exit(0)`` in the self-check left
``.m.onnx.XXXX.part.onnx`` beside the output. Each such run is now a probe in a forked child
(:mod:`rnnx.exporters.bounded`), killed past ``--time-limit`` or ``--max-memory``: the export
fails in one line (exit 2) naming the probe and the flag, and nothing is written.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from rnnx.errors import BudgetExceeded  # noqa: E402
from rnnx.exporters import bounded as bounded_module  # noqa: E402
from rnnx.exporters.bounded import Bounds, ModelEnded, bounded  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="probes run in forked children on Linux")

EXAMPLE = "x:3x5x4"
MODELS = '''
import os
import time

import torch
from torch import nn

EXAMPLE = (3, 5, 4)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.LSTM(4, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class SleepsAtOtherShapes(Tagger):
    """torch.export guards on the shape, so every dimension is static and the audit asks."""

    def forward(self, x):
        if tuple(x.shape) != EXAMPLE:
            with open(os.environ["RNNX_TEST_STAMP"], "w") as f:  # when the probe began
                f.write(repr(time.time()))
            time.sleep(15)
        return super().forward(x)


class MemoryGrowsWithBatchSquared(Tagger):
    """256 MiB per batch squared, touched: the audit's probe at batch 6 asks for 9 GiB."""

    def forward(self, x):
        if tuple(x.shape) != EXAMPLE:
            batch = x.shape[0]
            scratch = torch.ones(batch * batch * 2**26)
            x = x + scratch[:1].sum() * 0
        return super().forward(x)


class ExitsInTheSelfCheck(Tagger):
    """Hidden from tracing, so the batch stays dynamic and the self-check meets it."""

    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] != EXAMPLE[0]:
            os._exit(0)
        return super().forward(x)
'''

# The peak a run of rnnx may reach under --max-memory 2G: what rnnx holds (torch, ONNX Runtime,
# the traced model: ~0.5 GiB) plus the probe's 2 GiB, plus room. Unbounded, the probe takes 9 GiB.
PEAK_UNDER_2G = 3.5 * (1 << 30)


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def export_cli(models: Path, name: str, out: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """``rnnx export`` in a process of its own, and the peak resident memory of that process and
    of every child it waited for (its probes), measured by a wrapper that ran nothing else."""
    argv = [sys.executable, "-m", "rnnx", "export", f"{models}:{name}", "--input", EXAMPLE, "-o", str(out), *flags]
    wrapper = ("import json, resource, subprocess, sys; "
               "run = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True); "
               "sys.stderr.write(run.stderr); sys.stdout.write(run.stdout); "
               "print(json.dumps([run.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024]))")
    done = subprocess.run([sys.executable, "-c", wrapper, json.dumps(argv)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    code, peak = json.loads(done.stdout.splitlines()[-1])
    return subprocess.CompletedProcess(argv, code, "\n".join(done.stdout.splitlines()[:-1]), done.stderr), peak


def left_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".py" and p.name not in ("__pycache__", "stamp"))


def test_a_forward_that_sleeps_at_other_shapes_is_stopped_at_the_time_limit(models: Path, tmp_path: Path) -> None:
    stamp = tmp_path / "stamp"
    run, _ = export_cli(models, "SleepsAtOtherShapes", tmp_path / "m.onnx", "--time-limit", "3", env={"RNNX_TEST_STAMP": str(stamp)})
    ended = time.time()
    assert run.returncode == 2, run.stderr
    line = run.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "the dimension audit's run of the model with x dim 0 at" in line
    assert "time limit of 3 s" in line and "--time-limit SECONDS" in line
    # from the moment the first probe began to sleep to the end of rnnx: the limit and a few
    # seconds (reaping the child, the interpreter's exit); unbounded, this probe alone is 15 s
    # and the audit tries three dimensions
    assert ended - float(stamp.read_text()) < 3 + 8
    assert left_in(tmp_path) == []


def test_a_forward_whose_memory_grows_with_the_batch_squared_is_stopped_at_the_budget(models: Path, tmp_path: Path) -> None:
    run, peak = export_cli(models, "MemoryGrowsWithBatchSquared", tmp_path / "m.onnx", "--max-memory", "2G")
    assert run.returncode == 2, run.stderr
    line = run.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "the dimension audit's run of the model with x dim 0 at 6" in line
    assert "memory budget of 2.0 GiB" in line and "--max-memory SIZE" in line
    assert peak < PEAK_UNDER_2G, f"peak resident memory {peak / (1 << 30):.2f} GiB"
    assert left_in(tmp_path) == []


def test_os_exit_in_the_self_check_leaves_no_part_file(models: Path, tmp_path: Path) -> None:
    """os._exit cannot be intercepted in the process that calls it: run in-process, the export
    would end with exit status 0 and nothing written. The self-check's torch runs now happen before
    the temporary file exists, and in a probe's child, so rnnx itself sees the child end and says so."""
    run, _ = export_cli(models, "ExitsInTheSelfCheck", tmp_path / "m.onnx", "--json")
    assert run.returncode == 2, run.stderr
    error = json.loads(run.stdout)
    assert error["exit_code"] == 2
    assert "the self-check's run of the model at batch=1 (x 1x5x4) ended the process running the model (exit status 0" in error["error"]
    assert "os._exit" in error["error"]
    assert left_in(tmp_path) == []  # no m.onnx, no .m.onnx.XXXX.part.onnx


def test_an_honest_model_exports_the_same_file_with_probes_in_children_or_in_process(models: Path, tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    found: dict[str, object] = {}
    exec(compile(models.read_text(), str(models), "exec"), found)  # noqa: S102  the test's own model code
    x = torch.randn(3, 5, 4)
    in_children = rnnx.export(found["Tagger"](), (x,), tmp_path / "children.onnx")
    monkeypatch.setattr(bounded_module, "_can_fork", lambda: False)
    in_process = rnnx.export(found["Tagger"](), (x,), tmp_path / "in_process.onnx")
    assert in_children.written and in_children.passed and in_process.written
    assert in_children.axes == in_process.axes == {"x": {0: "batch", 1: "seq"}}
    assert in_children.check.dims == in_process.check.dims
    assert [(c.name, c.skipped, [o.max_abs for o in c.rows]) for c in in_children.check.cases] == \
        [(c.name, c.skipped, [o.max_abs for o in c.rows]) for c in in_process.check.cases]
    assert (tmp_path / "children.onnx").read_bytes() == (tmp_path / "in_process.onnx").read_bytes()


# --- the runner itself ------------------------------------------------------------------------

BOUNDS = Bounds(seconds=5.0, memory=1 << 30)


def test_what_the_model_raises_in_a_child_reads_as_it_would_in_process() -> None:
    class ShapeRefused(Exception):
        pass

    def refuses() -> None:
        raise ShapeRefused("expected 4 features, got 8")

    with pytest.raises(Exception, match="expected 4 features, got 8") as raised:
        bounded(refuses, "a probe", BOUNDS)
    assert type(raised.value).__name__ == "ShapeRefused" and not isinstance(raised.value, BudgetExceeded)
    assert bounded(lambda: torch.arange(3) * 2, "a probe", BOUNDS).tolist() == [0, 2, 4]


def test_an_exit_in_a_child_is_an_exit_naming_where_and_os_exit_is_a_refusal() -> None:
    def exits() -> None:
        sys.exit(3)

    with pytest.raises(SystemExit) as stopped:
        bounded(exits, "a probe", BOUNDS)
    assert stopped.value.code == 3 and "in exits (test_audit_budgets.py:" in stopped.value.where
    with pytest.raises(ModelEnded, match="a probe ended the process running the model .exit status 7"):
        bounded(lambda: os._exit(7), "a probe", BOUNDS)
    def crashes() -> None:
        faulthandler.disable()  # pytest's would print the child's stack
        os.kill(os.getpid(), signal.SIGSEGV)

    with pytest.raises(ModelEnded, match=r"crashed the process running the model \(SIGSEGV\)"):
        bounded(crashes, "a probe", BOUNDS)


def test_the_in_process_watchdog_stops_a_sleep_and_gives_the_alarm_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded_module, "_can_fork", lambda: False)

    def mine(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        started = time.monotonic()
        with pytest.raises(BudgetExceeded, match=r"a probe ran past the time limit of 0\.5 s .* --time-limit SECONDS"):
            bounded(lambda: time.sleep(15), "a probe", Bounds(seconds=0.5, memory=1 << 30))
        assert time.monotonic() - started < 3
        assert signal.getsignal(signal.SIGALRM) is mine and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)
