"""Every runner a check uses, from one registry: a backend's name -> how to make it from what it
runs (:class:`Subject`). A new backend is one entry here.

Each is opened as a context (:func:`running`), so its session or child process is closed when
the check is done. A file rnnx did not just write is untrusted: ONNX Runtime and ONNX's
reference evaluator run it in a child process under rnnx's time and memory limits
(:mod:`rnnx.engines.isolated`), reading its weights from its own files; a file rnnx wrote this
moment (convert's check) runs in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rnnx.engines.cudnn import CudnnRunner
from rnnx.engines.flax import FlaxRunner
from rnnx.engines.isolated import IsolatedOnnxRuntime, TimeBudget
from rnnx.engines.jax import JaxRunner
from rnnx.engines.keras import KerasRunner
from rnnx.engines.onnx_reference import ReferenceRun
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.reference import ReferenceRunner
from rnnx.engines.runner import Runner
from rnnx.engines.tensorrt import TensorRTRunner
from rnnx.engines.torch import TorchRunner
from rnnx.errors import RNNXError
from rnnx.formats.onnx_lazy import for_runtime
from rnnx.formats.onnx_read import file_bytes, load_model
from rnnx.weights import RNNWeights


@dataclass(frozen=True)
class Subject:
    """What a runner runs: a stack's ``weights``, a ``model`` file, or both. ``trusted``: rnnx
    wrote the file just now, so it may run in this process. ``dtype``: what torch computes in
    (default: the weights'), or what ONNX's reference evaluator computes in (default float64).
    ``proto``: the file already read (lazily), so that it is not read twice, or a copy of it
    edited (outputs marked); without ``model``, a proto held in memory alone (a rewrite's input
    and output, a bundle's model), its external data, if any, in ``folder``."""

    weights: RNNWeights | None = None
    model: Path | None = None
    trusted: bool = False
    dtype: str | None = None
    proto: Any = None
    label: str = ""
    time_budget: TimeBudget | None = None
    folder: Path | None = None


def _weights(subject: Subject, backend: str) -> RNNWeights:
    if subject.weights is None:
        raise RNNXError(f"{backend} runs a stack's weights: expected weights, found none")
    return subject.weights


def _model(subject: Subject, backend: str) -> Path:
    if subject.model is None:
        raise RNNXError(f"{backend} runs a file: expected a model file, found none")
    return Path(subject.model)


def isolated_session(subject: Subject, backend: str = "onnxruntime") -> IsolatedOnnxRuntime:
    """The file in a child process (ONNX Runtime, or ``reference:DTYPE``), its weights read from
    its own files, its budget set by its size and its external data's; a proto held in memory
    alone, its budget set by its own size."""
    if subject.model is None and subject.proto is not None:
        folder = subject.folder
        held = for_runtime(subject.proto, folder) if folder is not None else subject.proto
        return IsolatedOnnxRuntime(held.SerializeToString(), subject.label or "the model", subject.time_budget, data_folder=folder, backend=backend)
    path = _model(subject, "ONNX Runtime")
    proto = subject.proto if subject.proto is not None else load_model(path, lazy=True)
    folder = path.resolve().parent
    return IsolatedOnnxRuntime(for_runtime(proto, folder).SerializeToString(), subject.label or str(path), subject.time_budget,
                               data_folder=folder, data_bytes=file_bytes(path), backend=backend)


def _ort(subject: Subject) -> Runner:
    if subject.trusted and subject.proto is not None:  # an edited copy of the file: its weights still read from the file's folder
        folder = subject.folder or _model(subject, "ONNX Runtime").resolve().parent
        return OnnxRuntimeRunner(for_runtime(subject.proto, folder), data_folder=folder)
    if subject.trusted:
        return OnnxRuntimeRunner(_model(subject, "ONNX Runtime"))
    return isolated_session(subject)


def _onnx_reference(subject: Subject) -> Runner:
    dtype = subject.dtype or "float64"
    if subject.trusted:
        return ReferenceRun(load_model(_model(subject, "ONNX's reference evaluator")), dtype)
    return isolated_session(subject, f"reference:{dtype}")


def _trt(subject: Subject) -> Runner:
    path = _model(subject, "TensorRT")
    if path.suffix.lower() != ".engine":
        raise RNNXError("TensorRT runs an engine: pass MODEL.engine (rnnx build makes one)")
    return TensorRTRunner(path)


def _spec(subject: Subject, backend: str) -> Any:
    return _weights(subject, backend).spec


#: backend name -> how to make its runner. ``ort`` and ``onnx-reference`` run files; ``reference``,
#: ``torch`` and ``cudnn`` a stack's weights; ``jax``, ``flax`` and ``keras`` a file of theirs, as a stack.
RUNNERS: dict[str, Callable[[Subject], Runner]] = {
    "ort": _ort,
    "onnx-reference": _onnx_reference,
    "trt": _trt,
    "reference": lambda s: ReferenceRunner(_weights(s, "the reference")),
    "torch": lambda s: TorchRunner(_weights(s, "torch"), dtype=s.dtype),
    "cudnn": lambda s: CudnnRunner(_weights(s, "cuDNN")),
    "jax": lambda s: JaxRunner(_model(s, "jax"), _spec(s, "jax")),
    "flax": lambda s: FlaxRunner(_model(s, "flax"), _spec(s, "flax")),
    "keras": lambda s: KerasRunner(_model(s, "keras"), _spec(s, "keras")),
}

#: The backend that runs a file of each format rnnx writes, in the framework that owns the format.
FORMAT_BACKENDS = {"onnx": "ort", "jax": "jax", "flax": "flax", "keras": "keras", "torch": "torch"}
#: The backends that run a stack's weights, not a file: a file of theirs runs as the weights rnnx reads from it.
RUNS_WEIGHTS = frozenset({"reference", "torch", "cudnn"})


def make(backend: str, subject: Subject) -> Runner:
    """A runner of ``backend`` for ``subject`` (close it, or use :func:`running`)."""
    if backend not in RUNNERS:
        raise RNNXError(f"unknown backend {backend!r}; expected one of {', '.join(RUNNERS)}")
    return RUNNERS[backend](subject)


def close(runner: Any) -> None:
    """Ends a runner's session or child process, where it has one."""
    end = getattr(runner, "close", None)
    if end is not None:
        end()


@contextmanager
def running(backend: str, subject: Subject) -> Iterator[Runner]:
    """A runner of ``backend`` for ``subject``, closed when the block ends, however it ends."""
    runner = make(backend, subject)
    try:
        yield runner
    finally:
        close(runner)
