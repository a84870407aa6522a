"""Lower LSTMs that no ONNX node can hold (projection, and peepholes on request) into Scans.

Rules:
- a ``rnnx.lower::LSTMProjected`` node (inputs as ONNX LSTM's: X, W, R, B, seq_lens,
  h0, c0, P, then ``proj`` (dirs, proj, hidden); outputs Y (seq, batch, dirs*proj),
  Y_h (dirs, batch, proj), Y_c (dirs, batch, hidden)) becomes, per direction, one input
  product over all steps (hoisted out of the loop) and one Scan whose body holds only
  the recurrent product, the gates and the projection;
- ragged batches are masked inside the body: past a sequence's end its state stays and
  its output is zero, and the reverse direction starts at each sequence's own end;
- nothing else in the graph changes; the rnnx.lower domain import is dropped when no such
  node remains.

Built with onnx.helper: the pass creates a fresh subgraph and rewires one node's
outputs, which needs no IR beyond the protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

DOMAIN = "rnnx.lower"
LSTM_PROJECTED = "LSTMProjected"
INPUTS = ("X", "W", "R", "B", "seq_lens", "h0", "c0", "P", "proj")


@dataclass
class LowerResult:
    lowered: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.lowered)


def _scan_body(prefix: str, elem: int, peepholes: bool) -> Any:
    """One step: gates from the hoisted input product plus R @ h, then c, h and the projection."""
    from onnx import TensorProto, helper

    n = lambda s: f"{prefix}{s}"  # noqa: E731
    nodes = [
        helper.make_node("MatMul", [n("h"), n("Rt")], [n("hr")]),
        helper.make_node("Add", [n("xw_t"), n("hr")], [n("gates")]),
        helper.make_node("Split", [n("gates")], [n("pi"), n("po"), n("pf"), n("pc")], axis=1),
    ]
    pi, pf = n("pi"), n("pf")
    if peepholes:
        nodes += [
            helper.make_node("Mul", [n("c"), n("Pi")], [n("ci")]),
            helper.make_node("Add", [n("pi"), n("ci")], [n("pi2")]),
            helper.make_node("Mul", [n("c"), n("Pf")], [n("cf")]),
            helper.make_node("Add", [n("pf"), n("cf")], [n("pf2")]),
        ]
        pi, pf = n("pi2"), n("pf2")
    nodes += [
        helper.make_node("Sigmoid", [pi], [n("i")]),
        helper.make_node("Sigmoid", [pf], [n("f")]),
        helper.make_node("Tanh", [n("pc")], [n("g")]),
        helper.make_node("Mul", [n("f"), n("c")], [n("fc")]),
        helper.make_node("Mul", [n("i"), n("g")], [n("ig")]),
        helper.make_node("Add", [n("fc"), n("ig")], [n("c_new")]),
    ]
    po = n("po")
    if peepholes:
        nodes += [helper.make_node("Mul", [n("c_new"), n("Po")], [n("co")]), helper.make_node("Add", [n("po"), n("co")], [n("po2")])]
        po = n("po2")
    nodes += [
        helper.make_node("Sigmoid", [po], [n("o")]),
        helper.make_node("Tanh", [n("c_new")], [n("tc")]),
        helper.make_node("Mul", [n("o"), n("tc")], [n("h_full")]),
        helper.make_node("MatMul", [n("h_full"), n("Pt")], [n("h_new")]),
        helper.make_node("Where", [n("m_t"), n("h_new"), n("h")], [n("h_out")]),
        helper.make_node("Where", [n("m_t"), n("c_new"), n("c")], [n("c_out")]),
        helper.make_node("Cast", [n("m_t")], [n("m_f")], to=elem),
        helper.make_node("Mul", [n("h_new"), n("m_f")], [n("y_t")]),
    ]
    vi = helper.make_tensor_value_info
    return helper.make_graph(
        nodes,
        f"{prefix}step",
        [vi(n("h"), elem, None), vi(n("c"), elem, None), vi(n("xw_t"), elem, None), vi(n("m_t"), TensorProto.BOOL, None)],
        [vi(n("h_out"), elem, None), vi(n("c_out"), elem, None), vi(n("y_t"), elem, None)],
    )


def _lower_node(node: Any, elem: int) -> list[Any]:
    from onnx import TensorProto, helper, numpy_helper

    ins = dict(zip(INPUTS, list(node.input) + [""] * (len(INPUTS) - len(node.input))))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    H = int(attrs["hidden_size"])
    p = f"{node.name or 'lstm_projected'}__"
    out: list[Any] = []
    const_nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        const_nodes.append(helper.make_node("Constant", [], [p + name], value=numpy_helper.from_array(np.asarray(value), p + name)))
        return p + name

    def mk(op: str, inputs: list[str], output: str, **kw: Any) -> str:
        out.append(helper.make_node(op, inputs, [p + output], **kw))
        return p + output

    shape = mk("Shape", [ins["X"]], "shape")
    T = mk("Slice", [shape, const("i0", [0]), const("i1", [1])], "T")
    B = mk("Slice", [shape, const("i1b", [1]), const("i2", [2])], "B")
    # mask (T, B, 1): step t counts for sequence b when t < seq_lens[b].
    steps = mk("Range", [const("zero", np.array(0, np.int64)), mk("Squeeze", [T, const("ax0", [0])], "T_scalar"), const("one", np.array(1, np.int64))], "steps")
    if ins["seq_lens"]:
        lens = mk("Cast", [ins["seq_lens"]], "lens", to=TensorProto.INT64)
    else:
        lens = mk("Expand", [T, B], "lens")
    mask = mk("Less", [mk("Unsqueeze", [steps, const("ax1", [1])], "steps_col"), mk("Unsqueeze", [lens, const("ax0b", [0])], "lens_row")], "mask2")
    mask = mk("Unsqueeze", [mask, const("ax2", [2])], "mask")
    ys, hs, cs = [], [], []
    for d, dname in enumerate(dirs):
        q = f"d{d}_"
        idx = const(q + "idx", np.array(d, np.int64))
        take = lambda name, src: mk("Gather", [src, idx], q + name, axis=0)  # noqa: E731
        W, R, proj = take("W", ins["W"]), take("R", ins["R"]), take("proj", ins["proj"])
        xw = mk("MatMul", [ins["X"], mk("Transpose", [W], q + "Wt", perm=[1, 0])], q + "xw0")
        if ins["B"]:
            b = take("B", ins["B"])
            wb = mk("Slice", [b, const(q + "s0", [0]), const(q + "s1", [4 * H])], q + "Wb")
            rb = mk("Slice", [b, const(q + "s2", [4 * H]), const(q + "s3", [8 * H])], q + "Rb")
            xw = mk("Add", [xw, mk("Add", [wb, rb], q + "bsum")], q + "xw")
        body_prefix = f"{p}{q}"
        # The body refers to these outer-scope values by name.
        out.append(helper.make_node("Transpose", [R], [body_prefix + "Rt"], perm=[1, 0]))
        out.append(helper.make_node("Transpose", [proj], [body_prefix + "Pt"], perm=[1, 0]))
        peepholes = bool(ins["P"])
        if peepholes:
            pvec = take("P", ins["P"])
            for k, gate in enumerate(("Pi", "Po", "Pf")):
                out.append(helper.make_node("Slice", [pvec, const(q + f"p{k}a", [k * H]), const(q + f"p{k}b", [(k + 1) * H])], [body_prefix + gate]))
        def zeros(name: str, size: str) -> str:
            dims = mk("Concat", [B, size], q + name + "_shape", axis=0)
            return mk("ConstantOfShape", [dims], q + name, value=numpy_helper.from_array(np.zeros(1, _np_dtype(elem))))

        proj_size = mk("Slice", [mk("Shape", [proj], q + "proj_shape"), const(q + "ps0", [0]), const(q + "ps1", [1])], q + "proj_size")
        h0 = take("h0", ins["h0"]) if ins["h0"] else zeros("h0_zero", proj_size)
        c0 = take("c0", ins["c0"]) if ins["c0"] else zeros("c0_zero", const(q + "hidden", [H]))
        rev = 1 if dname == "reverse" else 0
        scan_outs = [p + q + "h_last", p + q + "c_last", p + q + "y"]
        out.append(
            helper.make_node(
                "Scan",
                [h0, c0, xw, mask],
                scan_outs,
                num_scan_inputs=2,
                scan_input_directions=[rev, rev],
                scan_output_directions=[rev],
                body=_scan_body(body_prefix, elem, peepholes),
            )
        )
        ys.append(scan_outs[2])
        hs.append(mk("Unsqueeze", [scan_outs[0], const(q + "u0", [0])], q + "h_n"))
        cs.append(mk("Unsqueeze", [scan_outs[1], const(q + "u1", [0])], q + "c_n"))
    names = list(node.output) + [""] * (3 - len(node.output))
    for target, parts, axis in ((names[0], ys, 2), (names[1], hs, 0), (names[2], cs, 0)):
        if target:
            out.append(helper.make_node("Concat", parts, [target], axis=axis) if len(parts) > 1 else helper.make_node("Identity", parts, [target]))
    return const_nodes + out


def _np_dtype(elem: int) -> np.dtype:
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(elem)


def lower_projections(model: Any) -> LowerResult:
    """Replace every LSTMProjected node of the main graph, in place."""
    from onnx import TensorProto

    result = LowerResult()
    graph = model.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    types.update({init.name: init.data_type for init in graph.initializer})
    new_nodes = []
    for node in graph.node:
        if node.domain == DOMAIN and node.op_type == LSTM_PROJECTED:
            elem = types.get(node.input[1]) or types.get(node.input[0]) or TensorProto.FLOAT
            new_nodes.extend(_lower_node(node, elem))
            result.lowered.append(node.name or LSTM_PROJECTED)
        else:
            new_nodes.append(node)
    if result:
        del graph.node[:]
        graph.node.extend(new_nodes)
        keep = [o for o in model.opset_import if o.domain != DOMAIN]
        del model.opset_import[:]
        model.opset_import.extend(keep)
    return result
