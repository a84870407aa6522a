"""Recognise LSTM cells that an exporter decomposed into elementwise ops (the GRU and plain RNN
matchers, and the vocabulary every matcher shares, are :mod:`rnnx.graphs.cell_match`).

LSTM, anchored at a ``Split`` into 4 equal parts along the last axis (or 4 ``Slice``\\ s
covering one tensor in equal pieces, their bounds constants or computed from its width as
torch.jit.script's ``chunk`` does), rules:
- ``lstm.activations``: each part goes through one Sigmoid, Tanh or hard sigmoid written out
  (``clip(x + b, 0, 1/a) * a``), exactly one through Tanh (the cell candidate g), the other
  three through the same function;
- ``lstm.cell_update``: ``c' = f*c + i*g``, naming i (multiplied with g) and f (with the old c);
- ``lstm.output``: ``h' = o*tanh(c')``, naming o;
- ``lstm.linear_inputs``: the Split's input is a sum of constant linear maps and biases
  (:mod:`rnnx.graphs.linear_terms`) of exactly two tensors, one by a (4H, H) matrix (the
  state h) and one by a (4H, I) matrix (the input x; when I = H, rule ``lstm.state``, told
  apart by structure: :func:`pick_state`);
- ``lstm.private``: nothing inside the cell is used outside it, except h' and c'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.graphs.cell_match import CellMatch, _single_consumer, _used_outside, pick_state
from rnnx.graphs.index import GraphIndex
from rnnx.graphs.linear_terms import linear_sum
from rnnx.pass_result import Declined


def _int_value(g: GraphIndex, name: str, pre: str, width: int, depth: int = 0) -> np.ndarray | None:
    """An integer computed from constants and ``pre``'s last dimension (``width``), as
    torch.jit.script's ``chunk`` computes its Slice bounds: ``(Shape(pre)[1] + 3) // 4 * k``."""
    if name in g.constants:
        return np.atleast_1d(g.constants[name]).astype(np.int64)
    node = g.producer.get(name)
    if node is None or depth > 8:
        return None
    op = node.op_type
    if op == "Gather" and g.prod(node.input[0], "Shape") is not None and g.prod(node.input[0], "Shape").input[0] == pre:
        k = g.constants.get(node.input[1])
        return np.array([width], np.int64) if k is not None and int(np.asarray(k).reshape(-1)[0]) in (1, -1) else None
    found = [_int_value(g, i, pre, width, depth + 1) for i in node.input if i]
    args = [a for a in found if a is not None]
    if not found or len(args) != len(found):
        return None
    if op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape"):
        return args[0].reshape(-1)
    if op in ("Add", "Sub", "Mul", "Div") and len(args) == 2:
        a, b = args
        if op == "Div":
            return None if np.any(b == 0) else a // b
        return {"Add": a + b, "Sub": a - b, "Mul": a * b}[op]
    return None


@dataclass(frozen=True)
class _Act:
    """A gate's activation as the LSTM rules read it: its kind and the tensor it gives."""

    op_type: str
    out: str

    @property
    def output(self) -> list[str]:
        return [self.out]


def _gate_activation(g: GraphIndex, part: str) -> tuple[str, str, list[Any], tuple[float, float] | None] | None:
    """(result, function, nodes, (alpha, beta)) of the activation that a gate's part goes
    through alone: Sigmoid, Tanh, or a hard sigmoid written out as ``clip(x + b, 0, 1/a) * a``
    (Keras 3's hard_sigmoid is ``relu6(x + 3) / 6``: ONNX HardSigmoid, alpha 1/6, beta 0.5)."""
    for op in ("Sigmoid", "Tanh"):
        node = _single_consumer(g, part, op)
        if node is not None:
            return node.output[0], op, [node], None
    add = _single_consumer(g, part, "Add")
    clip = _single_consumer(g, add.output[0], "Clip") if add is not None else None
    mul = _single_consumer(g, clip.output[0], "Mul") if clip is not None else None
    if add is None or clip is None or mul is None:
        return None
    shift = next((g.constants.get(i) for i in add.input if i != part), None)
    scale = next((g.constants.get(i) for i in mul.input if i != clip.output[0]), None)
    bounds = [g.constants.get(i) if i else None for i in clip.input[1:3]]
    if shift is None or scale is None or len(bounds) != 2 or any(b is None for b in bounds) or any(np.asarray(v).size != 1 for v in (shift, scale, *bounds)):
        return None
    a, b, lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in (scale, shift, *bounds))
    if lo != 0.0 or a <= 0 or abs(hi * a - 1.0) > 1e-6:
        return None
    return mul.output[0], "HardSigmoid", [add, clip, mul], (a, b * a)


def lstm_gate_parts(g: GraphIndex, node: Any) -> tuple[str, list[str], list[Any]] | None:
    """The LSTM pattern at ``node``: (gate pre-activations, its 4 parts in position order, the
    nodes that cut it), or None when ``node`` is no candidate."""
    if node.op_type == "Split" and len(node.output) == 4 and g.attr(node, "axis", 0) in (1, -1):
        return node.input[0], list(node.output), [node]
    if node.op_type != "Slice" or len(node.input) < 4:
        return None
    pre = node.input[0]
    slices = [u for u in g.consumers.get(pre, []) if u.op_type == "Slice"]
    if len(slices) != 4 or node is not slices[0]:  # each tensor is examined once, from its first Slice
        return None
    ranges = []
    width_of_pre: list[int | None] = []  # read once, only when a bound is computed
    for sl in slices:
        if len(sl.input) < 4:
            return None
        bounds = [np.atleast_1d(g.constants[i]) if i in g.constants else None for i in sl.input[1:4]]
        if any(b is None for b in bounds):
            if not width_of_pre:
                found = linear_sum(g, pre)
                width_of_pre.append(int(found.linear[0].W.shape[0]) if found is not None and found.linear else None)
            if width_of_pre[0] is None:
                return None
            bounds = [b if b is not None else _int_value(g, i, pre, width_of_pre[0]) for b, i in zip(bounds, sl.input[1:4])]
            if any(b is None for b in bounds):
                return None
        starts, ends, axes = [b for b in bounds if b is not None]  # all three: a missing one returned above
        if len(starts) != 1 or int(axes[0]) not in (1, -1) or (len(sl.input) > 4 and sl.input[4] and int(np.atleast_1d(g.constants.get(sl.input[4], [1]))[0]) != 1):
            return None
        ranges.append((int(starts[0]), int(ends[0]), sl))
    ranges.sort(key=lambda r: r[0])
    width = ranges[0][1] - ranges[0][0]
    if any(r[0] != k * width or r[1] != (k + 1) * width for k, r in enumerate(ranges)):
        return None
    return pre, [r[2].output[0] for r in ranges], [r[2] for r in ranges]


def match_lstm(g: GraphIndex, pre: str, parts: list[str], cutters: list[Any]) -> CellMatch | Declined:
    """The checks of an LSTM candidate found by :func:`lstm_gate_parts`."""
    found_acts = [_gate_activation(g, p) for p in parts]
    gate_acts = [a for a in found_acts if a is not None]
    if len(gate_acts) != len(found_acts):
        return Declined("lstm.activations", "a gate is not one Sigmoid, Tanh or hard sigmoid (clip(x + b, 0, 1/a) * a)")
    acts = [_Act(a[1], a[0]) for a in gate_acts]
    tanh = [k for k, a in enumerate(acts) if a.op_type == "Tanh"]
    if len(tanh) != 1:
        return Declined("lstm.activations", f"{len(tanh)} gates go through Tanh, expected 1 (the cell candidate)")
    k_g = tanh[0]
    kinds = {(gate_acts[k][1], gate_acts[k][3]) for k in range(4) if k != k_g}
    if len(kinds) != 1:
        return Declined("lstm.activations", "the i, f and o gates go through different functions; ONNX's LSTM applies one to all three")
    (f_act, f_params), = kinds
    g_out = acts[k_g].output[0]
    mul_ig = _single_consumer(g, g_out, "Mul")
    if mul_ig is None:
        return Declined("lstm.cell_update", "the candidate is not multiplied once")
    i_out = next((x for x in mul_ig.input if x != g_out), None)
    k_i = next((k for k, a in enumerate(acts) if a.output[0] == i_out), None)
    add_c = _single_consumer(g, mul_ig.output[0], "Add")
    if k_i is None or add_c is None:
        return Declined("lstm.cell_update", "i*g is not added to f*c")
    mul_fc = g.producer.get(next((x for x in add_c.input if x != mul_ig.output[0]), ""))
    if mul_fc is None or mul_fc.op_type != "Mul":
        return Declined("lstm.cell_update", "the old cell state is not multiplied by a gate")
    sig_outs = {a.output[0]: k for k, a in enumerate(acts) if k not in (k_g, k_i)}
    f_in = [x for x in mul_fc.input if x in sig_outs]
    if len(f_in) != 1:
        return Declined("lstm.cell_update", "f*c has no forget gate")
    k_f = sig_outs[f_in[0]]
    c_prev = next(x for x in mul_fc.input if x != f_in[0])
    c_new = add_c.output[0]
    tanh_c = next((u for u in g.consumers.get(c_new, []) if u.op_type == "Tanh"), None)
    mul_h = _single_consumer(g, tanh_c.output[0], "Mul") if tanh_c is not None else None
    if mul_h is None:
        return Declined("lstm.output", "the new cell state does not feed o*tanh(c)")
    k_o = next((k for k in sig_outs.values() if k != k_f), None)
    if k_o is None or acts[k_o].output[0] not in mul_h.input:
        return Declined("lstm.output", "h is not o*tanh(c)")
    found = linear_sum(g, pre)
    if found is None:
        return Declined("lstm.linear_inputs", "the gates' input is not a sum of constant linear maps and biases")
    if len(found.linear) != 2:
        return Declined("lstm.linear_inputs", f"{len(found.linear)} linear terms feed the gates, expected 2 (input and state)")
    H4 = found.linear[0].W.shape[0]
    H = H4 // 4
    if any(t.W.shape[0] != H4 for t in found.linear) or any(np.asarray(b).shape[-1] != H4 for b in found.biases):
        return Declined("lstm.linear_inputs", "the linear terms disagree on 4*hidden")
    state = pick_state(g, found.linear, H, "lstm", mul_h.output[0], (c_prev, c_new))
    if isinstance(state, Declined):
        return state
    (inp,) = [t for t in found.linear if t is not state]
    inner = [*cutters, *(n for a in gate_acts for n in a[2]), mul_ig, add_c, mul_fc, tanh_c, mul_h, *found.nodes]
    leak = _used_outside(g, inner, {c_new, mul_h.output[0]})
    if leak is not None:
        return Declined("lstm.private", f"{leak} is used outside the cell")
    positions = {"i": k_i, "f": k_f, "g": k_g, "o": k_o}
    activations = () if f_act == "Sigmoid" else (f_act, "Tanh", "Tanh")
    return CellMatch(
        op="LSTM", x=inp.input, h=state.input, c=c_prev, h_new=mul_h.output[0], c_new=c_new, hidden=H,
        W=inp.W, R=state.W, biases=(found.bias(H4), np.zeros(H4)), positions=positions, remove=(mul_h, add_c),
        weights_key=("LSTM", activations, f_params, tuple(sorted(positions.items())), inp.origin, state.origin, tuple(sorted(found.bias_origins))),
        activations=activations, activation_params=f_params,
    )
