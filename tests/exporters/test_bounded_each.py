"""Several probes in one bounded child (rnnx.exporters.bounded.bounded_each).

The self-check's cases run in one forked child rather than one child each: a fork of a process
holding torch costs tens of milliseconds, more than a probe at small sizes. Each run must still
be held to the budgets on its own, a stop must name the run it stopped, and what the model
raises must reach the caller per run, as it would in-process. Both paths are run here: the
forked child (Linux) and the in-process fallback (no fork: another OS, or CUDA initialised).
"""

from __future__ import annotations

import os
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from rnnx.errors import BudgetExceeded  # noqa: E402
from rnnx.exporters import bounded as bounded_module  # noqa: E402
from rnnx.exporters.bounded import Bounds, ModelEnded, Run, bounded_each  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="probes run in forked children on Linux")


@pytest.fixture(params=["child", "in-process"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "in-process":
        monkeypatch.setattr(bounded_module, "_can_fork", lambda: False)
    return str(request.param)


def refuses() -> None:
    raise ValueError("expected 4 features, got 8")


def test_each_run_answers_for_itself_and_a_refused_run_skips_the_one_after_it(path: str) -> None:
    pid = os.getpid()
    runs = [Run("a", lambda: torch.arange(3) * 2), Run("b", refuses), Run("b64", lambda: 1 / 0, after=1),
            Run("c", os.getpid), Run("c64", lambda: "ran", after=3)]
    a, b, b64, c, c64 = bounded_each(runs, Bounds(seconds=5.0, memory=1 << 30))
    assert a.get().tolist() == [0, 2, 4]
    with pytest.raises(Exception, match="expected 4 features, got 8") as raised:
        b.get()
    assert type(raised.value).__name__ == "ValueError" and not isinstance(raised.value, BudgetExceeded)
    assert not b64.ran and c.ran and c64.ran and c64.get() == "ran"
    assert (c.get() != pid) == (path == "child"), "the forked path must not run the model in this process"


def test_each_run_has_the_whole_time_limit_and_a_stop_names_the_run_it_stopped(path: str) -> None:
    bounds = Bounds(seconds=1.5, memory=1 << 30)
    # three runs of 0.6 s: 1.8 s together, past one limit, each well inside its own
    outcomes = bounded_each([Run(f"run {k}", lambda: time.sleep(0.6)) for k in range(3)], bounds)
    assert [o.ran for o in outcomes] == [True] * 3
    started = time.monotonic()
    with pytest.raises(BudgetExceeded, match=r"^the second run ran past the time limit of 1\.5 s"):
        bounded_each([Run("the first run", lambda: None), Run("the second run", lambda: time.sleep(30)),
                      Run("the third run", lambda: None)], bounds)
    assert time.monotonic() - started < 10


def test_an_exit_stops_the_runs_after_it_and_is_raised_where_it_happened(path: str) -> None:
    ran_after = []
    outcomes = bounded_each([Run("first", lambda: 1), Run("second", lambda: sys.exit(4)),
                             Run("third", lambda: ran_after.append(1))], Bounds(seconds=5.0, memory=1 << 30))
    assert outcomes[0].get() == 1
    with pytest.raises(SystemExit) as stopped:
        outcomes[1].get()
    assert stopped.value.code == 4
    assert not outcomes[2].ran and ran_after == []


def test_a_run_that_ends_the_child_is_named_and_memory_is_held_per_child() -> None:
    with pytest.raises(ModelEnded, match=r"^the second run ended the process running the model \(exit status 9"):
        bounded_each([Run("the first run", lambda: 1), Run("the second run", lambda: os._exit(9))],
                     Bounds(seconds=5.0, memory=1 << 30))
    with pytest.raises(BudgetExceeded, match=r"^the big run used more than the memory budget of 64\.0 MiB"):
        bounded_each([Run("a small run", lambda: torch.ones(1000).sum()), Run("the big run", lambda: torch.ones(1 << 28).add_(1).sum())],
                     Bounds(seconds=20.0, memory=64 << 20))
