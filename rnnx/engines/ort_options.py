"""ONNX Runtime's session options, built in one place for every session rnnx opens: the
runner's (:mod:`rnnx.engines.onnxruntime`), the isolated child's (:mod:`rnnx.engines.isolated`),
the int8 probe's and the streaming session's dimension probe.

A module of its own, and light (ONNX Runtime is imported when options are built): the isolated
child imports it at every session's start, and :mod:`rnnx.engines.onnxruntime` pulls in the
graph inspector.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rnnx.blas_threads import MAX_ORT_THREADS, ort_threads
from rnnx.errors import RNNXError

#: ONNX Runtime's session option: the folder a model loaded from bytes reads its external data from.
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"

# Between runs rnnx computes on the same cores (the reference, torch): ONNX Runtime's workers,
# spinning while they wait for a next run, would take those cores from it.
_NO_SPINNING = {"session.intra_op.allow_spinning": "0"}

#: What a runner's report says where a graph computes in float16 (:func:`session_options`'s
#: ``extended_only``). ONNX Runtime 1.32's CPU provider crashes the process (SIGSEGV) building a
#: graph with a Transpose before a MatMul of a float16 constant at ORT_ENABLE_ALL (a Linear after
#: an LSTM in a --precision fp16 file; tests/engines/test_ort_options.py builds one); at
#: ORT_ENABLE_EXTENDED, every rewrite but the layout transformers, it runs, and the rewrites it
#: leaves out change no operator's meaning.
FLOAT16_NOTE = ("a float16 graph: run at ORT_ENABLE_EXTENDED (ONNX Runtime 1.32's CPU provider crashes building some float16 "
                "graphs, a Transpose before a MatMul of float16 weights among them, at ORT_ENABLE_ALL); set that level where you "
                "run it on the CPU")


def session_threads(threads: int = 0) -> int:
    """The intra-op threads for a session: ``threads`` where given, else RNNX_ORT_THREADS; each
    checked, and refused in one line (0: ONNX Runtime's default)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= MAX_ORT_THREADS:
        raise RNNXError(f"threads: expected a whole number from 0 (ONNX Runtime's default) to {MAX_ORT_THREADS}, found {threads!r}")
    try:
        return threads or ort_threads()
    except ValueError as exc:
        raise RNNXError(str(exc)) from None


def session_options(threads: int = 0, extended_only: bool = False, config: Mapping[str, str] | None = None) -> Any:
    """An ``onnxruntime.SessionOptions`` as rnnx opens every session: ONNX Runtime's log at fatal
    only (its errors reach the user as one-line exceptions instead), :func:`session_threads`'s
    intra-op threads, not spinning between runs, ``config``'s entries added
    (:data:`EXTERNAL_DATA_FOLDER`, say); ``extended_only`` stops the graph's rewrites at
    ORT_ENABLE_EXTENDED, for a graph that computes in float16 or one from anywhere
    (:data:`FLOAT16_NOTE` says why)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    count = session_threads(threads)
    if count:
        options.intra_op_num_threads = count
    for key, value in {**_NO_SPINNING, **(config or {})}.items():
        options.add_session_config_entry(key, value)
    if extended_only:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return options
