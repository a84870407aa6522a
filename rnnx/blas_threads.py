"""numpy's BLAS threads while the float64 reference runs: how many, and a context that sets them.

Why: the reference's per-step products are small (batch x output times output x gates*hidden)
and strictly sequential. Handing each one to a BLAS thread pool costs more than the product
saves, and when other processes hold the cores the pool's threads wait on each other. On a
shared 2-core machine the reference at verify's default shapes for a 67M-parameter LSTM took
2.3x as long with numpy's default two threads as with this rule, and 1.7x as long with both
cores kept busy by other processes (benchmarks/run.py --only verify_large). The whole-sequence
input product is one large product and can gain from threads, but only from cores nobody
else is using; oversubscribed, it collapses too.

threadpoolctl is a dependency, but an optional one here: without it nothing is limited.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    ThreadpoolController = None

# BLAS thread counts are process-wide: a second thread running the reference at the same time
# must not save our temporary count as "the caller's" and restore it after we are done.
_lock = threading.Lock()


def bulk_threads(cores: int, load: float) -> int:
    """BLAS threads for a whole-sequence product: the cores nobody else is using, at least one.

    ``load`` is the 1-minute load average. One unit of it is taken to be this process (the
    reference runs long enough to be counted), so on an idle machine all ``cores`` are used
    and each further busy process takes one away.
    """
    others = max(0, round(load) - 1)
    return max(1, min(cores, cores - others))


STEP_THREADS = 1  # per-step recurrent products: see the module's docstring


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota if any."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else max(1, cores)


def _cgroup_quota() -> float | None:
    """CPUs allowed by the cgroup's CFS quota (v2 ``cpu.max`` or v1 ``cfs_quota_us``), None if unlimited."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
            quota_us = int(f.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
            period_us = int(f.read())
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return 0.0


def _blas() -> Any:
    """A controller for the BLAS libraries loaded so far (numpy's is, once numpy is imported), or None.

    Made anew for each run (about 1.5 ms): a library that brings its own BLAS (scipy,
    OpenCV, a framework) may be loaded after the first run, and a controller made before it
    would leave that BLAS on all its threads inside the per-step loop."""
    if ThreadpoolController is None:
        return None
    return ThreadpoolController().select(user_api="blas")


class ReferenceThreads:
    """Switches numpy's BLAS between the whole-sequence count and one thread per step."""

    def __init__(self, controller: Any, bulk: int) -> None:
        self._controller, self.bulk = controller, bulk

    def whole_sequence(self) -> None:
        self._set(self.bulk)

    def per_step(self) -> None:
        self._set(STEP_THREADS)

    def _set(self, n: int) -> None:
        if self._controller is not None:
            # The limiter's own record of the previous counts is dropped: the enclosing limit in
            # reference_threads restores the caller's.
            self._controller.limit(limits=n, user_api="blas")


@contextmanager
def reference_threads() -> Iterator[ReferenceThreads]:
    """BLAS thread counts for one reference run; the caller's come back on exit.

    Never raises a count above the caller's (``OPENBLAS_NUM_THREADS=1`` or an enclosing
    ``threadpool_limits(1)`` stay in force). Without threadpoolctl, with no BLAS it can see, or
    while another thread is inside this context, nothing is changed.
    """
    controller = _blas()
    if controller is None or not controller.lib_controllers or not _lock.acquire(blocking=False):
        yield ReferenceThreads(None, 0)
        return
    try:
        callers = [info["num_threads"] for info in controller.info() if info.get("num_threads")]
        bulk = max(1, min([bulk_threads(usable_cores(), load_average()), *callers]))
        with controller.limit(limits=bulk, user_api="blas"):
            yield ReferenceThreads(controller, bulk)
    finally:
        _lock.release()


# For machines that run several rnnx processes at once (CI jobs side by side, test workers):
# ONNX Runtime's own pool takes every core in each process, and its threads spin while they
# wait, so N processes on N cores slow each other several times over. RNNX_ORT_THREADS=1 gives
# each session one thread (and no spinning); unset or 0, ONNX Runtime chooses.
ORT_THREADS_ENV = "RNNX_ORT_THREADS"


MAX_ORT_THREADS = 1024  # more is a typo: ONNX Runtime would try to start them all


def ort_threads() -> int:
    """The ONNX Runtime intra-op threads asked for by RNNX_ORT_THREADS (0 or unset: ONNX
    Runtime's default). Raises ValueError, saying what was found, for anything but ASCII digits
    from 0 to :data:`MAX_ORT_THREADS` (``int()`` also reads other scripts' digits and signs)."""
    text = os.environ.get(ORT_THREADS_ENV, "").strip()
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()) or len(text) > 5 or int(text) > MAX_ORT_THREADS:
        raise ValueError(f"{ORT_THREADS_ENV}: expected a number of threads from 0 to {MAX_ORT_THREADS} in ASCII digits, found {text[:40]!r}; "
                         "unset it for ONNX Runtime's default, or give e.g. 1")
    return int(text)
