"""ONNX Runtime (or ONNX's reference evaluator) on a graph rnnx did not build, in a child process
with a time and memory limit.

A graph is a program: a Loop with a trip count of 1e15 runs until killed, a ConstantOfShape
can ask for terabytes, and a bug in a kernel can take the process down. So the session lives
in a child process whose address space is capped at :func:`rnnx.limits.memory_budget` and
whose runs, together, must finish within :func:`rnnx.limits.time_limit`; past either, the
child is killed and the user gets one line. Only numpy arrays and JSON cross the pipe, never
pickles, so even a child subverted by its graph cannot run code in rnnx.

``backend="reference:float64"`` (or ``float32``, ``float16``, ``tf32``) runs the file through
:class:`~rnnx.engines.onnx_reference.ReferenceRun` in the child instead: the float64 reference
and the honest runs of a bundle are numpy computations a hostile graph can blow up as well.
While the parent waits for the child it sits in ``select``, so SIGTERM acts at once.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

# Only light modules here: the child imports this module too, and each import is paid again
# at every session's start (rnnx.engines.onnxruntime pulls in the graph inspector).
from rnnx import limits
from rnnx.engines.onnx_reference import ReferenceRun  # light: numpy at import, onnx only when a reference runs
from rnnx.engines.ort_options import EXTERNAL_DATA_FOLDER, session_options, session_threads
from rnnx.errors import CAUSE_CHARS, BudgetExceeded, RNNXError, one_line

_LENGTH = struct.Struct("<Q")
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the rnnx package
_MAX_HEADER = 1 << 20


class TimeBudget:
    """Seconds ONNX Runtime may spend, counted only while rnnx waits for it (not while rnnx
    itself computes between runs); several sessions may share one."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0

    def deadline(self) -> float:
        return time.monotonic() + self.seconds - self.spent


class IsolatedOnnxRuntime:
    """The same interface as :class:`~rnnx.engines.onnxruntime.OnnxRuntimeRunner` (``input_names``,
    ``output_names``, ``runner(feed) -> outputs``), for an untrusted model given as bytes."""

    precision = "as the model's tensors"
    device = "cpu"

    def __init__(self, model_bytes: bytes, label: str = "the model", time_budget: TimeBudget | None = None,
                 data_folder: str | Path | None = None, data_bytes: int = 0, backend: str = "onnxruntime") -> None:
        """``time_budget`` lets several sessions share one limit (default: :func:`rnnx.limits.time_limit`).
        ``data_folder`` is where the model's external data lies, and ``data_bytes`` its size:
        the model and its data together set the budgets. ``backend``: ``onnxruntime`` or
        ``reference:DTYPE`` (a self-contained model: its data inline)."""
        self.label = label
        self.engine = "ONNX Runtime" if backend == "onnxruntime" else "ONNX's reference evaluator"
        session_threads()  # a bad RNNX_ORT_THREADS is refused here, in one line, not in the child
        self.budget = limits.memory_budget(len(model_bytes) + data_bytes)
        self.time = time_budget or TimeBudget(limits.time_limit(len(model_bytes) + data_bytes))
        self._child = subprocess.Popen(
            [sys.executable, "-c", "from rnnx.engines.isolated import serve; serve()", str(self.budget)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            # glibc reserves 64 MiB of address space per thread arena; with one per core the cap
            # on address space would bind long before the memory actually used did.
            # and the child imports this rnnx, installed or not.
            env={**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))},
        )
        try:
            try:
                _send(self._child.stdin, {"model": len(model_bytes), "config": _session_config(data_folder), "backend": backend},  # type: ignore[arg-type]
                      [np.frombuffer(model_bytes, np.uint8)])
            except BrokenPipeError:
                self._died()
            answer, _ = self._receive()
        except BaseException:
            self.close()
            raise
        if "error" in answer:
            self.close()
            raise (BudgetExceeded if answer.get("budget") else RNNXError)(f"{self.engine} refused {label}: {answer['error']}")
        self.input_names: list[str] = answer["inputs"]
        self.output_names: list[str] = answer["outputs"]

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {k: np.ascontiguousarray(v) for k, v in inputs.items() if k in self.input_names}
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise RNNXError(f"ONNX model: expected inputs {self.input_names}, missing {missing}")
        if self._child.poll() is not None:
            raise RNNXError(f"{self.engine}'s process for {self.label} is gone")
        try:
            _send(self._child.stdin, {"feed": list(feed)}, list(feed.values()))  # type: ignore[arg-type]
        except BrokenPipeError:
            self._died()
        answer, arrays = self._receive()
        if "error" in answer:
            raise (BudgetExceeded if answer.get("budget") else RNNXError)(f"{self.engine} could not run {self.label}: {answer['error']}")
        return dict(zip(self.output_names, arrays))

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.kill()
        self._child.wait()
        for pipe in (self._child.stdin, self._child.stdout):
            if pipe is not None:
                pipe.close()

    def __del__(self) -> None:
        if getattr(self, "_child", None) is not None:
            self.close()

    def _receive(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        start = time.monotonic()
        try:
            return _recv(self._child.stdout, self.time.deadline())  # type: ignore[arg-type]
        except TimeoutError:
            self.close()
            raise BudgetExceeded(f"{self.engine} ran {self.label} past the time limit of {self.time.seconds:.0f} s without finishing (a Loop that never ends?); "
                            "if the model is trusted and large, raise the limit with --time-limit SECONDS") from None
        except EOFError:
            self._died()
            raise  # unreachable; _died raises
        finally:
            self.time.spent += time.monotonic() - start

    def _died(self) -> None:
        code = self._child.wait()
        self.close()
        why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        raise BudgetExceeded(f"{self.engine}'s process stopped while running {self.label} ({why}); it may have passed the memory budget of "
                        f"{self.budget >> 20} MiB: if the model is trusted, raise it with --max-memory")


def _send(pipe: BinaryIO, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
    header = {**header, "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]}
    data = json.dumps(header).encode()
    pipe.write(_LENGTH.pack(len(data)) + data)
    for a in arrays:
        pipe.write(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)  # as bytes; an empty array too (memoryview.cast refuses it)
    pipe.flush()


def _session_config(data_folder: str | Path | None) -> dict[str, str]:
    """The child's session config entries: where the model's external data lies."""
    return {EXTERNAL_DATA_FOLDER: str(data_folder)} if data_folder is not None else {}


def _read_into(pipe: BinaryIO, buffer: memoryview, deadline: float | None) -> None:
    """Fill ``buffer`` from the pipe: read straight into the array that keeps the bytes, no joining copy."""
    done, fd = 0, pipe.fileno()
    while done < len(buffer):
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
        got = os.readv(fd, [buffer[done:done + (1 << 24)]])
        if not got:
            raise EOFError
        done += got


def _read_exactly(pipe: BinaryIO, n: int, deadline: float | None) -> bytes:
    data = bytearray(n)
    _read_into(pipe, memoryview(data), deadline)
    return bytes(data)


def _recv(pipe: BinaryIO, deadline: float | None = None) -> tuple[dict[str, Any], list[np.ndarray]]:
    (n,) = _LENGTH.unpack(_read_exactly(pipe, _LENGTH.size, deadline))
    if n > _MAX_HEADER:
        raise EOFError
    header = json.loads(_read_exactly(pipe, n, deadline))
    arrays = []
    for dtype_str, shape in header.pop("arrays"):
        dtype = np.dtype(dtype_str)
        if dtype.hasobject:
            raise EOFError
        try:
            array = np.empty(shape, dtype)
        except (TypeError, ValueError, MemoryError):  # a shape no array has: the other side is not speaking the protocol
            raise EOFError from None
        _read_into(pipe, array.reshape(-1).view(np.uint8).data, deadline)
        arrays.append(array)
    return header, arrays


def serve() -> None:
    """The child: cap the address space, open the session, run feeds until the parent closes the pipe."""
    import resource

    die_with_parent()
    budget = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames may reach the parent
    try:
        header, (model,) = _recv(stdin)
        backend = str(header.get("backend", "onnxruntime"))
        if backend.startswith("reference:"):
            run, inputs, names = _reference(model.tobytes(), backend.partition(":")[2])
            del model
            _send(stdout, {"inputs": inputs, "outputs": names}, [])
            _serve_runs(stdin, stdout, run)
            return
        import onnxruntime as ort

        # Threads from RNNX_ORT_THREADS, inherited from the parent's environment; extended_only as
        # for a float16 graph (ort_options.FLOAT16_NOTE), since the files run here come from anywhere.
        options = session_options(extended_only=True, config=header.get("config", {}))
        session = ort.InferenceSession(model.tobytes(), options, providers=["CPUExecutionProvider"])
        del model
        names = [o.name for o in session.get_outputs()]
        _send(stdout, {"inputs": [i.name for i in session.get_inputs()], "outputs": names}, [])
    except (EOFError, BrokenPipeError):
        return
    except Exception as exc:  # noqa: BLE001  onnxruntime's own Fail/InvalidGraph classes, MemoryError
        _send(stdout, {"error": _error_line(exc), "budget": _over_budget(exc)}, [])
        return
    _serve_runs(stdin, stdout, lambda feed: session.run(names, feed))


def _reference(model: bytes, dtype: str) -> tuple[Any, list[str], list[str]]:
    """ONNX's reference evaluator on ``model`` in ``dtype``: (run, input names, output names)."""
    import onnx

    proto = onnx.load_from_string(model)
    runner = ReferenceRun(proto, dtype)
    return (lambda feed: [runner(feed)[n] for n in runner.output_names]), list(runner.input_names), list(runner.output_names)


def _serve_runs(stdin: BinaryIO, stdout: BinaryIO, run: Any) -> None:
    """Run each feed the parent sends until it closes the pipe; an error is sent back as one line."""
    while True:
        try:
            request, arrays = _recv(stdin)
        except EOFError:
            return
        try:
            outputs = run(dict(zip(request["feed"], arrays)))
            if any(np.asarray(o).dtype.hasobject for o in outputs):
                raise TypeError("the model returns strings or sequences, not tensors")
            _send(stdout, {}, [np.asarray(o) for o in outputs])
        except BrokenPipeError:
            return
        except Exception as exc:  # noqa: BLE001
            _send(stdout, {"error": _error_line(exc), "budget": _over_budget(exc)}, [])


def _over_budget(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "Failed to allocate memory" in str(exc) or "bad_alloc" in str(exc)


def die_with_parent(code: int = 0) -> None:
    """A killed rnnx (SIGKILL, or SIGTERM mid-run) must not leave a child spinning in a Loop
    (or a probe of the user's model: :mod:`rnnx.exporters.bounded`); ``code``: the exit status
    where the parent is gone already."""
    parent = os.getppid()
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG, Linux only
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent left before the request took effect
        os._exit(code)


def _error_line(exc: BaseException) -> str:
    if _over_budget(exc):
        return (f"it needs more memory than the budget of {int(sys.argv[1]) >> 20} MiB (or this machine) allows; "
                "if the model is trusted, raise the budget with --max-memory")
    if "failed to map segment" in str(exc):
        return f"the memory budget of {int(sys.argv[1]) >> 20} MiB is too small to start ONNX Runtime; raise it with --max-memory"
    return one_line(exc, CAUSE_CHARS)
