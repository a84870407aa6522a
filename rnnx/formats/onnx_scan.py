"""Lower recurrent nodes into Scans: for what no ONNX node holds (an LSTM projection) and
for TensorRT, whose parser builds every recurrence as a loop anyway.

Rules, per lowered node and direction:
- the input product of every step is one MatMul over the whole sequence, hoisted out of
  the loop, against the gate-stacked input matrix in cuDNN's gate order (LSTM i,f,g,o;
  GRU r,z,n), with every bias that can be folded in;
- the Scan body holds only the recurrent product, the gates, the state update and, for a
  projected LSTM, the projection; peepholes, GRU reset modes, activations (with alpha
  and beta), clip and input_forget as the node says;
- ragged batches are masked inside the body: past a sequence's end its state stays and its
  output is zero, and the reverse direction starts at each sequence's own end;
- outputs keep the node's contract: Y (seq, dirs, batch, size), Y_h, Y_c; the
  ``rnnx.lower::LSTMProjected`` placeholder (what rnnx's builders emit for a projected
  LSTM) returns Y already merged to (seq, batch, dirs*proj);
- weights must be constants (initializers or Constant nodes); other nodes are left alone,
  with the reason.

Built with onnx.helper on the protobuf: each rewrite creates fresh subgraphs and rewires
one node's outputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.formats.onnx_metadata import set_metadata
from rnnx.formats.onnx_read import constants as graph_constants, node_attributes, read_lowered
from rnnx.layouts import onnx as onnx_layout
from rnnx.layouts.onnx import LOWERED_KEY, PROJECTED_LSTM_INPUTS, SCAN_GATE_ORDER
from rnnx.pass_result import Declined, PassResult
from rnnx.spec import Activation
from rnnx.weights import RNNWeights, tensor_name

DOMAIN = "rnnx.lower"
LSTM_PROJECTED = "LSTMProjected"
INPUTS = PROJECTED_LSTM_INPUTS


@dataclass
class LowerResult(PassResult[str]):
    """The nodes lowered (by name), those left alone and why, and each lowered node's record."""

    records: list[dict[str, Any]] = field(default_factory=list)


def _order(cell: str) -> list[str]:
    return list(SCAN_GATE_ORDER[cell])


class _Builder:
    """Collects nodes and constants under one name prefix."""

    def __init__(self, prefix: str, elem: int) -> None:
        from onnx import helper

        self.helper, self.prefix, self.elem = helper, prefix, elem
        self.nodes: list[Any] = []
        self.np_dtype = helper.tensor_dtype_to_np_dtype(elem)

    def const(self, name: str, value: Any, dtype: Any = None) -> str:
        from onnx import numpy_helper

        array = np.asarray(value, dtype=dtype if dtype is not None else self.np_dtype)
        self.nodes.append(self.helper.make_node("Constant", [], [self.prefix + name], value=numpy_helper.from_array(array, self.prefix + name)))
        return self.prefix + name

    def op(self, op_type: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(self.helper.make_node(op_type, inputs, [self.prefix + output], **attrs))
        return self.prefix + output

    def activate(self, activation: Activation, x: str, output: str) -> str:
        """``activation`` of ``x`` as ONNX ops: its own operator where ONNX has one (with alpha
        and beta as attributes), Affine and ScaledTanh from Mul, Add and Tanh."""
        name, alpha, beta = activation.name, activation.alpha, activation.beta
        if name == "Affine":
            return self.op("Add", [self.op("Mul", [x, self.const(output + "_alpha", alpha)], output + "_ax"), self.const(output + "_beta", beta)], output)
        if name == "ScaledTanh":
            inner = self.op("Tanh", [self.op("Mul", [x, self.const(output + "_beta", beta)], output + "_bx")], output + "_t")
            return self.op("Mul", [inner, self.const(output + "_alpha", alpha)], output)
        attrs = {k: v for k, v in (("alpha", alpha), ("beta", beta)) if v is not None}
        return self.op(name, [x], output, **attrs)

    def clip(self, bound: float, x: str, output: str) -> str:
        """``x`` bounded to [-bound, bound]; ``x`` itself when there is no bound."""
        if not bound:
            return x
        return self.op("Clip", [x, self.const(output + "_lo", -bound), self.const(output + "_hi", bound)], output)


def _body(weights: RNNWeights, layer: int, direction: str, p: str, elem: int) -> tuple[Any, list[Any]]:
    """The Scan body of one direction, and the constants it reads from the outer scope."""
    from onnx import TensorProto, helper

    spec = weights.spec
    order, H = _order(spec.cell), spec.hidden_size
    b = _Builder(p, elem)
    outer: list[Any] = []

    def outer_const(name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        outer.append(helper.make_node("Constant", [], [p + name], value=numpy_helper.from_array(np.ascontiguousarray(value.astype(b.np_dtype)), p + name)))
        return p + name

    h, xw, m = p + "h", p + "xw_t", p + "m_t"
    # ONNX's slots: f for the gates, g for the candidate, h for the cell output
    acts = spec.activation_functions
    act_f, act_g, act_h = acts[0], acts[min(1, len(acts) - 1)], acts[-1]
    clip = spec.clip
    state_in = [h]
    if spec.cell == "lstm":
        c = p + "c"
        state_in.append(c)
        Rt = outer_const("Rt", weights.stacked(layer, direction, "R", order).T)
        pre = b.op("Add", [xw, b.op("MatMul", [h, Rt], "hr")], "pre")
        parts = [p + f"pre_{g}" for g in order]
        b.nodes.extend(_split(pre, parts, H))
        gate = dict(zip(order, parts))
        if spec.peepholes:
            for g in ("i", "f"):
                gate[g] = b.op("Add", [gate[g], b.op("Mul", [c, outer_const(f"P{g}", _held(weights, layer, direction, "P", g))], f"pc_{g}")], f"pre2_{g}")
        i = b.activate(act_f, b.clip(clip, gate["i"], "clip_i"), "i")
        if spec.input_forget:  # coupled gates: f = 1 - i, the forget weights unused
            f = b.op("Sub", [b.const("one_f", 1.0), i], "f")
        else:
            f = b.activate(act_f, b.clip(clip, gate["f"], "clip_f"), "f")
        g = b.activate(act_g, b.clip(clip, gate["g"], "clip_g"), "g")
        c_new = b.op("Add", [b.op("Mul", [f, c], "fc"), b.op("Mul", [i, g], "ig")], "c_new")
        if spec.peepholes:
            gate["o"] = b.op("Add", [gate["o"], b.op("Mul", [c_new, outer_const("Po", _held(weights, layer, direction, "P", "o"))], "pc_o")], "pre2_o")
        o = b.activate(act_f, b.clip(clip, gate["o"], "clip_o"), "o")
        h_new = b.op("Mul", [o, b.activate(act_h, c_new, "tc")], "h_full")  # c itself is not clipped (ONNX Runtime)
        if spec.proj_size:
            h_new = b.op("MatMul", [h_new, outer_const("Pt", _held(weights, layer, direction, "proj").T)], "h_proj")
        updates = [(h_new, h), (c_new, c)]
    elif spec.cell == "gru":
        Rt_rz = outer_const("Rt_rz", weights.stacked(layer, direction, "R", ["r", "z"]).T)
        Rt_n = outer_const("Rt_n", _held(weights, layer, direction, "R", "n").T)
        bR_n = outer_const("bR_n", _held(weights, layer, direction, "bR", "n") if spec.bias else np.zeros(H))
        xr, xz, xn = p + "x_r", p + "x_z", p + "x_n"
        b.nodes.extend(_split(xw, [xr, xz, xn], H))
        hr, hz = p + "h_r", p + "h_z"
        b.nodes.extend(_split(b.op("MatMul", [h, Rt_rz], "hrz"), [hr, hz], H))
        r = b.activate(act_f, b.clip(clip, b.op("Add", [xr, hr], "pre_r"), "clip_r"), "r")
        z = b.activate(act_f, b.clip(clip, b.op("Add", [xz, hz], "pre_z"), "clip_z"), "z")
        if spec.reset_after:
            hn = b.op("Mul", [r, b.op("Add", [b.op("MatMul", [h, Rt_n], "hn0"), bR_n], "hn1")], "hn")
        else:
            hn = b.op("Add", [b.op("MatMul", [b.op("Mul", [r, h], "rh"), Rt_n], "hn0"), bR_n], "hn")
        n = b.activate(act_g, b.clip(clip, b.op("Add", [xn, hn], "pre_n"), "clip_n"), "n")
        h_new = b.op("Add", [n, b.op("Mul", [z, b.op("Sub", [h, n], "h_minus_n")], "zd")], "h_new")  # (1-z)*n + z*h
        updates = [(h_new, h)]
    else:
        Rt = outer_const("Rt", weights.stacked(layer, direction, "R", ["h"]).T)
        pre = b.op("Add", [xw, b.op("MatMul", [h, Rt], "hr")], "pre")
        h_new = b.activate(act_f, b.clip(clip, pre, "clip_pre"), "h_new")
        updates = [(h_new, h)]
    outs = [b.op("Where", [m, new, old], f"{old[len(p):]}_out") for new, old in updates]
    outs.append(b.op("Mul", [updates[0][0], b.op("Cast", [m], "m_f", to=elem)], "y_t"))
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        b.nodes,
        p + "step",
        [vi(s, elem, None) for s in state_in] + [vi(xw, elem, None), vi(m, TensorProto.BOOL, None)],
        [vi(o, elem, None) for o in outs],
    )
    return graph, outer


def _held(weights: RNNWeights, layer: int, direction: str, kind: str, gate: str | None = None) -> np.ndarray:
    """A tensor the spec has, never None: RNNWeights refuses weights that lack one."""
    return weights[tensor_name(layer, weights.direction_name(direction), kind, gate)]


def _hoisted_bias(weights: RNNWeights, layer: int, direction: str) -> np.ndarray:
    """Biases added to the hoisted input product: everything except a GRU's recurrent n bias."""
    spec = weights.spec
    order = _order(spec.cell)
    if not spec.bias:
        return np.zeros(len(order) * spec.hidden_size)
    parts = []
    for g in order:
        bias = _held(weights, layer, direction, "bW", g).astype(np.float64)
        if not (spec.cell == "gru" and g == "n"):
            bias = bias + _held(weights, layer, direction, "bR", g)
        parts.append(bias)
    return np.concatenate(parts)


def lower_layer(weights: RNNWeights, layer: int, names: dict[str, str], outputs: list[str], prefix: str, elem: int, merged_y: bool) -> list[Any]:
    """Nodes computing one layer (all its directions) as Scans; ``names`` maps X, seq_lens,
    h0, c0 to tensor names ('' when absent); ``outputs`` are Y, Y_h, Y_c ('' when unused)."""
    from onnx import TensorProto

    spec = weights.spec
    order = _order(spec.cell)
    b = _Builder(prefix, elem)
    shape = b.op("Shape", [names["X"]], "shape")
    T = b.op("Slice", [shape, b.const("i0", [0], np.int64), b.const("i1", [1], np.int64)], "T")
    B = b.op("Slice", [shape, b.const("i1b", [1], np.int64), b.const("i2", [2], np.int64)], "B")
    steps = b.op("Range", [b.const("zero", 0, np.int64), b.op("Squeeze", [T, b.const("ax0", [0], np.int64)], "T_scalar"), b.const("one", 1, np.int64)], "steps")
    lens = b.op("Cast", [names["seq_lens"]], "lens", to=TensorProto.INT64) if names.get("seq_lens") else b.op("Expand", [T, B], "lens")
    mask = b.op("Less", [b.op("Unsqueeze", [steps, b.const("ax1", [1], np.int64)], "steps_col"), b.op("Unsqueeze", [lens, b.const("ax0b", [0], np.int64)], "lens_row")], "mask2")
    mask = b.op("Unsqueeze", [mask, b.const("ax2", [2], np.int64)], "mask")
    ys, hs, cs = [], [], []
    for d, direction in enumerate(spec.directions):
        q = f"d{d}_"
        W = weights.stacked(layer, direction, "W", order)
        xw = b.op("Add", [b.op("MatMul", [names["X"], b.const(q + "Wt", W.T)], q + "xw0"), b.const(q + "bias", _hoisted_bias(weights, layer, direction))], q + "xw")

        def initial(key: str, size: int, name: str) -> str:
            if names.get(key):
                return b.op("Gather", [names[key], b.const(q + key + "_idx", d, np.int64)], q + name, axis=0)
            dims = b.op("Concat", [B, b.const(q + name + "_size", [size], np.int64)], q + name + "_shape", axis=0)
            from onnx import numpy_helper

            return b.op("ConstantOfShape", [dims], q + name, value=numpy_helper.from_array(np.zeros(1, b.np_dtype)))

        states = [initial("h0", spec.output_size, "h_init")]
        if spec.cell == "lstm":
            states.append(initial("c0", spec.hidden_size, "c_init"))
        body, outer = _body(weights, layer, direction, prefix + q, elem)
        b.nodes.extend(outer)
        rev = 1 if direction == "reverse" else 0
        scan_outs = [prefix + q + n for n in ("h_last", "c_last")[: len(states)]] + [prefix + q + "y"]
        b.nodes.append(
            b.helper.make_node("Scan", states + [xw, mask], scan_outs, num_scan_inputs=2, scan_input_directions=[rev, rev], scan_output_directions=[rev], body=body)
        )
        ys.append(scan_outs[-1])
        hs.append(b.op("Unsqueeze", [scan_outs[0], b.const(q + "u0", [0], np.int64)], q + "h_n"))
        if spec.cell == "lstm":
            cs.append(b.op("Unsqueeze", [scan_outs[1], b.const(q + "u1", [0], np.int64)], q + "c_n"))
    if not merged_y:  # the node's own Y layout: (seq, dirs, batch, size)
        ys = [b.op("Unsqueeze", [y, b.const(f"uy{d}", [1], np.int64)], f"y{d}_4d") for d, y in enumerate(ys)]
    for target, parts, axis in zip(outputs, (ys, hs, cs), (2 if merged_y else 1, 0, 0)):
        if target:
            b.nodes.append(b.helper.make_node("Concat", parts, [target], axis=axis) if len(parts) > 1 else b.helper.make_node("Identity", parts, [target]))
    return b.nodes


def _node_weights(node: Any, constants: dict[str, np.ndarray]) -> RNNWeights:
    ins = dict(zip(INPUTS, list(node.input) + [""] * len(INPUTS)))
    missing = [k for k in ("W", "R") if ins[k] not in constants] + [k for k in ("B", "P", "proj") if ins[k] and ins[k] not in constants]
    if missing:
        raise RNNXError(f"node {node.name!r}: {missing[0]} is not a constant; only nodes with stored weights can be lowered")
    attrs = node_attributes(node)
    op_type = "LSTM" if node.op_type == LSTM_PROJECTED else node.op_type
    layer = {"op_type": op_type, **attrs, **{k: constants[ins[k]] for k in ("W", "R", "B", "P", "proj") if ins[k]}}
    return onnx_layout.from_native([layer])


def _split(x: str, parts: list[str], size: int) -> list[Any]:
    """Split along the features into equal parts, with the sizes given as an input: the one
    form that opsets 13 to 18 and later all read the same way (18 wants either the sizes or
    its new num_outputs)."""
    from onnx import helper, numpy_helper

    sizes = numpy_helper.from_array(np.full(len(parts), size, dtype=np.int64))
    return [helper.make_node("Constant", [], [f"{parts[0]}_sizes"], value=sizes), helper.make_node("Split", [x, f"{parts[0]}_sizes"], parts, axis=1)]


def _lower_graph(model: Any, want: Any) -> LowerResult:
    from onnx import TensorProto

    graph = model.graph
    constants = {name: value for name, (value, _) in graph_constants(graph, {}).items()}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    types.update({i.name: i.data_type for i in graph.initializer})
    result = LowerResult()
    new_nodes = []
    for node in graph.node:
        if not want(node):
            new_nodes.append(node)
            continue
        try:
            weights = _node_weights(node, constants)
        except RNNXError as exc:
            if node.op_type == LSTM_PROJECTED:
                raise
            result.left_alone.append(Declined("lower.stored_weights", str(exc), node.name))
            new_nodes.append(node)
            continue
        ins = dict(zip(INPUTS, list(node.input) + [""] * len(INPUTS)))
        elem = types.get(ins["W"]) or TensorProto.FLOAT
        outputs = list(node.output) + [""] * (3 - len(node.output))
        names = {k: ins[k] for k in ("X", "seq_lens", "h0", "c0")}
        new_nodes.extend(lower_layer(weights, 0, names, outputs, f"{node.name or node.op_type}__", elem, merged_y=node.op_type == LSTM_PROJECTED))
        result.rewritten.append(node.name or node.op_type)
        # The Scans keep the node's input and output tensor names, so its record is enough
        # to find the layer again: what it computed, on which tensors, from which module.
        result.records.append({
            "node": node.name or node.op_type, "prefix": f"{node.name or node.op_type}__", "spec": str(weights.spec), "merged_y": node.op_type == LSTM_PROJECTED,
            "inputs": {k: v for k, v in names.items() if v}, "outputs": {k: v for k, v in zip(("Y", "Y_h", "Y_c"), outputs) if v},
            "node_metadata": {p.key: p.value for p in node.metadata_props},
        })
    if result:
        del graph.node[:]
        graph.node.extend(new_nodes)
        record_lowered(model, result.records)
        keep = [o for o in model.opset_import if o.domain != DOMAIN]
        del model.opset_import[:]
        model.opset_import.extend(keep)
    return result


def record_lowered(model: Any, records: list[dict[str, Any]]) -> None:
    """Add ``records`` to the model's record of lowered recurrences."""
    earlier = read_lowered(model)
    set_metadata(model, {LOWERED_KEY: json.dumps(earlier + records)})


def lower_graph(model: Any, want: Any) -> LowerResult:
    """Lower the main graph's nodes for which ``want(node)`` holds into Scans, in place."""
    return _lower_graph(model, want)


def lower_projections(model: Any) -> LowerResult:
    """Replace every ``rnnx.lower::LSTMProjected`` placeholder of the main graph, in place."""
    return _lower_graph(model, lambda n: n.domain == DOMAIN and n.op_type == LSTM_PROJECTED)
