"""Asking a file whether it runs at given input shapes, for :mod:`rnnx.shapes.profiles`.

Two runtimes are asked, and both must run: ONNX Runtime, and ONNX's reference evaluator, which
follows the operators' definitions where ONNX Runtime is lenient (its MaxPool returns a frame
from fewer frames than the kernel; the definition, and torch, give none). A run whose output
is empty (a pool or a stride left no frame) does not count as running. A runtime that cannot
load the file at all is left out of the asking, with the other's word taken alone.

Both run in child processes held to ``--max-memory`` and ``--time-limit``
(:mod:`rnnx.engines.isolated`): the file is untrusted, and a length can make its graph claim
gigabytes or loop for ever. A probe that passes a budget stops the asking (one line naming the
flag), rather than counting as a shape the file does not run at.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits
from rnnx.engines.isolated import IsolatedOnnxRuntime, TimeBudget
from rnnx.errors import DETAIL_CHARS, BudgetExceeded, RNNXError, one_line
from rnnx.formats.onnx_lazy import for_runtime
from rnnx.shapes.file_dims import InputSpec, probe_feed
from rnnx.shapes.profiles import Probe, shapes_text

_ORT_PREFIX = re.compile(r"^(ONNX Runtime|ONNX's reference evaluator) could not run the model: (\[ONNXRuntimeError\] : \d+ : \w+ : )?")


def shape_probe(model: Any, specs: list[InputSpec], data_folder: str | Path | None = None, session: Any = None) -> Probe:
    """``runs(shapes)``: None where ``model`` runs at those input shapes in both runtimes, else
    the first words of why not. The runtimes are loaded at the first question; ``session``: an
    ONNX Runtime runner of ``model`` the caller holds already (loading the model once)."""
    runners: list[Callable[[dict[str, Any]], Any]] = []

    def load() -> None:
        folder = Path(data_folder or ".")
        data = sum(t.ByteSize() for t in model.graph.initializer)
        budget = TimeBudget(limits.time_limit(model.ByteSize()))  # the asking, all runs together
        for make in (lambda: session or IsolatedOnnxRuntime(for_runtime(model, folder).SerializeToString(), "the model", budget,
                                                            data_folder=data_folder, data_bytes=data),
                     lambda: IsolatedOnnxRuntime(model.SerializeToString(), "the model", budget, backend=f"reference:{_own_dtype(model)}")):
            try:
                runners.append(make())
            except BudgetExceeded:
                raise
            except (RNNXError, ValueError):  # ValueError: a model over protobuf's 2 GB cannot be handed over whole
                continue  # a runtime that cannot load the file says nothing about shapes

    def runs(shapes: dict[str, tuple[int, ...]]) -> str | None:
        if not runners:
            load()
        if not runners:
            return "neither ONNX Runtime nor ONNX's reference evaluator can load the file"
        feed = probe_feed(specs, shapes)
        for run in runners:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):  # a run at a length the model refuses warns on its way to failing
                    warnings.simplefilter("ignore")
                    outputs = run(feed)
            except BudgetExceeded as exc:
                raise BudgetExceeded(f"asking the file whether it runs at {shapes_text(shapes)}: {exc}") from None
            except RNNXError as exc:
                return one_line(_ORT_PREFIX.sub("", one_line(exc, None)), DETAIL_CHARS)
            empty = next((name for name, value in outputs.items() if getattr(value, "size", 1) == 0), None)
            if empty is not None:  # a pool or a stride left no frame: nothing to compute with
                return f"output {empty!r} is empty (shape {list(outputs[empty].shape)})"
        return None

    return runs


def _own_dtype(model: Any) -> str:
    """The float type the file computes in (its first float input's), so that the reference runs
    the file as written."""
    from onnx import TensorProto

    for vi in model.graph.input:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            return "float16"
        if vi.type.tensor_type.elem_type == TensorProto.DOUBLE:
            return "float64"
    return "float32"
