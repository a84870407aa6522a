"""Per-step work on a stepped cell's h, so that a chain of steps can still fuse.

A teacher-forced decoder applies the same row-wise operations to every step's h (a
Linear, an activation, a layer norm) and stacks the results over time. Such a loop is a
recurrence followed by those operations applied to all steps at once. Rules:

- ``per_step.independent``: step k's *region* is every node reached from its h (``Squeeze(Y_h)``), up to an
  ``Unsqueeze`` feeding only a ``Concat`` on the same axis, 0 or 1 (the stack over time,
  time-major or batch-first), and it reaches no later step;
- ``per_step.graph_output``: no region result is a graph output;
- ``per_step.row_wise``: each region node is row-wise on (batch, features): elementwise with constants that
  broadcast along rows, ``MatMul``/``Gemm`` against constant weights, ``LayerNormalization``,
  ``Softmax`` and ``Concat`` over the last axis; every input is the step's h, the region's
  own result, or a constant;
- ``per_step.same_computation``: every step's region is the same computation (op types,
  attributes, constants, wiring);
- ``per_step.stack``: each stack takes every step's result once, in order.

The rewrite applies one copy of the region to the fused node's Y flattened to
(seq*batch, features) and reshapes the result to (seq, batch, ...), which is what the
stack held. Regions that break a rule leave the chain alone, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.graphs.index import GraphIndex
from rnnx.pass_result import Declined

_UNARY = {
    "Relu", "Tanh", "Sigmoid", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Exp",
    "Log", "Abs", "Neg", "Sqrt", "Reciprocal", "Identity", "Cast", "Clip", "Erf", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos",
    "Mish", "PRelu", "ThresholdedRelu", "Dropout",
}
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less", "Greater", "And", "Or"}
_LAST_AXIS = {"LayerNormalization", "Softmax", "LogSoftmax", "Hardmax", "Concat"}


@dataclass
class PerStep:
    """The region of every step (node lists, in graph order) and the stacks they feed."""

    template: list[Any] = field(default_factory=list)  # step 0's region
    regions: list[list[Any]] = field(default_factory=list)
    terminals: list[tuple[str, Any]] = field(default_factory=list)  # step 0's (result tensor, stack Concat)
    stacked: set[int] = field(default_factory=set)  # ids of every step's Unsqueeze into a stack
    roots: set[int] = field(default_factory=set)  # ids of region nodes that read a step's h

    @property
    def op_types(self) -> list[str]:
        return [n.op_type for n in self.template]


def _is_stack_unsqueeze(g: GraphIndex, node: Any) -> Any:
    """The Concat of ``torch.stack(results, 0 or 1)`` that this Unsqueeze feeds, if it is one."""
    if node.op_type != "Unsqueeze":
        return None
    axes = g.axes(node)
    if axes is None or axes not in ([0], [1]):
        return None
    users = g.consumers.get(node.output[0], [])
    if len(users) == 1 and users[0].op_type == "Concat" and g.attr(users[0], "axis") == axes[0] and node.output[0] not in g.outputs:
        return users[0]
    return None


def _row_wise(g: GraphIndex, node: Any, inside: set[str]) -> str | None:
    """None if ``node`` acts on each row alone, else why not."""
    op = node.op_type
    consts = [i for i in node.input if i and i not in inside]
    for i in consts:
        if i not in g.constants:
            return f"per-step {op} reads {i!r}, which is neither the step's h nor a constant"
    if op in _UNARY:
        return None
    if op in _ELEMENTWISE:
        for i in consts:
            c = g.constants[i]
            if c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1):
                return f"per-step {op} broadcasts a constant of shape {list(c.shape)} against the batch"
        return None
    if op == "MatMul":
        return None if node.input[0] in inside and node.input[1] in consts and g.constants[node.input[1]].ndim == 2 else "per-step MatMul is not h @ constant"
    if op == "Gemm":
        ok = node.input[0] in inside and not g.attr(node, "transA", 0) and node.input[1] in consts
        bias = g.constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        return None if ok and (bias is None or bias.ndim <= 1 or bias.shape[0] == 1) else "per-step Gemm is not h @ constant + constant"
    if op in _LAST_AXIS:
        axis = g.attr(node, "axis", -1)
        if op == "Concat" and consts:
            return "per-step Concat joins constants"
        return None if axis in (-1, 1) else f"per-step {op} works on axis {axis}, not the features"
    return f"per-step {op} is not known to act on each row alone"


def _region_from(g: GraphIndex, h: str, chain_ids: set[int], k: int) -> tuple[list[Any], list[tuple[str, Any, Any]]] | Declined:
    """Step k's region (graph order) and its terminals (result, Unsqueeze, Concat)."""
    region: dict[int, Any] = {}
    terminals: list[tuple[str, Any, Any]] = []
    escapes: list[Declined] = []
    inside = {h}
    frontier = [h]
    while frontier:
        t = frontier.pop()
        for user in g.consumers.get(t, []):
            if id(user) in region:
                continue
            if t == h and user.op_type == "Unsqueeze" and g.axes(user) in ([0], [1]):
                continue  # into the next step or the stack of h: the chain's own business
            if id(user) in chain_ids:
                return Declined("per_step.independent", f"step {k}'s h reaches a later step's input through {user.op_type}: each step depends on the last one's result")
            concat = _is_stack_unsqueeze(g, user)
            if concat is not None:
                terminals.append((t, user, concat))
                continue
            region[id(user)] = user
            for o in user.output:
                if o:
                    if o in g.outputs:
                        escapes.append(Declined("per_step.graph_output", f"step {k}'s per-step {user.op_type} result is a graph output"))
                    inside.add(o)
                    frontier.append(o)
    nodes = sorted(region.values(), key=lambda n: g.position[id(n)])
    for n in nodes:
        why = _row_wise(g, n, inside)
        if why:
            return Declined("per_step.row_wise", f"step {k}: {why}")
    if escapes:
        return escapes[0]
    return nodes, terminals


def _signature(g: GraphIndex, nodes: list[Any], h: str) -> list[tuple[Any, ...]]:
    """The region's computation with its own tensor names abstracted away."""
    where: dict[str, tuple[int, int]] = {}
    for i, n in enumerate(nodes):
        for j, o in enumerate(n.output):
            where[o] = (i, j)
    sig = []
    for n in nodes:
        ins = tuple("h" if i == h else where.get(i, ("c", i)) for i in n.input)
        attrs = tuple(sorted((a.name, a.SerializeToString()) for a in n.attribute))
        sig.append((n.op_type, n.domain, ins, attrs, len(n.output)))
    return sig


def find_per_step(g: GraphIndex, hs: list[str], chain_ids: set[int]) -> PerStep | Declined | None:
    """The per-step regions of a chain whose steps' h are ``hs``; None if there are none."""
    T = len(hs)
    found = [_region_from(g, h, chain_ids, k) for k, h in enumerate(hs[:-1])]
    if all(not isinstance(f, Declined) and not f[0] for f in found):
        return None  # no step but the last is read: its h is the final state, which may go anywhere
    found.append(_region_from(g, hs[-1], chain_ids, T - 1))
    for f in found:
        if isinstance(f, Declined):
            return f
    regions = [f[0] for f in found]  # type: ignore[index]
    terminals = [f[1] for f in found]  # type: ignore[index]
    if not any(regions):
        return None
    template = _signature(g, regions[0], hs[0])
    for k in range(1, T):
        sig = _signature(g, regions[k], hs[k])
        # The last step's h may also feed the model's final output: its region may be larger.
        if sig != template and not (k == T - 1 and sig[: len(template)] == template):
            return Declined("per_step.same_computation", f"step {k}'s per-step operations differ from step 0's")
    per = PerStep(template=regions[0], regions=regions)
    for result, _, concat in terminals[0]:
        unsqueezes = []
        for k in range(T):
            match = [u for r, u, c in terminals[k] if c is concat]
            if len(match) != 1:
                return Declined("per_step.stack", f"the stack {concat.output[0]!r} does not take step {k}'s result exactly once")
            unsqueezes.append(match[0])
        if list(concat.input) != [u.output[0] for u in unsqueezes]:
            return Declined("per_step.stack", f"the stack {concat.output[0]!r} takes the steps' results in another order or with other tensors")
        per.terminals.append((result, concat))
        per.stacked |= {id(u) for u in unsqueezes}
    per.roots = {id(n) for region, h in zip(regions, hs) for n in region if h in n.input}
    return per


def hoist(per: PerStep, h0: str, rows_of: str, prefix: str) -> list[Any]:
    """One copy of step 0's region on ``rows_of`` (Y squeezed to (seq, batch, features)),
    flattened to rows and reshaped back into each stack's output."""
    from onnx import TensorProto, helper

    rows, shape, tb, target = f"{prefix}_rows", f"{prefix}_Yshape", f"{prefix}_seq_batch", f"{prefix}_rows_shape"
    consts = {f"{prefix}_{k}": v for k, v in (("zero", [0]), ("two", [2]), ("minus1", [-1]))}
    nodes = [helper.make_node("Constant", [], [k], value=helper.make_tensor(k, TensorProto.INT64, [1], np.array(v))) for k, v in consts.items()]
    zero, two, minus1 = consts
    nodes += [
        helper.make_node("Flatten", [rows_of], [rows], axis=2),
        helper.make_node("Shape", [rows_of], [shape]),
        helper.make_node("Slice", [shape, zero, two], [tb]),  # Shape's start/end attributes need opset 15
        helper.make_node("Concat", [tb, minus1], [target], axis=0),
    ]
    renamed = {h0: rows}
    for n in per.template:
        for o in n.output:
            if o:
                renamed[o] = f"{prefix}_{o}"
    for n in per.template:
        copy = helper.make_node(n.op_type, [renamed.get(i, i) for i in n.input], [renamed.get(o, o) for o in n.output],
                                name=f"{prefix}_{n.name}", domain=n.domain or None)
        copy.attribute.extend(n.attribute)
        nodes.append(copy)
    for result, concat in per.terminals:
        out = concat.output[0]
        batch_first = helper.get_attribute_value(next(a for a in concat.attribute if a.name == "axis")) == 1
        steps = f"{prefix}_{out}_steps" if batch_first else out
        nodes.append(helper.make_node("Reshape", [renamed[result], target], [steps], name=f"{prefix}_{concat.name}_steps"))
        if batch_first:
            nodes.append(helper.make_node("Transpose", [steps], [out], perm=[1, 0, 2]))
    return nodes
