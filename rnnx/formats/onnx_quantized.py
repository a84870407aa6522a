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

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.formats.onnx_lazy import to_array
from rnnx.layouts.onnx import WEIGHT_INPUTS, to_native
from rnnx.layouts.onnx_quantized import DOMAIN, DYNAMIC_INPUTS, FLOAT_INPUTS, INPUTS, QUANTIZED_OPS, QUANTIZED_WEIGHTS, dequantize, granularity, row_scales
from rnnx.reference import activation_function
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


def attribute_values(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values, strings decoded (undecodable bytes replaced)."""
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
    return proxy, graph, attribute_values(node), tensors, sources


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
    nodes = [n for n in model.graph.node if is_quantized(n)]
    wanted = {name for n in nodes for name in n.input}
    known = {i.name: (to_array(i), "initializer") for i in model.graph.initializer if i.name in wanted}
    return [quantization(n, known) for n in nodes]


def full_range(layers: list[Quantization]) -> bool:
    """Whether an 8-bit weight uses more than 7 bits (|q - zero_point| > 64), as
    quantize_dynamic's default (reduce_range=False) writes them. ONNX Runtime's u8 x s8 kernel
    on x86 CPUs without VNNI sums pairs of products in int16 with saturation (AVX2's
    vpmaddubsw): such weights can overflow it, and the outputs are then not the quantized
    model's arithmetic."""
    return any(w.largest > 64 for layer in layers for w in layer.weights)


#: the outputs are held to this many standard deviations of the predicted rounding noise
#: (see :func:`error_bound` for the measurements that set it)
SIGMAS = 5.0


def error_bound(layers: list[Quantization], weights: RNNWeights, inputs: dict[str, np.ndarray], from_float: bool) -> float:
    """How far ONNX Runtime's DynamicQuantizeLSTM may be from the float64 reference, per output
    element: :data:`SIGMAS` times the largest standard deviation :func:`rounding_noise` predicts
    for any element of Y, Y_h or Y_c.

    ``weights`` are the node's dequantized weights (canonical), ``layers`` its quantization
    (one per layer), ``inputs`` the run's X, h0, c0 (and seq_lens), time-major.

    Why a statistical bound. The kernel's only departures from the dequantized arithmetic are
    roundings: it quantizes its input (X, or the layer below's Y) over the call's range and each
    step's h over the batch's range, to uint8 steps ``s = range/255`` (0 included). Each rounding
    is an error uniform in ``+-s/2``, independent of the others, so a gate row j's pre-activation
    moves by a sum of many of them: mean 0, variance ``s_x^2/12 |W_j|_2^2 + s_h^2/12 |R_j|_2^2``.
    The worst case (every rounding at ``+-s/2`` with the sign of its weight) is ``s/2 |W_j|_1``:
    sqrt(3 * columns) times larger, and it is never met; an earlier bound built on it, taken at one
    step and not propagated, came out as large as the outputs themselves (0.18 to 0.23 for
    outputs up to 0.22) and passed a file whose biases were all zeroed. With ``from_float`` (the
    reference runs the float weights the file was rounded from) each weight's own rounding adds
    ``sw_j^2/12 |x_t|_2^2 + sr_j^2/12 |h_t|_2^2`` the same way.

    :func:`rounding_noise` carries those variances through the run itself, to first order: the
    reference's own gates give each step's slopes (sigmoid and tanh, or the node's activations,
    clip included), the cell state sums its own variance (times f^2) with the gates', h's
    variance comes back through R^2 and goes up through the next layer's W^2. Summing variances
    takes the errors of different units as independent, which they are not quite (they share
    roundings); the constant :data:`SIGMAS` absorbs that, and is set by measurement.

    Measured (ONNX Runtime 1.32, AVX2 CPU without VNNI; torch LSTMs 5->7, 16->32 bidirectional,
    8->64 two layers, 4->6 and 16->32 two layers bidirectional, 32->128; exported and quantized
    by quantize_dynamic with reduce_range, per tensor and per channel, 2 seeds each; (T, B) =
    (1, 1), (17, 1), (64, 8), (200, 3), and (33, 5) for the last two; inputs, h0 and c0 as
    verify draws them). The largest error of Y, Y_h and Y_c over this bound (a ratio above 1
    fails); the planted mistakes are in the weights the reference runs, against the real file:

    ==========================================  ===  =============  ======  =================
    against the reference on                    n    ratio          fails   earlier bound
    ==========================================  ===  =============  ======  =================
    its dequantized weights (real rounding)     104  0.16 to 0.59   0%      0.04 to 0.28
    the float weights it was rounded from       104  0.11 to 0.67   0%      0.01 to 0.22
    planted: all biases zeroed                  104  11.5 to 114    100%    1.95 to 36.5
    planted: gates g and o swapped (layer 0)    104  36 to 146      100%    8.0 to 83
    planted: gates i and f swapped (layer 0)    104  6.8 to 92      100%    1.3 to 23
    planted: layer 0's W 1.5x (a scale 1.5x)    104  9.0 to 45      100%    2.6 to 19
    planted: one gate's W 25% off, each gate    416  0.43 to 15     97%     44% fail
    planted: one gate's W 10% off, each gate    416  0.22 to 6.5    57%     12% fail
    ==========================================  ===  =============  ======  =================

    So real rounding stays under 0.67 of the bound (1.5x margin: SIGMAS could not go below
    about 3.4 without failing a real file), and zeroed biases, swapped gates and a wrong scale
    fail by 6.8x at the least. A 25% error in one gate's W is caught in 97% of cases; held to
    each output's own bound (:func:`error_bounds`; Y's noise is smaller than the cell state's)
    99.8%, and a 10% one 74%. The misses are small models (input 4 or 5) at T = 1 or a gate
    whose error stays near the rounding: no honest bound on one run separates those, since a
    mistake that small moves the outputs by as much as the int8 rounding itself does. The
    user trial that prompted this bound (a two-layer bidirectional 16->32 encoder, all biases
    zeroed, against the float checkpoint): the earlier bound passed it (error 0.17, bound 0.18
    to 0.23); this one fails it by 5.0x to 10x, and passes the real file at 0.13 to 0.49.

    Full 8-bit weights (quantize_dynamic's default) on x86 CPUs without VNNI break it: the
    kernel's int16 pair sums saturate (a numpy simulation of AVX2's vpmaddubsw reproduced one
    step's output to 5e-8), far beyond rounding; see :func:`full_range`.
    """
    return max(error_bounds(layers, weights, inputs, from_float).values())


def error_bounds(layers: list[Quantization], weights: RNNWeights, inputs: dict[str, np.ndarray], from_float: bool) -> dict[str, float]:
    """:func:`error_bound` for each output on its own (``Y``, ``h_n``, ``c_n``): the cell
    state's noise is the largest, so a check that can hold each output to its own bound
    catches smaller mistakes in Y."""
    noise = rounding_noise(layers, weights, inputs, from_float)
    return {name: SIGMAS * float(s.max(initial=0.0)) for name, s in noise.items()}


def _step(values: np.ndarray) -> float:
    """The uint8 step the kernel quantizes ``values`` to: their range with 0 included, over 255."""
    return (max(float(values.max(initial=0.0)), 0.0) - min(float(values.min(initial=0.0)), 0.0)) / 255


def _slope(fn: Callable[[np.ndarray], np.ndarray], a: np.ndarray) -> np.ndarray:
    """``fn``'s slope at ``a`` (central difference: any ONNX activation, clip included)."""
    eps = 1e-6
    return (fn(a + eps) - fn(a - eps)) / (2 * eps)


def rounding_noise(layers: list[Quantization], weights: RNNWeights, inputs: dict[str, np.ndarray], from_float: bool) \
        -> dict[str, np.ndarray]:
    """The standard deviation of each output element's rounding error (Y, Y_h, Y_c as the
    reference names them: ``Y``, ``h_n``, ``c_n``) that the kernel's per-call quantization of
    its inputs (and, with ``from_float``, the weights' rounding) makes, carried through the run
    to first order; see :func:`error_bound`."""
    spec = weights.spec
    nodes = to_native(weights)
    x = np.asarray(inputs["X"], np.float64)
    T, B, _ = x.shape
    H, dirs = spec.hidden_size, spec.num_directions
    states = (spec.num_layers * dirs, B, H)
    h0 = np.asarray(inputs["h0"], np.float64) if inputs.get("h0") is not None else np.zeros(states)
    c0 = np.asarray(inputs["c0"], np.float64) if inputs.get("c0") is not None else np.zeros(states)
    lens = np.asarray(inputs["seq_lens"]) if inputs.get("seq_lens") is not None else np.full(B, T)
    act = [activation_function(a) for a in spec.activation_functions]
    clip = (lambda v: np.clip(v, -spec.clip, spec.clip)) if spec.clip else (lambda v: v)
    f_act, g_act, h_act = (lambda v: act[0](clip(v))), (lambda v: act[1](clip(v))), act[2]
    vx = np.zeros_like(x)  # the variance of the layer's input error: none in X
    var_h, var_c = np.zeros(states), np.zeros(states)
    for layer, (node, quant) in enumerate(zip(nodes, layers)):
        W, R = np.asarray(node["W"], np.float64), np.asarray(node["R"], np.float64)  # [dirs, 4H, cols], gates i, o, f, c
        bias = np.asarray(node["B"], np.float64) if node.get("B") is not None else np.zeros((dirs, 8 * H))
        P = np.asarray(node["P"], np.float64) if node.get("P") is not None else None  # i, o, f
        sx = _step(x)
        scales = {w.name: row_scales(np.asarray(w.scale), 4 * H) for w in quant.weights} if from_float else {}
        ys, var_ys = [], []
        for d, direction in enumerate(spec.directions):
            k = layer * dirs + d
            W2, R2 = W[d] ** 2, R[d] ** 2
            xw = x @ W[d].T + bias[d, :4 * H] + bias[d, 4 * H:]
            var_xw = vx @ W2.T + sx ** 2 / 12 * W2.sum(axis=1)
            if from_float:
                var_xw = var_xw + scales["W"][d] ** 2 / 12 * (x ** 2).sum(axis=-1, keepdims=True)
            h, c = h0[k].copy(), c0[k].copy()
            vh, vc = np.zeros_like(h), np.zeros_like(c)
            y, var_y = np.zeros((T, B, H)), np.zeros((T, B, H))
            for t in range(T - 1, -1, -1) if direction == "reverse" else range(T):
                active = (t < lens)[:, None]
                a = xw[t] + h @ R[d].T
                va = var_xw[t] + vh @ R2.T + _step(h) ** 2 / 12 * R2.sum(axis=1)
                if from_float:
                    va = va + scales["R"][d] ** 2 / 12 * (h ** 2).sum(axis=-1, keepdims=True)
                ai, ao, af, ag = np.split(a, 4, axis=-1)
                vi, vo, vf, vg = np.split(va, 4, axis=-1)
                if P is not None:
                    ai, af = ai + P[d, :H] * c, af + P[d, 2 * H:] * c
                i, g = f_act(ai), g_act(ag)
                di2, dg2 = _slope(f_act, ai) ** 2 * vi, _slope(g_act, ag) ** 2 * vg
                f, df2 = (1.0 - i, di2) if spec.input_forget else (f_act(af), _slope(f_act, af) ** 2 * vf)
                c_new = f * c + i * g
                vc_new = f ** 2 * vc + c ** 2 * df2 + i ** 2 * dg2 + g ** 2 * di2
                if P is not None:
                    ao = ao + P[d, H:2 * H] * c_new
                o, hc = f_act(ao), h_act(c_new)
                vh_new = hc ** 2 * _slope(f_act, ao) ** 2 * vo + o ** 2 * _slope(h_act, c_new) ** 2 * vc_new
                h, c = np.where(active, o * hc, h), np.where(active, c_new, c)
                vh, vc = np.where(active, vh_new, vh), np.where(active, vc_new, vc)
                y[t], var_y[t] = np.where(active, h, 0.0), np.where(active, vh, 0.0)
            var_h[k], var_c[k] = vh, vc
            ys.append(y)
            var_ys.append(var_y)
        x, vx = np.concatenate(ys, axis=2), np.concatenate(var_ys, axis=2)
    return {"Y": np.sqrt(vx), "h_n": np.sqrt(var_h), "c_n": np.sqrt(var_c)}


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
        raise RNNXError(f"onnxruntime.quantization.quantize_dynamic failed on the float model: {one_line(exc, CAUSE_CHARS)}") from None
    finally:
        root.setLevel(level)
