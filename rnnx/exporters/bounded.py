"""Runs of the user's torch model at sizes it was not given, held to --time-limit and --max-memory.

The dimension audit, the self-check and their helpers run the model at shapes other than the
example's: that is where a hostile or careless forward sleeps, grows its memory with the
batch squared, or ends the process (``os._exit``). Each such run is one *probe*, and each probe
runs in a forked child process (Linux, CPU): the parent waits for its answer, reads the child's
resident memory every few milliseconds from ``/proc``, and kills it with SIGKILL past its
budget. A kill is exact where nothing in-process is: a single torch kernel (``torch.ones`` of
16 GiB) returns to Python only when it is done, so a timer or a memory check in the process
itself would act after the damage. The child also takes the blame for what no ``try`` catches:
a forward that calls ``os._exit`` or crashes ends the child, and the export fails naming the
probe, with no temporary file behind.

Why not ``RLIMIT_AS`` in-process: torch's address space is already gigabytes of reservations,
and a new thread's stack or malloc arena (64 MiB each) would trip a limit set near the current
size on an honest model. The child's *resident* memory is what it really uses.

A forked child of a process whose OpenMP pool has run hangs in its first parallel region
(libgomp's pool threads do not exist in the child), so the child computes on one thread
(``torch.set_num_threads(1)``): probes run at small sizes, and a wrong answer is worse than a
slow one. Where a child cannot be forked (not Linux, or CUDA already initialised, which cannot
cross a fork), the probe runs in-process under a SIGALRM watchdog (main thread only, the
previous handler and timer restored after): it interrupts Python-level work (``time.sleep``,
a loop, between torch ops), and an allocation that fails is a memory stop.

A stopped probe raises :class:`~rnnx.errors.BudgetExceeded` (exit 2) naming it, why, and the
flag that gives it more; a probe whose process ended raises :class:`ModelEnded`. Neither is
ever taken for "the model refuses that size": every caller that catches the model's own
exceptions lets :data:`STOPPED` through.

Budgets, per probe: ``--time-limit`` seconds (default :func:`rnnx.limits.time_limit` of the
model's parameter bytes: 20 s plus 1 s per 10 MB) and ``--max-memory`` bytes of growth over
what rnnx held when the probe began (default :func:`rnnx.limits.memory_budget` of the
parameters and the example: 1 GiB, or 16 times their size).
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rnnx import limits
from rnnx.engines.isolated import die_with_parent
from rnnx.errors import DETAIL_CHARS, BudgetExceeded, RNNXError, one_line
from rnnx.exporters.model_exit import where

T = TypeVar("T")
POLL_SECONDS = 0.005  # how often the child's memory is read: at ~5 GB/s of page faults, 25 MB past the budget at most
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CHILD_FAILED = 70  # the child could not send an answer (EX_SOFTWARE); the model's own os._exit codes are reported as given


class ModelEnded(RNNXError):
    """The model's code ended or crashed the process that ran it (``os._exit``, a segfault)."""


STOPPED = (BudgetExceeded, ModelEnded)  # never "the model refuses that size"


@dataclass(frozen=True)
class Bounds:
    seconds: float
    memory: int

    @classmethod
    def of(cls, model: Any, values: Sequence[Any]) -> Bounds:
        """The budgets for probes of ``model`` on inputs like ``values``, read from --time-limit and
        --max-memory where given (:func:`rnnx.limits.budgets`), else scaled to the model."""
        weights = sum(_nbytes(t) for t in _tensors_of(model))
        example = sum(_nbytes(v) for v in values)
        return cls(limits.time_limit(weights), limits.memory_budget(weights + example))


def bounded(fn: Callable[[], T], what: str, bounds: Bounds) -> T:
    """``fn()`` (a run of the model), its result returned and its exceptions raised as if in-process,
    stopped past ``bounds``; ``what`` names the probe in the error."""
    return bounded_each([Run(what, fn)], bounds)[0].get()


@dataclass(frozen=True)
class Run:
    """One probe of :func:`bounded_each`: ``fn`` named ``what``; run only where the run at index
    ``after`` (an earlier one) returned, as the float64 copy of a case the model refused is not run."""

    what: str
    fn: Callable[[], Any]
    after: int | None = None


@dataclass(frozen=True)
class Outcome:
    """A probe's answer: ``get()`` returns its value or raises what it raised, as it would
    in-process; ``ran`` is False where its ``after`` run did not return (or an earlier run ended
    the model's process with ``sys.exit``)."""

    what: str
    answer: tuple[Any, ...]
    bounds: Bounds

    @property
    def ran(self) -> bool:
        return self.answer[0] != "skipped"

    def get(self) -> Any:
        return _answer(self.answer, self.what, self.bounds)


def bounded_each(runs: Sequence[Run], bounds: Bounds) -> list[Outcome]:
    """Every run in turn, each held to ``bounds`` on its own (its time from when it starts), in one
    forked child: a fork of a process holding torch costs tens of milliseconds (its page tables
    copied, then torn down), more than a probe at small sizes, and the self-check's cases are a
    dozen probes. A stop raises at once, naming the run it stopped; the model's own exceptions are
    each run's answer, raised by :meth:`Outcome.get` in the order the caller asks."""
    if _can_fork():
        answers = _in_child(runs, bounds)
    else:
        answers = _in_process_each(runs, bounds)
    return [Outcome(run.what, answer, bounds) for run, answer in zip(runs, answers)]


def _over_time(what: str, bounds: Bounds) -> BudgetExceeded:
    return BudgetExceeded(f"{what} ran past the time limit of {bounds.seconds:g} s and was stopped; nothing was written. "
                          "If the model is trusted and this slow, give it more with --time-limit SECONDS")


def _over_memory(what: str, bounds: Bounds, detail: str = "") -> BudgetExceeded:
    return BudgetExceeded(f"{what} used more than the memory budget of {limits.human_size(bounds.memory)}{detail} and was stopped; "
                          "nothing was written. If the model is trusted, give it more with --max-memory SIZE")


# --- in a child ------------------------------------------------------------------------------

def _can_fork() -> bool:
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def _in_child(runs: Sequence[Run], bounds: Bounds) -> list[tuple[Any, ...]]:
    base = _rss(os.getpid()) or 0
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns of fork in a threaded process; the child touches no other thread's locks
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child: measured by the tests through the parent)
        os.close(read_end)
        _child(runs, write_end)
    os.close(write_end)
    reaped = False
    try:
        answers, current = _receive(read_end, pid, base, runs, bounds)
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        os.close(read_end)
        if not reaped:
            _kill(pid)
    if len(answers) < len(runs) and not (answers and answers[-1][0] == "exit"):
        raise _ended(status, runs[current].what, bounds)
    return answers + [("skipped",)] * (len(runs) - len(answers))


def _child(runs: Sequence[Run], pipe: int) -> None:
    code = _CHILD_FAILED
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the parent's handlers (remove outputs, print) are its own
            signal.signal(sig, signal.SIG_DFL)
        die_with_parent(_CHILD_FAILED)
        gc.freeze()  # the parent's garbage is the parent's: no finalizer of its objects runs here
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # the parent's OpenMP pool is not in the child (see the module's docstring)
        answers: list[tuple[Any, ...]] = []
        for k, run in enumerate(runs):
            if run.after is not None and answers[run.after][0] != "value":
                answers.append(("skipped",))
            else:
                _send(pipe, ("begin", k))  # the parent's clock for this run starts here
                answers.append(_run_here(run.fn))
            _send(pipe, answers[-1])
            if answers[-1][0] == "exit":  # in-process, nothing after a sys.exit would run
                break
        code = 0
    finally:
        os._exit(code)


def _run_here(fn: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("value", fn())
    except SystemExit as stop:
        return ("exit", stop.code if isinstance(stop.code, (int, str, type(None))) else repr(stop.code), where(stop))
    except BaseException as exc:  # noqa: BLE001  everything the model raised crosses back, by name and message
        return ("raised", type(exc).__name__, str(exc), _allocation_failed(exc))


def _send(pipe: int, answer: tuple[Any, ...]) -> None:
    try:
        payload = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001  a result that does not pickle: say so as a failure of the run
        payload = pickle.dumps(("raised", type(exc).__name__, f"the model's outputs could not be passed back: {exc}", False))
    view = memoryview(len(payload).to_bytes(8, "little") + payload)
    while view:
        view = view[os.write(pipe, view):]


def _receive(pipe: int, pid: int, base: int, runs: Sequence[Run], bounds: Bounds) -> tuple[list[tuple[Any, ...]], int]:
    """The child's answers as they come, and the index of the run it was on when it ended (all of
    them where it ended without one, an exit status read by the caller); kills it past a budget,
    each run's time counted from its ``begin``."""
    deadline = time.monotonic() + bounds.seconds
    answers: list[tuple[Any, ...]] = []
    current = 0
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _kill(pid)
            raise _over_time(runs[current].what, bounds)
        ready, _, _ = select.select([pipe], [], [], min(POLL_SECONDS, left))
        if ready:
            chunk = os.read(pipe, 1 << 20)
            if not chunk:
                break
            data += chunk
            while len(data) >= 8 and len(data) >= 8 + int.from_bytes(data[:8], "little"):
                end = 8 + int.from_bytes(data[:8], "little")
                frame = pickle.loads(data[8:end])  # noqa: S301  written by our own forked child, through a pipe only it and we hold
                data = data[end:]
                if frame[0] == "begin":
                    current, deadline = frame[1], time.monotonic() + bounds.seconds
                else:
                    answers.append(frame)
        used = _rss(pid)
        if used is not None and used - base > bounds.memory:
            _kill(pid)
            raise _over_memory(runs[current].what, bounds)
    return answers, current


def _answer(answer: tuple[Any, ...], what: str, bounds: Bounds) -> Any:
    if answer[0] == "value":
        return answer[1]
    if answer[0] == "skipped":
        raise RNNXError(f"{what} was not run: the run it follows did not return")  # a caller reads .ran first
    if answer[0] == "exit":
        stop = SystemExit(answer[1])
        stop.where = answer[2]  # type: ignore[attr-defined]  # model_exit.where reads it: the child's traceback stayed there
        raise stop
    if answer[0] == "error":  # in-process: the exception itself, its traceback with it
        raise answer[1]
    _, name, message, allocation = answer
    if allocation:
        raise _over_memory(what, bounds, f" (the model's allocation failed: {one_line(message, DETAIL_CHARS)})")
    raise raised_as(name)(message)


_RAISED: dict[str, type[Exception]] = {}


def raised_as(name: str) -> type[Exception]:
    """An exception class named as the one the model raised in the child, so that every message
    that quotes ``type(exc).__name__`` reads as it would in-process (the class itself, perhaps
    defined in the user's file, need not be importable here)."""
    if name not in _RAISED:
        _RAISED[name] = type(name, (ModelRaised,), {})
    return _RAISED[name]


class ModelRaised(Exception):
    """Base of the exceptions :func:`raised_as` makes: what the model raised in a probe's child."""


def _ended(status: int, what: str, bounds: Bounds) -> RNNXError:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGINT:  # Ctrl-C reached the child with us: an interruption, as in-process
            raise KeyboardInterrupt
        if sig == signal.SIGKILL:  # not ours (we raise before reaping ours): the kernel's out-of-memory killer
            return _over_memory(what, bounds, " (the system killed it, out of memory)")
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return ModelEnded(f"{what} crashed the process running the model ({name}); nothing was written: "
                          "run the model at that size in Python to see why")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return ModelEnded(f"{what} ended the process running the model (exit status {code}, without returning: os._exit or a native exit); "
                      "nothing was written: a model's code must return or raise an exception, not end the process")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


# --- in-process ------------------------------------------------------------------------------

class _Alarm(BaseException):
    """Raised by the watchdog inside the model's code: a BaseException, so that no
    ``except Exception`` of the model's (or of the audit's) takes it for an answer."""


def _in_process_each(runs: Sequence[Run], bounds: Bounds) -> list[tuple[Any, ...]]:
    """As the child does, in this process: a stop raises at once; the model's exceptions are kept."""
    answers: list[tuple[Any, ...]] = []
    for run in runs:
        if run.after is not None and answers[run.after][0] != "value":
            answers.append(("skipped",))
            continue
        try:
            answers.append(("value", _in_process(run.fn, run.what, bounds)))
        except STOPPED:
            raise
        except SystemExit as stop:
            answers.append(("error", stop))
            break
        except Exception as exc:  # noqa: BLE001  the model's own, raised again by Outcome.get
            answers.append(("error", exc))
    return answers + [("skipped",)] * (len(runs) - len(answers))


def _in_process(fn: Callable[[], T], what: str, bounds: Bounds) -> T:
    armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if armed:
        previous = signal.signal(signal.SIGALRM, _ring)
        outer, _ = signal.setitimer(signal.ITIMER_REAL, bounds.seconds)
        started = time.monotonic()
    try:
        try:
            return fn()
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _Alarm:  # also where it rang between fn's return and the timer's cancel: the time was spent
        raise _over_time(what, bounds) from None
    except Exception as exc:
        if _allocation_failed(exc):
            raise _over_memory(what, bounds, f" (the model's allocation failed: {one_line(exc, DETAIL_CHARS)})") from None
        raise
    finally:
        if armed:
            signal.signal(signal.SIGALRM, previous)
            if outer:  # a timer someone else set keeps running, less the time spent here
                signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


def _ring(signum: int, frame: object) -> None:
    raise _Alarm


def _allocation_failed(exc: BaseException) -> bool:
    """torch's CPU allocator and Python say so in these words when memory runs out."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "not enough memory" in text.lower() or "bad_alloc" in text


def _tensors_of(model: Any) -> list[Any]:
    try:
        return list(model.parameters()) + list(model.buffers())
    except Exception:  # noqa: BLE001  a model without them weighs nothing here
        return []


def _nbytes(value: Any) -> int:
    try:
        return int(value.numel()) * int(value.element_size())
    except Exception:  # noqa: BLE001  not a tensor
        return 0
