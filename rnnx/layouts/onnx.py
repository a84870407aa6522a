"""ONNX's facts about its recurrent nodes, written once: gate order, op types, inputs,
attributes, opsets, and the pack and unpack of the W, R, B and P tensors (pure numpy).

ONNX stacks gates in the order of :data:`GATE_ORDER` (its LSTM ``c`` and GRU ``h`` are
our ``g`` and ``n``). Per node: W (dirs, gates*hidden, in), R (dirs, gates*hidden,
hidden), B (dirs, 2*gates*hidden) = [Wb, Rb], P (dirs, 3*hidden) = [Pi, Po, Pf]. A
multi-layer stack is one node per layer. The native object is a list with one dict per
layer holding those arrays and the node's attributes. Weights are the same under both
``layout`` values; what rnnx writes always uses layout 0, since ONNX Runtime and
TensorRT's parser refuse layout 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights, split_gates, tensor_name

GATE_ORDER: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "o", "f", "g"),
    "gru": ("z", "r", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
PEEPHOLE_ORDER = ("i", "o", "f")
# rnnx's own layout for recurrences lowered to Scans (projections, TensorRT's form): the
# hoisted input matrix and the recurrent matrix stack gates in cuDNN's order, so one
# MatMul serves all gates; the constants are named by SCAN_CONSTANT.
SCAN_GATE_ORDER: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),
    "gru": ("r", "z", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
LOWERED_KEY = "rnnx.lowered"  # metadata: what each lowered recurrence was, and its tensors' names


def scan_constant(prefix: str, direction: int, name: str) -> str:
    """The name of a lowered layer's constant: Wt, bias, Rt (GRU: Rt_rz, Rt_n, bR_n), Pi/Pf/Po, Pt."""
    return f"{prefix}d{direction}_{name}"
OP_TYPES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
NATIVE_OPS = tuple(dict.fromkeys(OP_TYPES.values()))  # ("LSTM", "GRU", "RNN")
INPUTS: dict[str, tuple[str, ...]] = {  # each node's inputs, by position (ONNX operator docs)
    "LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
    "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
    "RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
}
OUTPUTS: dict[str, tuple[str, ...]] = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}
WEIGHT_INPUTS = {"W": 1, "R": 2, "B": 3, "P": 7}  # input positions of the stored tensors
# rnnx's short names for a node's runtime inputs and outputs, by position (the same in all three ops)
STATE_INPUTS = {"X": 0, "seq_lens": 4, "h0": 5, "c0": 6}
NODE_OUTPUTS = {"Y": 0, "Y_h": 1, "Y_c": 2}
# rnnx's placeholder for a projected LSTM (lowered to Scans before a file is written): LSTM's inputs, then the projection
PROJECTED_LSTM_INPUTS = ("X", "W", "R", "B", "seq_lens", "h0", "c0", "P", "proj")
DEFAULT_OPSET = 17  # what rnnx writes: read by ONNX Runtime, TensorRT 8.6+ and onnx's checker
MIN_OPSET = 14  # LSTM/GRU/RNN gained their layout attribute, and torch.onnx's reductions their form, in 14
DEFAULT_DOMAINS = ("", "ai.onnx")
DEFAULT_ACTIVATIONS = {
    "lstm": ["Sigmoid", "Tanh", "Tanh"],
    "gru": ["Sigmoid", "Tanh"],
    "rnn_tanh": ["Tanh"],
    "rnn_relu": ["Relu"],
}


def refusals(spec: RNNSpec) -> list[str]:
    """Why ONNX's native nodes cannot hold ``spec`` (empty when they can)."""
    return ["ONNX LSTM nodes have no projection"] if spec.proj_size else []


def _check_expressible(spec: RNNSpec) -> None:
    if spec.proj_size:
        raise RNNXError(
            f"spec {spec}: ONNX LSTM nodes have no projection; use `rnnx convert --to onnx`, which lowers "
            "the projection into a Scan, instead of the bare onnx weight format"
        )


def layer_arrays(weights: RNNWeights, layer: int) -> dict[str, Any]:
    """One layer as ONNX node inputs and attributes. With a projection, also ``proj``
    (dirs, proj, hidden): no ONNX node takes it, the graph builders lower it."""
    spec = weights.spec
    order = GATE_ORDER[spec.cell]
    dirs = spec.directions

    def stack(kind: str, gate_order: tuple[str, ...] = order) -> np.ndarray:
        return np.stack([weights.stacked(layer, d, kind, gate_order) for d in dirs])

    node: dict[str, Any] = {"op_type": OP_TYPES[spec.cell], "W": stack("W"), "R": stack("R")}
    if spec.bias:
        node["B"] = np.concatenate([stack("bW"), stack("bR")], axis=1)
    if spec.peepholes:
        node["P"] = stack("P", PEEPHOLE_ORDER)
    if spec.proj_size:
        node["proj"] = np.stack([weights.proj(layer, d) for d in dirs])
    node["direction"] = spec.direction
    node["hidden_size"] = spec.hidden_size
    node["activations"] = DEFAULT_ACTIVATIONS[spec.cell] * spec.num_directions
    if spec.cell == "gru":
        node["linear_before_reset"] = int(spec.reset_after)
    return node


def to_native(weights: RNNWeights) -> list[dict[str, Any]]:
    """One dict per layer: W, R, B (with bias), P (with peepholes) and the node attributes."""
    _check_expressible(weights.spec)
    return [layer_arrays(weights, layer) for layer in range(weights.spec.num_layers)]


def spec_of_nodes(nodes: list[dict[str, Any]], where: str = "ONNX nodes") -> RNNSpec:
    """The spec a chain of node dicts (layer order) describes; checks they fit together."""
    if not nodes:
        raise RNNXError(f"{where}: expected at least one LSTM/GRU/RNN node, found none")
    for i, node in enumerate(nodes):
        missing = [k for k in ("W", "R") if node.get(k) is None]
        if missing:
            raise RNNXError(f"{where}: layer {i} has no {missing[0]} tensor; expected W and R for every LSTM/GRU/RNN node")
    first = nodes[0]
    op = first.get("op_type")
    if op not in ("LSTM", "GRU", "RNN"):
        raise RNNXError(f"{where}: expected op_type LSTM, GRU or RNN, found {op!r}")
    W, R = np.asarray(first["W"]), np.asarray(first["R"])
    if W.ndim != 3 or R.ndim != 3:
        raise RNNXError(f"{where}: W and R must have 3 dimensions (dirs, gates*hidden, in), found {W.shape} and {R.shape}")
    hidden = int(first.get("hidden_size") or R.shape[2])
    direction = first.get("direction", "forward")
    activations = list(first.get("activations") or [])
    if op == "RNN":
        acts = activations[:1] or ["Tanh"]
        cell = {"Tanh": "rnn_tanh", "Relu": "rnn_relu"}.get(acts[0])
        if cell is None:
            raise RNNXError(f"{where}: RNN activation {acts[0]!r} has no canonical form; rnnx supports Tanh and Relu")
    else:
        cell = op.lower()
    dirs = 2 if direction == "bidirectional" else 1
    expected_acts = DEFAULT_ACTIVATIONS[cell] * dirs
    for i, node in enumerate(nodes):
        acts = list(node.get("activations") or expected_acts)
        if [a.lower() for a in acts] != [a.lower() for a in expected_acts]:
            raise RNNXError(f"{where}: layer {i} activations {acts}: rnnx supports only the defaults {expected_acts}")
        if node.get("clip") is not None:
            raise RNNXError(f"{where}: layer {i} has clip={node['clip']}; clipped cells have no canonical form")
        if int(node.get("input_forget", 0)):
            raise RNNXError(f"{where}: layer {i} has input_forget=1 (coupled gates); it has no canonical form")
        if node.get("op_type") != op or node.get("direction", "forward") != direction:
            raise RNNXError(f"{where}: layer {i} is {node.get('op_type')} {node.get('direction', 'forward')}, unlike layer 0")
    return RNNSpec(
        cell=cell,
        input_size=int(W.shape[2]),
        hidden_size=hidden,
        num_layers=len(nodes),
        direction=direction,
        bias=all(node.get("B") is not None for node in nodes),
        peepholes=any(node.get("P") is not None for node in nodes),
        proj_size=int(np.asarray(first["proj"]).shape[1]) if first.get("proj") is not None else 0,
        reset_after=bool(int(first.get("linear_before_reset", 0))) if cell == "gru" else True,
    )


def from_native(nodes: list[dict[str, Any]], spec: RNNSpec | None = None) -> RNNWeights:
    """Canonical weights from per-layer node dicts (see :func:`to_native`)."""
    if isinstance(nodes, dict):
        nodes = [nodes]
    inferred = spec_of_nodes(nodes)
    if spec is not None and spec.with_(bias=inferred.bias, peepholes=inferred.peepholes) != inferred:
        raise RNNXError(f"ONNX nodes describe {inferred}, but the given spec is {spec}; drop spec= or fix it")
    spec = inferred if spec is None else spec.with_(bias=inferred.bias, peepholes=inferred.peepholes)
    order = GATE_ORDER[spec.cell]
    H = spec.hidden_size
    n_gates = len(order)
    tensors: dict[str, np.ndarray] = {}
    for layer, node in enumerate(nodes):
        arrays = {k: np.asarray(node[k]) for k in ("W", "R", "B", "P", "proj") if node.get(k) is not None}
        expected = {
            "W": (spec.num_directions, n_gates * H, spec.layer_input_size(layer)),
            "R": (spec.num_directions, n_gates * H, spec.output_size),
            "B": (spec.num_directions, 2 * n_gates * H),
            "P": (spec.num_directions, 3 * H),
            "proj": (spec.num_directions, spec.proj_size, H),
        }
        for key, array in arrays.items():
            if array.shape != expected[key]:
                raise RNNXError(f"tensor {key} of layer {layer}: expected shape {expected[key]}, found {array.shape}")
        for d, direction in enumerate(spec.directions):
            for kind, array in (("W", arrays["W"][d]), ("R", arrays["R"][d])):
                for gate, part in split_gates(array, order).items():
                    tensors[tensor_name(layer, direction, kind, gate)] = part
            if "B" in arrays:
                wb, rb = np.split(arrays["B"][d], 2)
                for kind, array in (("bW", wb), ("bR", rb)):
                    for gate, part in split_gates(array, order).items():
                        tensors[tensor_name(layer, direction, kind, gate)] = part
            if "P" in arrays:
                for gate, part in split_gates(arrays["P"][d], PEEPHOLE_ORDER).items():
                    tensors[tensor_name(layer, direction, "P", gate)] = part
            if "proj" in arrays:
                tensors[tensor_name(layer, direction, "proj")] = arrays["proj"][d]
    return RNNWeights(spec, tensors)
