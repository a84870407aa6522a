"""The ``rnnx lower`` pass: native LSTM/GRU/RNN nodes to hoisted-input Scans, the form
TensorRT's parser builds anyway. The Scans themselves are built by
:mod:`rnnx.formats.onnx_scan`, which writing a projected LSTM uses too."""

from __future__ import annotations

from typing import Any

from rnnx.errors import RNNXError
from rnnx.formats.onnx_quantized import is_quantized
from rnnx.formats.onnx_scan import DOMAIN, LSTM_PROJECTED, LowerResult, lower_graph
from rnnx.layouts.onnx import DEFAULT_DOMAINS, NATIVE_OPS
from rnnx.pass_result import Declined


def lower_recurrences(model: Any, select: str | None = None, only: frozenset[str] | None = None) -> LowerResult:
    """The TensorRT-oriented form: every native LSTM/GRU/RNN node (or the one named
    ``select``, or those named in ``only``) of the main graph becomes hoisted-input Scans, in place."""
    def want(n: Any) -> bool:
        if n.domain == DOMAIN and n.op_type == LSTM_PROJECTED:
            return True
        return (n.domain in DEFAULT_DOMAINS and n.op_type in NATIVE_OPS and (select is None or n.name == select)
                and (only is None or n.name in only))

    result = lower_graph(model, want)
    # a quantized LSTM has no float Scan form: say it was skipped rather than write a silent copy
    result.left_alone += [Declined("quantized", f"{n.domain}.{n.op_type} holds 8-bit weights that ONNX Runtime's kernel multiplies "
                                   "as integers; it has no float Scan form: lower the float model it was quantized from", n.name)
                          for n in model.graph.node if is_quantized(n) and (select is None or n.name == select)]
    if select is not None and select not in result.rewritten and not result.left_alone:
        raise RNNXError(f"no LSTM, GRU or RNN node named {select!r} in the main graph")
    return result
