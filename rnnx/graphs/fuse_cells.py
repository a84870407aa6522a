"""Recognise LSTM and GRU cells that an exporter decomposed into elementwise ops; make each a
native one-step node (which :mod:`rnnx.graphs.fuse_steps` then joins over time).

LSTM rules, per candidate (a ``Split`` into 4 equal parts along the last axis):
- the Split's input is a sum of linear terms and constant biases: ``Gemm(t, W, b)``
  (alpha = beta = 1, transA = 0), ``MatMul(t, W)``, with W and b constants; exactly two
  distinct tensors are multiplied, one by a (4H, H) matrix (the state h) and one by a
  (4H, I) matrix (the input x; when I = H, the one read by ``Gather`` is x);
- gates are recognised by their role, not their position: one part goes through Tanh
  (the candidate g) and three through Sigmoid; ``c' = f*c + i*g`` and ``h' = o*tanh(c')``
  name i (multiplied with g), f (with the old c) and o (with tanh c');
- nothing inside the cell is used outside it, except h' and c'.

GRU rules, per candidate (a ``Tanh`` whose input is ``Add(a, Mul(b, r))``), as PyTorch's
GRUCell decomposes (reset after the recurrent product, ONNX ``linear_before_reset=1``):
- ``a`` and ``b`` are parts of two 3-way Splits, of a constant linear map of x (plus bias)
  and of h (plus bias); r = Sigmoid(x part + h part) at one position, z at the other;
- ``h' = (h - n) * z + n``; nothing else inside the cell is used outside it.

A candidate that breaks a rule is left alone and the result says which rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.layouts.onnx import GATE_ORDER
from rnnx.graphs.index import GraphIndex, graphs, rewrite


@dataclass
class CellFuseResult:
    fused: list[str] = field(default_factory=list)
    left_alone: list[dict[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.fused)


def _terms(g: GraphIndex, name: str, depth: int = 0) -> list[tuple[str, Any]] | None:
    """A sum of linear terms as [("linear", (input, W_rows_by_in, origin)), ("bias", (vector, origin)),
    ("node", node)]; equal origins mean equal weights (the constant's digest and how W was cut
    from it), so steps of one cell are recognised without comparing their weights."""
    node = g.producer.get(name)
    if name in g.constants:
        return [("bias", (g.constants[name], g.digest(name)))]
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
        transB = bool(g.attr(node, "transB", 0))
        W = W if transB else W.T
        out = _linear(g, node.input[0], W, (g.digest(node.input[1]), transB)) + [("node", node)]
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in g.constants:
                return None
            out.append(("bias", (g.constants[node.input[2]], g.digest(node.input[2]))))
        return out
    if node.op_type == "MatMul" and node.input[1] in g.constants:
        return _linear(g, node.input[0], g.constants[node.input[1]].T, (g.digest(node.input[1]), False)) + [("node", node)]
    return None


def _linear(g: GraphIndex, name: str, W: np.ndarray, origin: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """``W @ name`` as linear terms; a product over Concat(x, h) is split into one per part
    (TensorFlow-style cells), using the parts' sizes from shape inference."""
    concat = g.prod(name, "Concat")
    if concat is None or g.attr(concat, "axis") not in (1, -1):
        return [("linear", (name, W, origin))]
    sizes = [g.last_dim.get(i) for i in concat.input]
    if None in sizes or sum(sizes) != W.shape[1]:  # type: ignore[arg-type]
        return [("linear", (name, W, origin))]
    bounds = np.cumsum([0, *sizes])
    return [("linear", (i, W[:, a:b], (*origin, int(a), int(b)))) for i, a, b in zip(concat.input, bounds[:-1], bounds[1:])] + [("node", concat)]


def _single_consumer(g: GraphIndex, name: str, op_type: str) -> Any:
    users = g.consumers.get(name, [])
    return users[0] if len(users) == 1 and users[0].op_type == op_type and name not in g.outputs else None


def _gate_parts(g: GraphIndex, node: Any) -> tuple[str, list[str], list[Any]] | None:
    """(gate pre-activations, its 4 parts in position order, the nodes that cut it): a Split
    into 4 along the last axis, or 4 Slices of one tensor covering it in equal pieces."""
    if node.op_type == "Split" and len(node.output) == 4 and g.attr(node, "axis", 0) in (1, -1):
        return node.input[0], list(node.output), [node]
    if node.op_type != "Slice" or len(node.input) < 4:
        return None
    pre = node.input[0]
    slices = [u for u in g.consumers.get(pre, []) if u.op_type == "Slice"]
    if len(slices) != 4 or node is not slices[0]:  # each tensor is examined once, from its first Slice
        return None
    ranges = []
    for sl in slices:
        if len(sl.input) < 4 or any(i not in g.constants for i in sl.input[1:4]):
            return None
        starts, ends, axes = (np.atleast_1d(g.constants[i]) for i in sl.input[1:4])
        if len(starts) != 1 or int(axes[0]) not in (1, -1) or (len(sl.input) > 4 and sl.input[4] and int(np.atleast_1d(g.constants.get(sl.input[4], [1]))[0]) != 1):
            return None
        ranges.append((int(starts[0]), int(ends[0]), sl))
    ranges.sort(key=lambda r: r[0])
    width = ranges[0][1] - ranges[0][0]
    if any(r[0] != k * width or r[1] != (k + 1) * width for k, r in enumerate(ranges)):
        return None
    return pre, [r[2].output[0] for r in ranges], [r[2] for r in ranges]


def _match(g: GraphIndex, pre: str, parts: list[str], cutters: list[Any]) -> str | dict[str, Any]:
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
    terms = _terms(g, pre)
    if terms is None:
        return "the gates' input is not a sum of constant linear maps and biases"
    linear = [t for kind, t in terms if kind == "linear"]
    biases = [t[0] for kind, t in terms if kind == "bias"]
    bias_origins = tuple(sorted(t[1] for kind, t in terms if kind == "bias"))
    nodes = [t for kind, t in terms if kind == "node"]
    if len(linear) != 2:
        return f"{len(linear)} linear terms feed the gates, expected 2 (input and state)"
    H4 = linear[0][1].shape[0]
    H = H4 // 4
    if any(W.shape[0] != H4 for _, W, _ in linear) or any(np.asarray(b).shape[-1] != H4 for b in biases):
        return "the linear terms disagree on 4*hidden"
    hs = [t for t in linear if t[1].shape[1] == H]
    if len(hs) == 2:  # input size equals hidden size: the input is the one read by Gather
        hs = [t for t in linear if g.prod(t[0], "Gather") is None]
    if len(hs) != 1:
        return "cannot tell the input from the state"
    (h_prev, R, r_origin), ((x_t, W, w_origin),) = hs[0], [t for t in linear if t is not hs[0]]
    inner = [*cutters, *acts, mul_ig, add_c, mul_fc, tanh_c, mul_h, *nodes]
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
        "remove": [mul_h, add_c], "weights_key": ("LSTM", tuple(roles.items()), w_origin, r_origin, bias_origins),
    }


def _linear_of(g: GraphIndex, name: str) -> tuple[str, np.ndarray, np.ndarray | None, tuple[Any, ...]] | None:
    """(input, W rows-by-input, bias, origin of W and bias) of a constant linear map feeding ``name``."""
    terms = _terms(g, name)
    if terms is None:
        return None
    linear = [t for kind, t in terms if kind == "linear"]
    biases = [np.asarray(t[0], dtype=np.float64) for kind, t in terms if kind == "bias"]
    if len(linear) != 1:
        return None
    origin = (linear[0][2], tuple(sorted(t[1] for kind, t in terms if kind == "bias")))
    return linear[0][0], linear[0][1], (np.sum(biases, axis=0) if biases else None), origin


def _split_part(g: GraphIndex, name: str) -> tuple[Any, int] | None:
    node = g.producer.get(name)
    if node is None or node.op_type != "Split" or len(node.output) != 3:
        return None
    return node, list(node.output).index(name)


def _match_gru(g: GraphIndex, tanh: Any) -> str | dict[str, Any]:
    add_n = g.prod(tanh.input[0], "Add")
    if add_n is None:
        return "not a GRU candidate"
    for a, m in (add_n.input, reversed(add_n.input)):
        mul = g.prod(m, "Mul")
        if mul is not None and _split_part(g, a) is not None:
            break
    else:
        return "not a GRU candidate"
    sx, k_n = _split_part(g, a)  # type: ignore[misc]
    parts = [(_split_part(g, i), g.prod(i, "Sigmoid")) for i in mul.input]
    hn = next((p for p, _ in parts if p is not None), None)
    r_sig = next((s for _, s in parts if s is not None), None)
    if hn is None or r_sig is None or hn[1] != k_n:
        return "the candidate's recurrent part is not r * (h part)"
    sh = hn[0]

    def gate(sig: Any) -> int | None:
        add = g.prod(sig.input[0], "Add")
        if add is None:
            return None
        found = [_split_part(g, i) for i in add.input]
        if any(f is None for f in found) or {id(f[0]) for f in found} != {id(sx), id(sh)} or found[0][1] != found[1][1]:  # type: ignore[index]
            return None
        return found[0][1]  # type: ignore[index]

    k_r = gate(r_sig)
    z_sigs = [u for p in sh.output for add in g.consumers.get(p, []) if add.op_type == "Add" for u in g.consumers.get(add.output[0], []) if u.op_type == "Sigmoid" and u is not r_sig]
    if k_r is None or len(z_sigs) != 1 or gate(z_sigs[0]) is None:
        return "r and z are not sigmoids of (x part + h part)"
    z_sig, k_z = z_sigs[0], gate(z_sigs[0])
    lin_x, lin_h = _linear_of(g, sx.input[0]), _linear_of(g, sh.input[0])
    if lin_x is None or lin_h is None:
        return "the gates' inputs are not constant linear maps"
    h_prev = lin_h[0]
    n = tanh.output[0]
    def same_h(name: str) -> bool:  # exporters may repeat a constant initial state under two names
        if name == h_prev:
            return True
        a, b = g.constants.get(name), g.constants.get(h_prev)
        return a is not None and b is not None and a.shape == b.shape and bool(np.array_equal(a, b))

    sub = next((u for u in g.consumers.get(n, []) if u.op_type == "Sub" and u.input[1] == n and same_h(u.input[0])), None)
    mul_z = _single_consumer(g, sub.output[0], "Mul") if sub is not None else None
    out = _single_consumer(g, mul_z.output[0], "Add") if mul_z is not None else None
    if mul_z is None or z_sig.output[0] not in mul_z.input or out is None or n not in out.input:
        return "h' is not (h - n) * z + n"
    H = lin_h[1].shape[1]
    if lin_h[1].shape[0] != 3 * H or lin_x[1].shape[0] != 3 * H:
        return "the linear maps are not 3*hidden wide"
    inner = [sx, sh, tanh, add_n, mul, r_sig, z_sig, sub, mul_z, out, g.producer[r_sig.input[0]], g.producer[z_sig.input[0]], g.producer[sx.input[0]], g.producer[sh.input[0]]]
    inner_ids = {id(x) for x in inner}
    for name in {o for x in inner for o in x.output} - {out.output[0]}:
        if name in g.outputs or any(id(u) not in inner_ids for u in g.consumers.get(name, [])):
            return f"{name} is used outside the cell"
    roles = {"z": k_z, "r": k_r, "n": k_n}
    rows = np.concatenate([np.arange(roles[gt] * H, (roles[gt] + 1) * H) for gt in GATE_ORDER["gru"]])
    zeros = np.zeros(3 * H)
    bx = lin_x[2] if lin_x[2] is not None else zeros
    bh = lin_h[2] if lin_h[2] is not None else zeros
    W = lin_x[1]
    return {
        "x": lin_x[0], "h": h_prev, "h_new": out.output[0], "H": H,
        "W": W[rows], "R": lin_h[1][rows], "B": np.concatenate([bx[rows], bh[rows]]).astype(W.dtype),
        "remove": [out], "weights_key": ("GRU", tuple(roles.items()), lin_x[3], lin_h[3]),
    }


def fuse_cells(model: Any) -> CellFuseResult:
    """Replace decomposed LSTM and GRU cells, in the main graph and in If/Loop/Scan bodies,
    by one-step native nodes, in place."""
    result = CellFuseResult()
    names = itertools.count()
    for graph, outer in list(graphs(model.graph)):
        _fuse_cells_in(GraphIndex(graph, outer), result, names)
    return result


def _fuse_cells_in(g: GraphIndex, result: CellFuseResult, names: Iterator[int]) -> None:
    from onnx import helper, numpy_helper

    fused_before = len(result.fused)
    shared: dict[tuple[bytes, ...], str] = {}  # steps of one cell share one set of weights, so fuse_steps can chain them
    new_nodes, removed, inits = [], set(), []
    for anchor in list(g.graph.node):
        gates = _gate_parts(g, anchor)
        if gates is not None:
            match = _match(g, *gates)
        elif anchor.op_type == "Tanh":
            match = _match_gru(g, anchor)
            if match == "not a GRU candidate":
                continue
        else:
            continue
        if isinstance(match, str):
            result.left_alone.append({"node": anchor.name or anchor.output[0], "reason": match})
            continue
        op = "LSTM" if "c" in match else "GRU"
        prefix = shared.get(match["weights_key"])
        if prefix is None:
            prefix = f"{op.lower()}_cell{next(names)}"
            shared[match["weights_key"]] = prefix
            for key in ("W", "R", "B"):
                inits.append(numpy_helper.from_array(match[key][None], f"{prefix}_{key}"))
            inits.append(numpy_helper.from_array(np.array([0], np.int64), f"{prefix}_axis0"))
        step = f"{anchor.name or anchor.output[0]}_step"
        ax = f"{prefix}_axis0"
        ins = [f"{step}_x", f"{prefix}_W", f"{prefix}_R", f"{prefix}_B", "", f"{step}_h"]
        new_nodes += [helper.make_node("Unsqueeze", [match["x"], ax], [f"{step}_x"]), helper.make_node("Unsqueeze", [match["h"], ax], [f"{step}_h"])]
        if op == "LSTM":
            new_nodes += [
                helper.make_node("Unsqueeze", [match["c"], ax], [f"{step}_c"]),
                helper.make_node("LSTM", ins + [f"{step}_c"], ["", f"{step}_Y_h", f"{step}_Y_c"], name=step, hidden_size=match["H"]),
                helper.make_node("Squeeze", [f"{step}_Y_c", ax], [match["c_new"]]),
            ]
        else:
            new_nodes.append(helper.make_node("GRU", ins, ["", f"{step}_Y_h"], name=step, hidden_size=match["H"], linear_before_reset=1))
        new_nodes.append(helper.make_node("Squeeze", [f"{step}_Y_h", ax], [match["h_new"]]))
        removed |= {id(n) for n in match["remove"]}
        result.fused.append(step)
    if len(result.fused) > fused_before:
        rewrite(g.graph, removed, new_nodes, inits)
