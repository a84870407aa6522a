"""ONNX Runtime's quantized recurrences (``com.microsoft.DynamicQuantizeLSTM``) read as the
float nodes they stand for, their quantization described, and dynamic quantization done by
the producer's own tool.

Reading: each quantized node becomes a stand-in ONNX ``LSTM`` node (same name, inputs and
outputs) whose W and R are the dequantized weights ``(q - zero_point) * scale`` in ONNX's
layout (:mod:`rnnx.layouts.onnx_quantized`), so every reader of recurrent nodes (``--select``,
``rnnx.load``, verify's wiring) handles it as a float LSTM; :func:`is_dequantized` tells
the stand-in apart.

Error bound (:func:`error_bound`): see its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.layouts.onnx import STATE_INPUTS, WEIGHT_INPUTS
from rnnx.layouts.onnx_quantized import (DOMAIN, DYNAMIC_INPUTS, FLOAT_INPUTS, QUANTIZED_OPS, QUANTIZED_WEIGHTS, dequantize, granularity,
                                         row_scales)

_MARK = "rnnx: dequantized from "  # the stand-in node's doc_string


def is_quantized(node: Any) -> bool:
    return node.op_type in QUANTIZED_OPS and node.domain == DOMAIN


def is_dequantized(node: Any) -> bool:
    """Whether ``node`` is the stand-in :func:`stand_in` made for a quantized node."""
    return node.doc_string.startswith(_MARK)


@dataclass
class QuantizedWeight:
    """One 8-bit weight of a quantized node: its type, granularity, scales and zero points."""

    name: str  # W or R
    tensor: str  # the initializer's name
    type: str  # int8 or uint8
    granularity: str  # per-tensor or per-channel
    scale: list[Any]  # [dirs] or [dirs][4*hidden]
    zero_point: list[Any]

    def summary(self) -> str:
        scales = np.asarray(self.scale, np.float64)
        zps = np.unique(np.asarray(self.zero_point))
        zp = f"zero point {zps[0]}" if zps.size == 1 else f"zero points {zps.min()} to {zps.max()}"
        count = "x".join(str(n) for n in scales.shape)
        return f"{self.name} {self.type} {self.granularity} ({count} scales, {scales.min():.3g} to {scales.max():.3g}; {zp})"


@dataclass
class Quantization:
    """What a quantized recurrent node stores quantized, and what stays float."""

    op: str  # com.microsoft.DynamicQuantizeLSTM
    weights: list[QuantizedWeight] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=lambda: list(DYNAMIC_INPUTS))  # quantized to uint8 by the kernel at run time
    float_inputs: list[str] = field(default_factory=list)  # given, and kept in float

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "weights": [w.__dict__ for w in self.weights], "dynamic": self.dynamic, "float": self.float_inputs}


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: (v.decode(errors="replace") if isinstance(v, bytes) else v) for k, v in attrs.items()}
    if "activations" in attrs:
        attrs["activations"] = [a.decode(errors="replace") if isinstance(a, bytes) else a for a in attrs["activations"]]
    return attrs


def _input(node: Any, position: int) -> str:
    return node.input[position] if len(node.input) > position else ""


def _stored(node: Any, position: int, known: dict[str, tuple[np.ndarray, str]], where: str, what: str) -> np.ndarray:
    name = _input(node, position)
    if name not in known:
        raise RNNXError(f"{where}: {what} ({name or 'not given'}) is not an initializer or Constant; rnnx can only read quantized weights stored in the model")
    return np.asarray(known[name][0])


def stand_in(node: Any, graph: str, known: dict[str, tuple[np.ndarray, str]], graph_inputs: set[str]) \
        -> tuple[Any, str, dict[str, Any], dict[str, np.ndarray | None], dict[str, str]]:
    """The float node a quantized ``node`` of ``graph`` stands for, as the fields of
    :class:`rnnx.formats.onnx_read.RecurrentNode` (node, graph, attributes, tensors, sources):
    its W and R dequantized, B and P as stored."""
    from onnx import helper

    where = f"{node.op_type} node {node.name!r}"
    tensors: dict[str, np.ndarray | None] = {}
    sources: dict[str, str] = {}
    for key, (position, scale_at, zero_at) in QUANTIZED_WEIGHTS.items():
        q = _stored(node, position, known, where, key)
        scale = _stored(node, scale_at, known, where, f"{key}_scale")
        zero_point = _stored(node, zero_at, known, where, f"{key}_zero_point")
        tensors[key] = dequantize(key, q, scale, zero_point, where)
        sources[key] = f"{q.dtype} {known[_input(node, position)][1]}, dequantized ({granularity(scale)})"
    for key in ("B", "P"):
        name = _input(node, WEIGHT_INPUTS[key])
        if not name:
            continue
        if name in known:
            tensors[key], sources[key] = known[name]
        else:
            tensors[key], sources[key] = None, "graph input" if name in graph_inputs else "a computed tensor"
    float_op = QUANTIZED_OPS[node.op_type]
    inputs = list(node.input[: len(STATE_INPUTS) + len(WEIGHT_INPUTS)])  # the float op's inputs, by the same positions
    proxy = helper.make_node(float_op, inputs, list(node.output), name=node.name, doc_string=_MARK + f"{node.domain}.{node.op_type}")
    return proxy, graph, _attributes(node), tensors, sources


def quantization(node: Any, known: dict[str, tuple[np.ndarray, str]]) -> Quantization:
    """The quantization parameters of a quantized ``node`` (types, scales, zero points)."""
    where = f"{node.op_type} node {node.name!r}"
    found = Quantization(f"{node.domain}.{node.op_type}")
    for key, (position, scale_at, zero_at) in QUANTIZED_WEIGHTS.items():
        q = _stored(node, position, known, where, key)
        scale = _stored(node, scale_at, known, where, f"{key}_scale")
        zero_point = _stored(node, zero_at, known, where, f"{key}_zero_point")
        found.weights.append(QuantizedWeight(key, _input(node, position), q.dtype.name, granularity(scale), scale.tolist(), zero_point.tolist()))
    names = dict(zip(("B", "sequence_lens", "initial_h", "initial_c", "P"), range(3, 8)))
    found.float_inputs = [k for k in FLOAT_INPUTS if _input(node, names[k])]
    found.dynamic = [k for k in DYNAMIC_INPUTS if k == "X" or _input(node, names[k])] + ["h (each step)"]
    return found
