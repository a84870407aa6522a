"""The float64 reference's BLAS threads: one per recurrent step, the free cores for the
whole-sequence input product, the caller's settings back afterwards, the same numbers either way."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights, blas_threads, parity, reference

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]


@pytest.fixture
def blas() -> None:
    if not _blas_threads():
        pytest.skip("threadpoolctl sees no BLAS library behind numpy")


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The BLAS thread counts in force at each whole-sequence product and each step."""
    seen: dict[str, list[int]] = {"x_parts": [], "step": []}
    x_parts, step = reference._Cell.x_parts, reference._Cell.step

    def spy_x_parts(self, x):  # type: ignore[no-untyped-def]
        seen["x_parts"] += _blas_threads()
        return x_parts(self, x)

    def spy_step(self, xp, h, c):  # type: ignore[no-untyped-def]
        seen["step"] += _blas_threads()
        return step(self, xp, h, c)

    monkeypatch.setattr(reference._Cell, "x_parts", spy_x_parts)
    monkeypatch.setattr(reference._Cell, "step", spy_step)
    return seen


def _run(spec: str, T: int = 6, B: int = 3, ragged: bool = True) -> reference.ReferenceOutput:
    weights = RNNWeights.random(RNNSpec.parse(spec), seed=7)
    inputs = parity.random_inputs(weights, T, B, seed=11, ragged=ragged)
    return reference.forward(weights, inputs["X"], inputs["h0"], inputs.get("c0"), inputs.get("seq_lens"))


def _same(a: reference.ReferenceOutput, b: reference.ReferenceOutput) -> bool:
    return (np.array_equal(a.y, b.y) and np.array_equal(a.h_n, b.h_n)
            and (a.c_n is None) == (b.c_n is None) and (a.c_n is None or np.array_equal(a.c_n, b.c_n)))


@pytest.mark.parametrize(("cores", "load", "want"), [
    (2, 0.0, 2), (2, 1.0, 2), (2, 1.4, 2),  # idle, or only this process busy: every core
    (2, 2.0, 1), (2, 3.6, 1), (2, 40.0, 1),  # others hold the cores: one thread, never zero
    (16, 4.0, 13), (16, 0.3, 16), (1, 0.0, 1), (1, 9.0, 1),
])
def test_bulk_threads_are_the_free_cores_and_at_least_one(cores: int, load: float, want: int) -> None:
    assert blas_threads.bulk_threads(cores, load) == want


def test_usable_cores_is_positive_and_within_the_affinity() -> None:
    n = blas_threads.usable_cores()
    assert 1 <= n <= (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def test_steps_run_on_one_thread_and_the_input_product_on_the_rule(
    blas: None, observed: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blas_threads, "bulk_threads", lambda cores, load: 2)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        _run("lstm,input=8,hidden=12,layers=2,bidirectional")
        assert _blas_threads() and set(_blas_threads()) == {3}  # the caller's count is back
    assert observed["step"] and set(observed["step"]) == {1}
    assert observed["x_parts"] and set(observed["x_parts"]) == {2}


def test_the_input_product_never_gets_more_threads_than_the_caller_allows(
    blas: None, observed: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blas_threads, "bulk_threads", lambda cores, load: 8)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        _run("gru,input=5,hidden=7,layers=2")
        assert set(_blas_threads()) == {1}
    assert set(observed["x_parts"]) == {1} and set(observed["step"]) == {1}


def test_the_callers_count_comes_back_after_an_error(blas: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self, xp, h, c):  # type: ignore[no-untyped-def]
        raise RuntimeError("inside the loop")

    monkeypatch.setattr(reference._Cell, "step", boom)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        with pytest.raises(RuntimeError, match="inside the loop"):
            _run("lstm,input=4,hidden=6")
        assert set(_blas_threads()) == {3}


def test_another_thread_inside_the_reference_leaves_the_counts_alone(blas: None, observed: dict[str, list[int]]) -> None:
    # While one thread holds the process-wide counts, a second must not save and later
    # restore the first one's temporary count as if it were the caller's.
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        assert blas_threads._lock.acquire(blocking=False)
        try:
            _run("rnn_tanh,input=4,hidden=6")
        finally:
            blas_threads._lock.release()
        assert set(_blas_threads()) == {3}
    assert set(observed["step"]) == {3}


SPECS = ["lstm,input=96,hidden=160,layers=2,bidirectional", "gru,input=64,hidden=128,layers=2,reset_before",
         "lstm,input=48,hidden=96,proj=40,peepholes", "rnn_relu,input=80,hidden=200,bidirectional"]


@pytest.mark.parametrize("spec", SPECS)
def test_outputs_are_bit_identical_with_and_without_the_limit(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Sizes past OpenBLAS's threading threshold, so that unlimited runs do use several threads.
    limited = _run(spec, T=24, B=8)
    monkeypatch.setattr(blas_threads, "_blas", lambda: None)
    assert _same(limited, _run(spec, T=24, B=8))


def test_the_reference_runs_without_threadpoolctl(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = "lstm,input=16,hidden=24,layers=2,bidirectional"
    want = _run(spec)
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import threadpoolctl now raises ImportError
    try:
        importlib.reload(blas_threads)
        assert blas_threads.ThreadpoolController is None
        with blas_threads.reference_threads() as threads:
            threads.whole_sequence()
            threads.per_step()
        assert _same(_run(spec), want)
    finally:
        monkeypatch.undo()
        importlib.reload(blas_threads)
    assert blas_threads.ThreadpoolController is not None


def test_a_blas_loaded_after_the_first_run_is_held_to_one_thread_per_step() -> None:
    """scipy (or OpenCV, or a framework) may bring its own BLAS after rnnx ran once; the per-step
    loop must hold that one to one thread too. Run in a fresh process, so that the order in
    which the libraries load is this test's."""
    pytest.importorskip("scipy")
    script = textwrap.dedent("""
        import numpy as np
        from threadpoolctl import threadpool_info
        from rnnx import RNNSpec, RNNWeights, parity, reference
        weights = RNNWeights.random(RNNSpec.parse("gru,input=4,hidden=6"), seed=1)
        inputs = parity.random_inputs(weights, 4, 2, seed=2)
        reference.forward(weights, inputs["X"], inputs["h0"])
        before = len([i for i in threadpool_info() if i["user_api"] == "blas"])
        import scipy.linalg  # noqa: F401  its own OpenBLAS
        seen = []
        step = reference._Cell.step
        def spy(self, xp, h, c):
            seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
            return step(self, xp, h, c)
        reference._Cell.step = spy
        reference.forward(weights, inputs["X"], inputs["h0"])
        after = len([i for i in threadpool_info() if i["user_api"] == "blas"])
        print(before, after, sorted(set(seen)))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "2"}).stdout.split()
    before, after, seen = int(out[0]), int(out[1]), " ".join(out[2:])
    if after == before:
        pytest.skip("scipy shares numpy's BLAS here")
    assert seen == "[1]", seen
