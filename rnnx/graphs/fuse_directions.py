"""Join a forward node and a node over the reversed sequence into one bidirectional node.

tf2onnx writes a Keras ``Bidirectional`` layer as two loops: one over S, one over
``ReverseSequence(S)`` whose outputs are reversed back. Once :mod:`rnnx.graphs.fuse_loops` has
made both native forward nodes, they are one bidirectional node. Rules (``directions.*``):
- ``directions.reversed_input``: the second node reads ``ReverseSequence(S)`` over axis 0 with
  every length S's full length, and the first reads S; same op, hidden size and attributes;
- ``directions.outputs``: each node's Y is read only as ``Squeeze(Y, [1])``, and the second's is
  reversed back (through transposes that cancel) by a ``ReverseSequence`` of full lengths; its
  Y_h (and Y_c) only as ``Squeeze(Y_h, [0])``.
The rewrite: one node with direction ``bidirectional``, weights stacked forward then reverse,
initial states concatenated; each direction's outputs are gathered from Y and Y_h.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.graphs.fuse_loops import _length_of
from rnnx.graphs.index import GraphIndex, rewrite
from rnnx.graphs.passes import Edit
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.pass_result import Declined, PassResult


@dataclass
class Bidirectional:
    """The ``forward`` node over ``source`` and the ``reverse`` one over its reversal (both
    ``op``), joined into the bidirectional node ``node``."""

    op: str
    node: str
    forward: str
    reverse: str
    source: str
    edit: Edit = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "node": self.node, "forward": self.forward, "reverse": self.reverse, "source": self.source}


def fuse_directions(model: Any) -> PassResult[Bidirectional]:
    """Join forward/reversed pairs of native nodes in the main graph, in place."""
    result: PassResult[Bidirectional] = PassResult()
    graph = model.graph
    if sum(n.op_type in NATIVE_OPS for n in graph.node) < 2 or not any(n.op_type == "ReverseSequence" for n in graph.node):
        return result
    g = GraphIndex(graph)
    natives = [n for n in g.nodes if n.op_type in NATIVE_OPS and n.domain in ("", "ai.onnx")]
    used: set[int] = set()
    new_nodes, removed, inits = [], set(), []
    for back in natives:
        rev = g.prod(back.input[0], "ReverseSequence")
        if rev is None or id(back) in used:
            continue
        S = rev.input[0]
        fwd = next((n for n in natives if n is not back and id(n) not in used and n.input[0] == S and n.op_type == back.op_type), None)
        if fwd is None:
            continue
        plan = _plan(g, fwd, back, rev, S)
        if isinstance(plan, Declined):
            result.left_alone.append(plan.at(back.name or back.output[1]))
            continue
        used |= {id(fwd), id(back)}
        new_nodes += plan.edit.nodes
        inits += plan.edit.initializers
        removed |= plan.edit.removed
        result.rewritten.append(plan)
    if removed:
        rewrite(graph, removed, new_nodes, inits)
    return result


def _attrs(g: GraphIndex, node: Any) -> dict[str, Any]:
    return {a.name: g.attr(node, a.name) for a in node.attribute if a.name != "direction"}


def _forward_plain(g: GraphIndex, node: Any) -> bool:
    return g.attr(node, "direction", b"forward") in (b"forward", "forward") and not (len(node.input) > 4 and node.input[4]) \
        and g.attr(node, "layout", 0) == 0


def _full_lengths(g: GraphIndex, rev: Any, S: str) -> bool:
    if g.attr(rev, "time_axis", 0) != 0 or g.attr(rev, "batch_axis", 1) != 1:
        return False
    name = rev.input[1]
    for _ in range(8):
        node = g.producer.get(name)
        if node is None:
            return False
        if node.op_type in ("Cast", "Identity", "Expand"):
            name = node.input[0]
            continue
        return _length_of(g, name, S)
    return False


def _only(g: GraphIndex, name: str, op: str, axes: list[int]) -> Any:
    users = g.consumers.get(name, [])
    ok = len(users) == 1 and users[0].op_type == op and g.axes(users[0]) == axes and name not in g.outputs
    return users[0] if ok else None


def _reversed_back(g: GraphIndex, name: str, S: str) -> Any:
    """The ReverseSequence that undoes the reversal of ``name`` ((T, B, H)), through transposes that cancel."""
    perm = [0, 1, 2]
    for _ in range(6):
        users = [u for u in g.consumers.get(name, []) if u.op_type != "Shape"]  # tf2onnx reads the lengths off the way back
        if len(users) != 1 or name in g.outputs:
            return None
        user = users[0]
        if user.op_type == "Transpose":
            p = list(g.attr(user, "perm", []))
            if len(p) != 3:
                return None
            perm = [perm[k] for k in p]
            name = user.output[0]
            continue
        if user.op_type == "ReverseSequence" and perm == [0, 1, 2] and user.input[0] == name and _full_lengths(g, user, S):
            return user
        return None
    return None


def _plan(g: GraphIndex, fwd: Any, back: Any, rev: Any, S: str) -> Bidirectional | Declined:
    from onnx import TensorProto, helper, numpy_helper

    if not (_forward_plain(g, fwd) and _forward_plain(g, back)) or _attrs(g, fwd) != _attrs(g, back):
        return Declined("directions.reversed_input", "the two nodes differ in attributes or are not plain forward nodes")
    if not _full_lengths(g, rev, S):
        return Declined("directions.reversed_input", "the sequence is reversed by lengths other than its full length")
    weights = []
    for k in (1, 2, 3):
        if fwd.input[k] not in g.constants or back.input[k] not in g.constants:
            return Declined("directions.reversed_input", "a direction's weights are not constants")
        weights.append(np.concatenate([g.constants[fwd.input[k]], g.constants[back.input[k]]]))
    is_lstm = fwd.op_type == "LSTM"
    y_f = _only(g, fwd.output[0], "Squeeze", [1])
    y_b = _only(g, back.output[0], "Squeeze", [1])
    undo = _reversed_back(g, y_b.output[0], S) if y_b is not None else None
    if (fwd.output[0] and g.consumers.get(fwd.output[0]) and y_f is None) or y_b is None or undo is None:
        return Declined("directions.outputs", "the reversed node's outputs are not reversed back whole, or a Y is read otherwise than squeezed")
    finals = []
    for node, k in ((fwd, 0), (back, 1)):
        for slot in ((1, 2) if is_lstm else (1,)):
            out = node.output[slot] if len(node.output) > slot else ""
            if out and g.consumers.get(out):
                sq = _only(g, out, "Squeeze", [0])
                if sq is None:
                    return Declined("directions.outputs", "a final state is read otherwise than squeezed")
                finals.append((sq, slot, k))
    prefix = f"{fwd.name or fwd.op_type}_bidirectional"
    names = [f"{prefix}_{k}" for k in "WRB"]
    inits = [numpy_helper.from_array(w, n) for w, n in zip(weights, names)]
    idx = {k: f"{prefix}_index{k}" for k in (0, 1)}
    nodes = [helper.make_node("Constant", [], [idx[k]], value=helper.make_tensor(idx[k], TensorProto.INT64, [], [k])) for k in (0, 1)]
    states = []
    for slot in ((5, 6) if is_lstm else (5,)):
        a = fwd.input[slot] if len(fwd.input) > slot else ""
        b = back.input[slot] if len(back.input) > slot else ""
        if bool(a) != bool(b):
            return Declined("directions.reversed_input", "one direction has an initial state and the other none")
        if a:
            nodes.append(helper.make_node("Concat", [a, b], [f"{prefix}_init{slot}"], axis=0))
        states.append(f"{prefix}_init{slot}" if a else "")
    outs = [f"{prefix}_Y", f"{prefix}_Y_h"] + ([f"{prefix}_Y_c"] if is_lstm else [])
    attrs = _attrs(g, fwd)
    for key in ("activations", "activation_alpha", "activation_beta"):  # ONNX lists them per direction
        if key in attrs:
            attrs[key] = list(attrs[key]) * 2
    nodes.append(helper.make_node(fwd.op_type, [S, *names, "", *states], outs, name=prefix, direction="bidirectional", **attrs))
    if y_f is not None:
        nodes.append(helper.make_node("Gather", [outs[0], idx[0]], [y_f.output[0]], axis=1))
    nodes.append(helper.make_node("Gather", [outs[0], idx[1]], [undo.output[0]], axis=1))
    for sq, slot, k in finals:
        nodes.append(helper.make_node("Gather", [outs[slot], idx[k]], [sq.output[0]], axis=0))
    # The reversed node and its way back fall dead once the reversal's output is written here
    # (what else reads them, the Shapes of its lengths, goes with it).
    dead = {id(fwd), id(undo)} | ({id(y_f)} if y_f is not None else set()) | {id(sq) for sq, _, _ in finals}
    return Bidirectional(fwd.op_type, prefix, fwd.name, back.name, S, Edit(nodes, inits, dead))
