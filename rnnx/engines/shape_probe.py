"""Asking a file whether it runs at given input shapes, for :mod:`rnnx.shapes.profiles`.

Two runtimes are asked, and both must run: ONNX Runtime, and ONNX's reference evaluator, which
follows the operators' definitions where ONNX Runtime is lenient (its MaxPool returns a frame
from fewer frames than the kernel; the definition, and torch, give none). A run whose output
is empty (a pool or a stride left no frame) does not count as running. A runtime that cannot
load the file at all is left out of the asking, with the other's word taken alone.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.engines.onnx_reference import ReferenceRun
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.errors import RNNXError
from rnnx.shapes.file_dims import InputSpec, probe_feed
from rnnx.shapes.profiles import Probe

_ORT_PREFIX = re.compile(r"^ONNX Runtime could not run the model: (\[ONNXRuntimeError\] : \d+ : \w+ : )?")


def shape_probe(model: Any, specs: list[InputSpec], data_folder: str | Path | None = None, session: OnnxRuntimeRunner | None = None) -> Probe:
    """``runs(shapes)``: None where ``model`` runs at those input shapes in both runtimes, else
    the first words of why not. The runtimes are loaded at the first question; ``session``: an
    ONNX Runtime session of ``model`` the caller holds already (loading the model once)."""
    runners: list[Callable[[dict[str, Any]], Any]] = []

    def load() -> None:
        for make in (lambda: session or OnnxRuntimeRunner(model, threads=1, data_folder=data_folder),
                     lambda: ReferenceRun(model, _own_dtype(model))):
            try:
                runners.append(make())
            except RNNXError:
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
            except RNNXError as exc:
                return _ORT_PREFIX.sub("", " ".join(str(exc).split()))[:160]
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
