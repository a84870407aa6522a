"""ONNX's facts about its recurrent nodes, written once: gate order, op types, inputs,
attributes, opsets, and the pack and unpack of the W, R, B and P tensors (pure numpy).

ONNX stacks gates in the order of :data:`GATE_ORDER` (its LSTM ``c`` and GRU ``h`` are
our ``g`` and ``n``). Per node: W (dirs, gates*hidden, in), R (dirs, gates*hidden,
hidden), B (dirs, 2*gates*hidden) = [Wb, Rb], P (dirs, 3*hidden) = [Pi, Po, Pf]. A
multi-layer stack is one node per layer. The native object is a list with one dict per
layer holding those arrays and the node's attributes. Weights are the same under both
``layout`` values; what rnnx writes always uses layout 0, since ONNX Runtime and
TensorRT's parser refuse layout 1.

Activations: a node's ``activations`` lists each direction's functions in turn (LSTM f, g,
h; GRU f, g; RNN f). ``activation_alpha`` and ``activation_beta`` are handed out in order to
the functions that take one, as ONNX Runtime reads them; rnnx writes every value, so no
reader falls back to a default. Left out, ONNX's defaults are its operators' (LeakyRelu 0.01,
HardSigmoid 0.2/0.5, Elu 1), which ONNX Runtime shares; for Affine, ThresholdedRelu and
ScaledTanh ONNX Runtime uses 0 instead, so rnnx refuses a file that leaves theirs out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.spec import ACTIVATION_PARAMETERS, DEFAULT_ACTIVATIONS as CELL_DEFAULT_ACTIVATIONS, Activation, RNNSpec
from rnnx.tensor_pieces import Pieces
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
DEFAULT_OPSET = 17  # what rnnx writes: read by ONNX Runtime, TensorRT 8.5+ and onnx's checker
# The lowest: TensorRT 8.0 and 8.2 (JetPack 4.6.x: Jetson Nano, TX2, Xavier) parse up to 13. rnnx
# never writes LSTM/GRU/RNN's layout attribute (14 and later): a batch-major stack gets Transposes.
MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")
# each cell's per-direction list, as a node's activations attribute spells it (ONNX's defaults
# for LSTM, GRU and RNN; Relu for rnn_relu)
DEFAULT_ACTIVATIONS = {cell: list(names) for cell, names in CELL_DEFAULT_ACTIVATIONS.items()}
ACTIVATION_ATTRIBUTES = ("activations", "activation_alpha", "activation_beta", "clip", "input_forget")


def activation_attributes(spec: RNNSpec) -> dict[str, Any]:
    """The node attributes that give ``spec``'s functions: {} for ONNX's own defaults (an
    rnn_relu still names Relu). Every alpha and beta is written out, for every direction."""
    if spec.uses_default_activations and spec.cell != "rnn_relu":
        return {}
    acts = list(spec.activation_functions) * spec.num_directions
    attrs: dict[str, Any] = {"activations": [a.name for a in acts]}
    alphas = [a.alpha for a in acts if a.alpha is not None]
    betas = [a.beta for a in acts if a.beta is not None]
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    if spec.clip:
        attrs["clip"] = spec.clip
    if spec.input_forget:
        attrs["input_forget"] = 1
    return attrs


def _given_values(node: dict[str, Any], key: str, where: str) -> list[float]:
    values = node.get(key)
    if values is None:
        return []
    if isinstance(values, (int, float)):
        values = [values]
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise RNNXError(f"{where}: {key} must be a list of floats, found {values!r}; the file is damaged") from None


def node_activations(node: dict[str, Any], slots: int, dirs: int, where: str) -> tuple[tuple[Activation, ...], float, bool]:
    """One node's (per-direction activation list, clip, input_forget), with ONNX's rules:
    ``slots`` functions per direction, alpha and beta handed to the functions that take one."""
    names = [str(a) for a in (node.get("activations") or [])]
    if not names:
        default = {3: "lstm", 2: "gru", 1: "rnn_tanh"}[slots]
        names = DEFAULT_ACTIVATIONS[default] * dirs
    if slots == 1 and dirs == 1 and len(names) == 2:
        # ONNX's RNN schema gives ["Tanh", "Tanh"] as the default list; for one direction
        # ONNX Runtime takes the first, and so does rnnx
        names = names[:1]
    if len(names) != slots * dirs:
        raise RNNXError(f"{where}: activations {names}: expected {slots * dirs} ({slots} per direction, {dirs} direction(s)), "
                        f"found {len(names)}; the file is damaged")
    given = {"alpha": _given_values(node, "activation_alpha", where), "beta": _given_values(node, "activation_beta", where)}
    used = {"alpha": 0, "beta": 0}
    acts = []
    for name in names:
        canonical = next((n for n in ACTIVATION_PARAMETERS if n.lower() == name.lower()), None)
        if canonical is None:
            raise RNNXError(f"{where}: activation {name!r} is not one of ONNX's ({', '.join(ACTIVATION_PARAMETERS)})")
        values: dict[str, float | None] = {}
        for param, _ in ACTIVATION_PARAMETERS[canonical]:
            if used[param] < len(given[param]):
                values[param] = given[param][used[param]]
                used[param] += 1
            else:
                values[param] = None
        try:
            acts.append(Activation(canonical, values.get("alpha"), values.get("beta")))
        except RNNXError as exc:
            missing = next(p for p, v in values.items() if v is None) if None in values.values() else None
            if missing is None:
                raise RNNXError(f"{where}: {exc}") from None
            raise RNNXError(f"{where}: {canonical} takes {missing}, but activation_{missing} has no value left for it; ONNX defines no default "
                            f"ONNX Runtime agrees with (it uses 0), so the file must give activation_{missing}") from None
    for param in ("alpha", "beta"):
        listed = given[param]
        if used[param] == len(listed):
            continue
        # More values than the functions take: some tools write one per function. Accept that
        # only where it gives each function the same value as the in-order reading.
        takers = [k for k, a in enumerate(acts) if getattr(a, param) is not None]
        if len(listed) != len(names) or any(listed[k] != listed[n] for n, k in enumerate(takers)):
            raise RNNXError(f"{where}: activation_{param} has {len(listed)} values, but the activations {names} take {used[param]}; "
                            f"rnnx cannot tell which function each is for (ONNX Runtime hands them out in order to the functions that take one)")
    per_direction = [tuple(acts[d * slots:(d + 1) * slots]) for d in range(dirs)]
    if len(set(per_direction)) > 1:
        lists = " vs ".join("/".join(map(str, p)) for p in per_direction)
        raise RNNXError(f"{where}: the directions use different activations ({lists}); an rnnx spec holds one list for both directions")
    clip = node.get("clip")
    if clip is not None:
        try:
            clip = float(clip)
        except (TypeError, ValueError):
            clip = float("nan")
        if not clip > 0 or clip == float("inf"):
            raise RNNXError(f"{where}: clip={node.get('clip')!r}: expected a positive finite threshold (leave clip out for none); the file is damaged")
    try:
        input_forget = bool(int(node.get("input_forget", 0) or 0))
    except (TypeError, ValueError):
        raise RNNXError(f"{where}: input_forget={node.get('input_forget')!r}: expected 0 or 1; the file is damaged") from None
    return per_direction[0], float(clip or 0.0), input_forget


def refusals(spec: RNNSpec) -> list[str]:
    """Why ONNX's native nodes cannot hold ``spec`` (empty when they can)."""
    return ["ONNX LSTM nodes have no projection"] if spec.proj_size else []


def _check_expressible(spec: RNNSpec) -> None:
    if spec.proj_size:
        raise RNNXError(
            f"spec {spec}: ONNX LSTM nodes have no projection; use `rnnx convert --to onnx`, which lowers "
            "the projection into a Scan, instead of the bare onnx weight format"
        )


def layer_pieces(weights: RNNWeights, layer: int) -> dict[str, Pieces]:
    """One layer's W, R and (as the spec has them) B and P as :class:`Pieces`: each is the
    canonical arrays in ONNX's order (directions, then gates; B's input biases before its
    recurrent ones), so a writer streams them without stacking them in memory."""
    spec = weights.spec
    order = GATE_ORDER[spec.cell]
    dirs = spec.directions
    H = spec.hidden_size

    def parts(kind: str, gate_order: tuple[str, ...] = order) -> list[np.ndarray]:
        return [weights[tensor_name(layer, d, kind, g)] for d in dirs for g in gate_order]

    D, G = len(dirs), len(order)
    out = {"W": Pieces.of(parts("W"), (D, G * H, spec.layer_input_size(layer))),
           "R": Pieces.of(parts("R"), (D, G * H, spec.output_size))}
    if spec.bias:
        out["B"] = Pieces.of([weights[tensor_name(layer, d, kind, g)] for d in dirs for kind in ("bW", "bR") for g in order], (D, 2 * G * H))
    if spec.peepholes:
        out["P"] = Pieces.of(parts("P", PEEPHOLE_ORDER), (D, len(PEEPHOLE_ORDER) * H))
    return out


def layer_arrays(weights: RNNWeights, layer: int) -> dict[str, Any]:
    """One layer as ONNX node inputs and attributes. With a projection, also ``proj``
    (dirs, proj, hidden): no ONNX node takes it, the graph builders lower it."""
    spec = weights.spec
    node: dict[str, Any] = {"op_type": OP_TYPES[spec.cell], **{k: v.array() for k, v in layer_pieces(weights, layer).items()}}
    if spec.proj_size:
        projs = [weights.proj(layer, d) for d in spec.directions]
        node["proj"] = np.stack([p for p in projs if p is not None])  # all of them: RNNWeights holds every tensor its spec has
    node["direction"] = spec.direction
    node["hidden_size"] = spec.hidden_size
    node["activations"] = DEFAULT_ACTIVATIONS[spec.cell] * spec.num_directions
    node.update(activation_attributes(spec))
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
    # a plain RNN's activation decides rnn_tanh or rnn_relu (RNNSpec normalises it)
    cell = "rnn_tanh" if op == "RNN" else op.lower()
    dirs = 2 if direction == "bidirectional" else 1
    slots = len(DEFAULT_ACTIVATIONS[cell])
    functions = None
    for i, node in enumerate(nodes):
        if node.get("op_type") != op or node.get("direction", "forward") != direction:
            raise RNNXError(f"{where}: layer {i} is {node.get('op_type')} {node.get('direction', 'forward')}, unlike layer 0")
        found = node_activations(node, slots, dirs, f"{where}: layer {i}")
        if functions is not None and found != functions:
            raise RNNXError(f"{where}: layer {i}'s activations, clip or input_forget differ from layer 0's; an rnnx spec holds one set for all layers "
                            f"(select= one node to read it alone)")
        functions = found
    assert functions is not None
    activations, clip, input_forget = functions
    if input_forget and op != "LSTM":
        raise RNNXError(f"{where}: input_forget is set on a {op} node; only LSTMs couple the input and forget gates; the file is damaged")
    return RNNSpec(
        activations=activations,
        clip=clip,
        input_forget=input_forget,
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
