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
from rnnx.layouts.onnx import WEIGHT_INPUTS, to_native
from rnnx.layouts.onnx_quantized import (DOMAIN, DYNAMIC_INPUTS, FLOAT_INPUTS, INPUTS, QUANTIZED_OPS, QUANTIZED_WEIGHTS, dequantize,
                                         granularity, row_scales)
from rnnx.weights import RNNWeights

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
    largest: int = 0  # the largest |q - zero_point|: 127 for int8 over its full range, 64 with reduce_range

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


def _stored(node: Any, positions: tuple[int, ...], known: dict[str, tuple[np.ndarray, str]]) -> list[np.ndarray] | None:
    """The arrays at ``positions`` where all are stored in the model, else None."""
    names = [_input(node, p) for p in positions]
    return [np.asarray(known[n][0]) for n in names] if all(n in known for n in names) else None


def _elsewhere(node: Any, position: int, graph_inputs: set[str]) -> str:
    return "graph input" if _input(node, position) in graph_inputs else "a computed tensor"


def stand_in(node: Any, graph: str, known: dict[str, tuple[np.ndarray, str]], graph_inputs: set[str]) \
        -> tuple[Any, str, dict[str, Any], dict[str, np.ndarray | None], dict[str, str]]:
    """The float node a quantized ``node`` of ``graph`` stands for, as the fields of
    :class:`rnnx.formats.onnx_read.RecurrentNode` (node, graph, attributes, tensors, sources):
    its W and R dequantized, B and P as stored."""
    from onnx import helper

    where = f"{node.op_type} node {node.name!r}"
    tensors: dict[str, np.ndarray | None] = {}
    sources: dict[str, str] = {}
    for key, positions in QUANTIZED_WEIGHTS.items():
        stored = _stored(node, positions, known)
        if stored is None:  # reported by RecurrentNode.as_dict when its weights are asked for
            tensors[key], sources[key] = None, _elsewhere(node, positions[0], graph_inputs)
            continue
        q, scale, zero_point = stored
        tensors[key] = dequantize(key, q, scale, zero_point, where)
        sources[key] = f"{q.dtype} {known[_input(node, positions[0])][1]}, dequantized ({granularity(scale)})"
    for key in ("B", "P"):
        name = _input(node, WEIGHT_INPUTS[key])
        if not name:
            continue
        if name in known:
            tensors[key], sources[key] = known[name]
        else:
            tensors[key], sources[key] = None, "graph input" if name in graph_inputs else "a computed tensor"
    float_op = QUANTIZED_OPS[node.op_type]
    inputs = list(node.input[: INPUTS.index("W_scale")])  # the float op's inputs: those before the scales, by the same positions
    proxy = helper.make_node(float_op, inputs, list(node.output), name=node.name, doc_string=_MARK + f"{node.domain}.{node.op_type}")
    return proxy, graph, _attributes(node), tensors, sources


def quantization(node: Any, known: dict[str, tuple[np.ndarray, str]]) -> Quantization:
    """The quantization parameters of a quantized ``node`` (types, scales, zero points)."""
    where = f"{node.op_type} node {node.name!r}"
    found = Quantization(f"{node.domain}.{node.op_type}")
    for key, positions in QUANTIZED_WEIGHTS.items():
        stored = _stored(node, positions, known)
        if stored is None:  # fed at run time: nothing to describe (stand_in names where it comes from)
            continue
        q, scale, zero_point = stored
        largest = int(np.abs(dequantize(key, q, np.ones(scale.shape, np.float32), zero_point, where)).max(initial=0))  # |q - zero_point|
        found.weights.append(QuantizedWeight(key, _input(node, positions[0]), q.dtype.name, granularity(scale), scale.tolist(), zero_point.tolist(), largest))
    found.float_inputs = [k for k in FLOAT_INPUTS if _input(node, INPUTS.index(k))]
    return found


def main_graph_quantizations(model: Any) -> list[Quantization]:
    """The quantization of each quantized recurrent node of the main graph, in graph order."""
    from onnx import numpy_helper

    nodes = [n for n in model.graph.node if is_quantized(n)]
    wanted = {name for n in nodes for name in n.input}
    known = {i.name: (numpy_helper.to_array(i), "initializer") for i in model.graph.initializer if i.name in wanted}
    return [quantization(n, known) for n in nodes]


def full_range(layers: list[Quantization]) -> bool:
    """Whether an 8-bit weight uses more than 7 bits (|q - zero_point| > 64), as
    quantize_dynamic's default (reduce_range=False) writes them. ONNX Runtime's u8 x s8 kernel
    on x86 CPUs without VNNI sums pairs of products in int16 with saturation (AVX2's
    vpmaddubsw): such weights can overflow it, and the outputs are then not the quantized
    model's arithmetic."""
    return any(w.largest > 64 for layer in layers for w in layer.weights)


def error_bound(layers: list[Quantization], weights: RNNWeights, inputs: dict[str, np.ndarray], from_float: bool) -> float:
    """How far ONNX Runtime's DynamicQuantizeLSTM may be from the float64 reference, per output
    element: the largest per-step error of any gate's pre-activation, ``delta``.

    ``weights`` are the node's dequantized weights (canonical), ``layers`` its quantization
    (one per layer), ``inputs`` the run's X and h0. For each layer, direction and gate row j:

    - activations: the kernel quantizes its input (X, or the layer below's h) and each step's
      h to uint8 over their range including 0, so each value moves by at most half a step:
      ``sx/2 * |W_j|_1 + sh/2 * |R_j|_1`` with ``sx = range(X)/255`` (``2/255`` above layer 0,
      h being in (-1, 1)) and ``sh = max(2, range(h0))/255``;
    - with ``from_float`` (the reference runs the float weights the file was quantized from),
      also the weights' rounding, half a scale each: ``sw_j/2 * max_t |x_t|_1 + sr_j/2 * H * max(1, |h0|)``.

    ``delta`` is a rigorous bound on one step's pre-activation error. It is not one on the
    outputs: through the gates (slopes at most 1) and over time (the cell state sums the
    steps' errors, and the recurrence may amplify them) a rigorous bound grows without limit
    in T and would pass anything. The outputs are held to ``delta`` itself because that is
    what measurement supports. Measured (ONNX Runtime 1.32 on an AVX2 CPU, weights quantized
    with reduce_range; LSTMs 5->7, 16->32 bidirectional and 8->64 two layers; per tensor and
    per channel; 3 seeds; (T, B) = (1, 1), (17, 1), (64, 8), (200, 3)), largest output error
    over ``delta``:

    - the quantized file against the reference on its dequantized weights: 0.28 at worst;
    - against the float weights it was quantized from (``from_float``): 0.16 at worst;
    - planted, against the dequantized weights: gates g and o swapped, 9.9 at least; one
      direction's W scale 1.5x, 1.65 at least (2x: 3.3). A 25% error in one gate's W alone
      can stay within (0.14 at least): the bound catches layout and scale mistakes, not
      every small one.

    Full 8-bit weights (quantize_dynamic's default) on x86 CPUs without VNNI break it: the
    kernel's int16 pair sums saturate (a numpy simulation of AVX2's vpmaddubsw reproduced
    one step's output to 5e-8), reaching 21 ``delta``; see :func:`full_range`.
    """
    nodes = to_native(weights)
    X = np.asarray(inputs["X"], np.float64)
    h0 = np.asarray(inputs.get("h0", np.zeros(1)), np.float64)
    h_range = max(2.0, float(h0.max(initial=0.0) - h0.min(initial=0.0)))
    h_abs = max(1.0, float(np.abs(h0).max(initial=0.0)))
    worst = 0.0
    for layer, (node, quant) in enumerate(zip(nodes, layers)):
        W, R = np.abs(np.asarray(node["W"], np.float64)), np.abs(np.asarray(node["R"], np.float64))  # [dirs, 4H, cols]
        if layer == 0:
            sx = float(X.max(initial=0.0) - X.min(initial=0.0)) / 255
            x_l1 = float(np.abs(X).sum(axis=-1).max(initial=0.0))
        else:
            sx, x_l1 = 2.0 / 255, float(W.shape[2])
        delta = sx / 2 * W.sum(axis=2) + h_range / 255 / 2 * R.sum(axis=2)  # [dirs, 4H]
        if from_float:
            scales = {w.name: row_scales(np.asarray(w.scale), W.shape[1]) for w in quant.weights}
            delta = delta + scales["W"] / 2 * x_l1 + scales["R"] / 2 * R.shape[2] * h_abs
        worst = max(worst, float(delta.max(initial=0.0)))
    return worst


#: what rnnx asks of onnxruntime.quantization.quantize_dynamic, and why
QUANTIZE_OPTIONS = {
    "weight_type": "QInt8",  # what its LSTM quantizer writes whatever is asked
    "per_channel": False,  # its default
    # 7-bit weights: ONNX Runtime's u8 x s8 kernel on x86 CPUs without VNNI sums pairs of
    # products in int16 with saturation; full 8-bit weights overflow it (the quantizer's own
    # documentation advises reduce_range there)
    "reduce_range": True,
}


def quantize_file(float_model: Path, output: Path) -> None:
    """Quantize ``float_model`` into ``output`` with ONNX Runtime's own tool (its LSTM nodes
    become DynamicQuantizeLSTM), with :data:`QUANTIZE_OPTIONS`."""
    import logging

    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise RNNXError("quantize='dynamic' needs onnxruntime's quantization tool: pip install onnxruntime") from None
    options = dict(QUANTIZE_OPTIONS, weight_type=getattr(QuantType, str(QUANTIZE_OPTIONS["weight_type"])))
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # it advises pre-processing on the root logger at every call
    try:
        quantize_dynamic(Path(float_model), Path(output), **options)
    except Exception as exc:  # noqa: BLE001  its own exceptions: one line, with what it said
        raise RNNXError(f"onnxruntime.quantization.quantize_dynamic failed on the float model: {' '.join(str(exc).split())[:300]}") from None
    finally:
        root.setLevel(level)
