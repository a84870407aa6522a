"""Recognise LSTM cells that an exporter decomposed into elementwise ops; make each a native
one-step LSTM node (which :mod:`rnnx.graphs.fuse_steps` then joins over time).

Rules, per candidate (a ``Split`` into 4 equal parts along the last axis):
- the Split's input is a sum of linear terms and constant biases: ``Gemm(t, W, b)``
  (alpha = beta = 1, transA = 0), ``MatMul(t, W)``, with W and b constants; exactly two
  distinct tensors are multiplied, one by a (4H, H) matrix (the state h) and one by a
  (4H, I) matrix (the input x; when I = H, the one read by ``Gather`` is x);
- gates are recognised by their role, not their position: one part goes through Tanh
  (the candidate g) and three through Sigmoid; ``c' = f*c + i*g`` and ``h' = o*tanh(c')``
  name i (multiplied with g), f (with the old c) and o (with tanh c');
- nothing inside the cell is used outside it, except h' and c'.
A candidate that breaks a rule is left alone and the result says which rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.formats.onnx import GATE_ORDER
from rnnx.graphs.index import GraphIndex, rewrite


@dataclass
class CellFuseResult:
    fused: list[str] = field(default_factory=list)
    left_alone: list[dict[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.fused)


def _terms(g: GraphIndex, name: str, depth: int = 0) -> list[tuple[str, Any]] | None:
    """A sum of linear terms as [("linear", (input, W_rows_by_in, node)), ("bias", vector)]."""
    node = g.producer.get(name)
    if name in g.constants:
        return [("bias", g.constants[name])]
    if node is None or depth > 4:
        return None
    if node.op_type == "Add":
        left, right = _terms(g, node.input[0], depth + 1), _terms(g, node.input[1], depth + 1)
        return None if left is None or right is None else left + right + [("node", node)]
    if node.op_type == "Gemm":
        if g.attr(node, "alpha", 1.0) != 1.0 or g.attr(node, "beta", 1.0) != 1.0 or g.attr(node, "transA", 0):
            return None
        if node.input[1] not in g.constants:
            return None
        W = g.constants[node.input[1]]
        W = W if g.attr(node, "transB", 0) else W.T
        out = [("linear", (node.input[0], W)), ("node", node)]
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in g.constants:
                return None
            out.append(("bias", g.constants[node.input[2]]))
        return out
    if node.op_type == "MatMul" and node.input[1] in g.constants:
        return [("linear", (node.input[0], g.constants[node.input[1]].T)), ("node", node)]
    return None


def _single_consumer(g: GraphIndex, name: str, op_type: str) -> Any:
    users = g.consumers.get(name, [])
    return users[0] if len(users) == 1 and users[0].op_type == op_type and name not in g.outputs else None


def _match(g: GraphIndex, split: Any) -> str | dict[str, Any]:
    parts = list(split.output)
    acts = [_single_consumer(g, p, "Sigmoid") or _single_consumer(g, p, "Tanh") for p in parts]
    if any(a is None for a in acts):
        return "a gate is not one Sigmoid or Tanh"
    tanh = [k for k, a in enumerate(acts) if a.op_type == "Tanh"]
    if len(tanh) != 1:
        return f"{len(tanh)} gates go through Tanh, expected 1 (the cell candidate)"
    k_g = tanh[0]
    g_out = acts[k_g].output[0]
    mul_ig = _single_consumer(g, g_out, "Mul")
    if mul_ig is None:
        return "the candidate is not multiplied once"
    i_out = next((x for x in mul_ig.input if x != g_out), None)
    k_i = next((k for k, a in enumerate(acts) if a.output[0] == i_out), None)
    add_c = _single_consumer(g, mul_ig.output[0], "Add")
    if k_i is None or add_c is None:
        return "i*g is not added to f*c"
    mul_fc = g.producer.get(next((x for x in add_c.input if x != mul_ig.output[0]), ""))
    if mul_fc is None or mul_fc.op_type != "Mul":
        return "the old cell state is not multiplied by a gate"
    sig_outs = {a.output[0]: k for k, a in enumerate(acts) if k not in (k_g, k_i)}
    f_in = [x for x in mul_fc.input if x in sig_outs]
    if len(f_in) != 1:
        return "f*c has no forget gate"
    k_f = sig_outs[f_in[0]]
    c_prev = next(x for x in mul_fc.input if x != f_in[0])
    c_new = add_c.output[0]
    c_users = g.consumers.get(c_new, [])
    tanh_c = next((u for u in c_users if u.op_type == "Tanh"), None)
    mul_h = _single_consumer(g, tanh_c.output[0], "Mul") if tanh_c is not None else None
    if mul_h is None:
        return "the new cell state does not feed o*tanh(c)"
    k_o = next((k for k in sig_outs.values() if k != k_f), None)
    if k_o is None or acts[k_o].output[0] not in mul_h.input:
        return "h is not o*tanh(c)"
    terms = _terms(g, split.input[0])
    if terms is None:
        return "the gates' input is not a sum of constant linear maps and biases"
    linear = [t for kind, t in terms if kind == "linear"]
    biases = [t for kind, t in terms if kind == "bias"]
    nodes = [t for kind, t in terms if kind == "node"]
    if len(linear) != 2:
        return f"{len(linear)} linear terms feed the gates, expected 2 (input and state)"
    H4 = linear[0][1].shape[0]
    H = H4 // 4
    if any(W.shape[0] != H4 for _, W in linear) or any(np.asarray(b).shape[-1] != H4 for b in biases):
        return "the linear terms disagree on 4*hidden"
    hs = [t for t in linear if t[1].shape[1] == H]
    if len(hs) == 2:  # input size equals hidden size: the input is the one read by Gather
        hs = [t for t in linear if g.prod(t[0], "Gather") is None]
    if len(hs) != 1:
        return "cannot tell the input from the state"
    (h_prev, R), ((x_t, W),) = hs[0], [t for t in linear if t is not hs[0]]
    inner = [split, *acts, mul_ig, add_c, mul_fc, tanh_c, mul_h, *nodes]
    inner_outs = {o for n in inner for o in n.output} - {c_new, mul_h.output[0]}
    inner_ids = {id(n) for n in inner}
    for name in inner_outs:
        if name in g.outputs or any(id(u) not in inner_ids for u in g.consumers.get(name, [])):
            return f"{name} is used outside the cell"
    roles = {"i": k_i, "f": k_f, "g": k_g, "o": k_o}
    onnx_rows = np.concatenate([np.arange(roles[gate] * H, (roles[gate] + 1) * H) for gate in GATE_ORDER["lstm"]])
    bias = np.sum([np.asarray(b, dtype=np.float64) for b in biases], axis=0) if biases else np.zeros(H4)
    return {
        "x": x_t, "h": h_prev, "c": c_prev, "h_new": mul_h.output[0], "c_new": c_new, "H": H,
        "W": W[onnx_rows], "R": R[onnx_rows], "B": np.concatenate([bias[onnx_rows], np.zeros(H4)]).astype(W.dtype),
        "remove": [mul_h, add_c], "weights_key": (W.tobytes(), R.tobytes(), bias.tobytes()),
    }


def fuse_cells(model: Any) -> CellFuseResult:
    """Replace decomposed LSTM cells of the main graph by one-step LSTM nodes, in place."""
    from onnx import helper, numpy_helper

    g = GraphIndex(model.graph)
    result = CellFuseResult()
    shared: dict[tuple[bytes, ...], str] = {}
    new_nodes, removed, inits = [], set(), []
    for split in list(g.graph.node):
        if split.op_type != "Split" or len(split.output) != 4 or g.attr(split, "axis", 0) not in (1, -1):
            continue
        match = _match(g, split)
        if isinstance(match, str):
            result.left_alone.append({"node": split.name or split.output[0], "reason": match})
            continue
        prefix = shared.get(match["weights_key"])
        if prefix is None:  # steps of one cell share one set of weights, so fuse_steps can chain them
            prefix = f"lstm_cell{len(shared)}"
            shared[match["weights_key"]] = prefix
            for key in ("W", "R", "B"):
                inits.append(numpy_helper.from_array(match[key][None], f"{prefix}_{key}"))
            inits.append(numpy_helper.from_array(np.array([0], np.int64), f"{prefix}_axis0"))
        step = f"{split.name or split.output[0]}_step"
        ax = f"{prefix}_axis0"
        new_nodes += [
            helper.make_node("Unsqueeze", [match["x"], ax], [f"{step}_x"]),
            helper.make_node("Unsqueeze", [match["h"], ax], [f"{step}_h"]),
            helper.make_node("Unsqueeze", [match["c"], ax], [f"{step}_c"]),
            helper.make_node(
                "LSTM", [f"{step}_x", f"{prefix}_W", f"{prefix}_R", f"{prefix}_B", "", f"{step}_h", f"{step}_c"],
                ["", f"{step}_Y_h", f"{step}_Y_c"], name=step, hidden_size=match["H"],
            ),
            helper.make_node("Squeeze", [f"{step}_Y_h", ax], [match["h_new"]]),
            helper.make_node("Squeeze", [f"{step}_Y_c", ax], [match["c_new"]]),
        ]
        removed |= {id(n) for n in match["remove"]}
        result.fused.append(step)
    if not result:
        return result
    rewrite(g.graph, removed, new_nodes, inits)
    return result
