"""An ONNX file run by ONNX's own reference evaluator in another float precision.

ONNX Runtime's CPU provider has no float64 kernels for LSTM, GRU, RNN or Conv, so the float64
reference of a whole file (a Conv front end, a recurrence, a head) is run by
``onnx.reference.ReferenceEvaluator``, the format's own numpy implementation of every
operator, on a copy of the graph whose floating tensors are all float64: initializers,
constants, Cast targets, inputs and outputs, in subgraphs too. Its recurrences are ONNX's
reference definitions (gate orders i,o,f,c and z,r,h), which rnnx's tests pin against torch.

The same copy in float16 is an honest float16 computation of the file (numpy rounds every
operator's result to float16): the rounding floor of an engine built in fp16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnx.errors import RNNXError

_FLOATS = (1, 10, 11, 16)  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_TYPES = {"float64": (11, np.float64), "float16": (10, np.float16), "float32": (1, np.float32)}


def retyped(proto: Any, dtype: str) -> Any:
    """A copy of ``proto`` whose floating tensors are all ``dtype`` (``float64``, ``float16``)."""
    import onnx

    elem, np_type = _TYPES[dtype]
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    _retype_graph(copy.graph, elem, np_type)
    return copy


def _retype_graph(graph: Any, elem: int, np_type: Any) -> None:
    from onnx import AttributeProto, numpy_helper

    for tensor in graph.initializer:
        if tensor.data_type in _FLOATS:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np_type), tensor.name))
    del graph.value_info[:]  # shape inference would hold the old types
    for value in (*graph.input, *graph.output):
        if value.type.tensor_type.elem_type in _FLOATS:
            value.type.tensor_type.elem_type = elem
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i in _FLOATS:
                attribute.i = elem
            elif attribute.type == AttributeProto.TENSOR and attribute.t.data_type in _FLOATS:
                attribute.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attribute.t).astype(np_type), attribute.t.name))
            elif attribute.type == AttributeProto.GRAPH:
                _retype_graph(attribute.g, elem, np_type)
            elif attribute.type == AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    _retype_graph(sub, elem, np_type)


class ReferenceRun:
    """Runs a file in ``dtype`` through ONNX's reference evaluator: ``run(feed) -> {output: array}``,
    floating inputs cast to ``dtype`` (integers as given)."""

    def __init__(self, proto: Any, dtype: str = "float64") -> None:
        from onnx.reference import ReferenceEvaluator

        self.dtype = np.dtype(_TYPES[dtype][1])
        self.output_names = [o.name for o in proto.graph.output]
        try:
            self.evaluator = ReferenceEvaluator(retyped(proto, dtype))
        except Exception as exc:  # noqa: BLE001  onnx raises what its operators raise
            raise RNNXError(f"ONNX's reference evaluator cannot run this file in {dtype}: {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:200]}") from None

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cast = {k: v.astype(self.dtype) if v.dtype.kind == "f" else v for k, v in feed.items()}
        try:
            outs = self.evaluator.run(None, cast)
        except Exception as exc:  # noqa: BLE001
            raise RNNXError(f"ONNX's reference evaluator failed in {self.dtype}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
        return {name: np.asarray(value) for name, value in zip(self.output_names, outs)}
