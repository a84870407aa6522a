"""Make each ``Loop`` or ``Scan`` whose body is one recurrent step a native LSTM/GRU/RNN node
over the whole sequence (tf2onnx writes Keras GRUs and SimpleRNNs as such Loops).

:mod:`rnnx.graphs.fuse_cells` has already made the body's decomposed cell a one-step native
node N. Rules, for a Loop:
- ``loop.one_step``: the body holds exactly one native node, forward, without sequence_lens;
- ``loop.input``: N's X is ``Unsqueeze(Gather(S, t), [0])`` with S from outside the body and
  t the iteration number, or a carried counter that starts at 0 and adds 1 each step;
- ``loop.state``: N's initial_h (and initial_c) is ``Unsqueeze`` of a carried value whose next
  value is N's ``Squeeze(Y_h)`` (and ``Squeeze(Y_c)``);
- ``loop.carried``: every other carried value is passed on unchanged (tf2onnx carries the
  weights and the length so) or is the counter, whose final value nothing reads;
- ``loop.scan_outputs``: every scan output is the step's new h;
- ``loop.trip_count``: the trip count is S's length (``Shape(S)[0]``, however cast and cut),
  and the condition only compares the iteration or the counter with that length, so the loop
  runs exactly once per element of S.
For a Scan (``scan.*``): N's X is ``Unsqueeze`` of a scan input, its states are the Scan's
state variables, each scan output the new h; a reversed scan input (and output) gives a
reverse node, axis 1 a transpose.

The rewrite: ``Unsqueeze`` the initial states, the native node over S with N's weights and
attributes (moved out of the body), ``Squeeze(Y, [1])`` for the stacked outputs and
``Squeeze(Y_h)`` for the final state; values passed on unchanged are the initial ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.graphs.index import GraphIndex, carried_state, graphs, name_dynamic_axes, rewrite
from rnnx.graphs.passes import Edit
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.pass_result import Declined, PassResult

_SHAPE_PATH = ("Cast", "Squeeze", "Unsqueeze", "Identity", "Reshape")
_COND_OPS = ("Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Cast", "Identity")


@dataclass
class LoopFusion:
    """A Loop or Scan (``loop``, named ``replaced``) over one ``op`` step that becomes the native
    node ``node`` over ``source`` in ``direction``; ``initial``: each state's initial value."""

    op: str
    loop: str
    node: str
    source: str
    direction: str
    replaced: str
    initial: dict[str, str]
    edit: Edit = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "loop": self.loop, "node": self.node, "source": self.source, "direction": self.direction,
                "replaced": self.replaced, "initial": dict(self.initial)}


def fuse_loops(model: Any) -> PassResult[LoopFusion]:
    """Replace every Loop or Scan over one recurrent step, in the main graph and in bodies, in place."""
    result: PassResult[LoopFusion] = PassResult()
    for graph, outer in list(graphs(model.graph)):
        if not any(n.op_type in ("Loop", "Scan") for n in graph.node):
            continue  # indexing an 18,000-node unrolled graph for nothing would cost as much as fusing it
        g = GraphIndex(graph, outer)
        new_nodes, removed, inits = [], set(), []
        for node in g.nodes:
            if node.op_type not in ("Loop", "Scan") or node.domain not in ("", "ai.onnx"):
                continue
            plan = _plan(g, node)
            if plan is None:
                continue
            if isinstance(plan, Declined):
                result.left_alone.append(plan.at(node.name or node.output[0]))
                continue
            new_nodes += plan.edit.nodes
            inits += plan.edit.initializers
            removed |= plan.edit.removed
            result.rewritten.append(plan)
        if removed:
            rewrite(graph, removed, new_nodes, inits)
            if graph is model.graph:
                _name_dynamic_axes(g, model.graph, result.rewritten)
    return result


def _name_dynamic_axes(g: GraphIndex, graph: Any, fused: list[LoopFusion]) -> None:
    """Name the graph inputs' dynamic axes that the fused nodes read as time and batch ``seq``
    and ``batch`` (tf2onnx names them ``unk__N``); initial states' first axis is the batch."""
    inputs = {vi.name for vi in graph.input}
    axes: dict[tuple[str, int], str] = {}
    for info in fused:
        found = [0, 1]  # S's time and batch axes, followed back to a graph input
        name = info.source
        for _ in range(8):
            node = g.producer.get(name)
            if node is None or node.op_type not in ("Transpose", "ReverseSequence", "Identity", "Cast"):
                break
            if node.op_type == "Transpose":
                perm = list(g.attr(node, "perm", []))
                if len(perm) < 2:
                    break
                found = [perm[a] for a in found]
            name = node.input[0]
        if name in inputs:
            axes[(name, found[0])] = "seq"
            axes[(name, found[1])] = "batch"
        for state in info.initial.values():
            if state in inputs:
                axes[(state, 0)] = "batch"
    name_dynamic_axes(graph, axes)


def _native(body: GraphIndex) -> Any | Declined | None:
    natives = [n for n in body.nodes if n.op_type in NATIVE_OPS and n.domain in ("", "ai.onnx")]
    if not natives:
        return None
    if len(natives) > 1:
        return Declined("loop.one_step", f"the body holds {len(natives)} recurrent nodes, expected one step of one cell")
    n = natives[0]
    if body.attr(n, "direction", b"forward") not in (b"forward", "forward") or (len(n.input) > 4 and n.input[4]):
        return Declined("loop.one_step", "the body's step is not a plain forward step (a direction or sequence lengths)")
    return n


def _states(body: GraphIndex, n: Any, pairs: dict[str, str], rule: str) -> dict[str, tuple[str, str]] | Declined:
    """For 'h' (and 'c'): (carried body input, the body tensor that is its next value, N's Squeeze output)."""
    found = {}
    slots = {"h": (5, 1), "c": (6, 2)} if n.op_type == "LSTM" else {"h": (5, 1)}
    for key, (k_in, k_out) in slots.items():
        init = n.input[k_in] if len(n.input) > k_in else ""
        unsq = body.prod(init, "Unsqueeze") if init else None
        state = body.through(unsq.input[0]) if unsq is not None and body.axes(unsq) == [0] else None
        if state is None or state not in pairs:
            return Declined(rule, f"the step's initial_{key} is not a carried value of the loop")
        out = n.output[k_out] if len(n.output) > k_out else ""
        squeezes = [u for u in body.consumers.get(out, []) if u.op_type == "Squeeze" and body.axes(u) == [0]] if out else []
        if len(squeezes) != 1 or body.through(pairs[state]) != squeezes[0].output[0]:
            return Declined(rule, f"the loop does not carry the step's new {key} on as its next {key}")
        found[key] = (state, squeezes[0].output[0])
    return found


def _length_of(g: GraphIndex, name: str, S: str, depth: int = 0, axis: int | None = None) -> bool:
    """Whether ``name`` (in graph ``g``) is S's first dimension, however cast and cut: a
    ``Shape(X)[k]`` where X's axis k is S's axis 0 (:func:`_dim_source`)."""
    node = g.producer.get(name)
    if node is None or depth > 16:
        return False
    if node.op_type in _SHAPE_PATH:
        return _length_of(g, node.input[0], S, depth + 1, axis)
    if node.op_type == "Slice" and len(node.input) >= 3 and all(i in g.constants for i in node.input[1:3]) and axis is None:
        starts, ends = np.atleast_1d(g.constants[node.input[1]]), np.atleast_1d(g.constants[node.input[2]])
        axes = np.atleast_1d(g.constants[node.input[3]]) if len(node.input) > 3 and node.input[3] else np.array([0])
        if len(starts) == 1 and int(ends[0]) == int(starts[0]) + 1 and list(axes) == [0]:
            return _length_of(g, node.input[0], S, depth + 1, int(starts[0]))
        return False
    if node.op_type == "Gather" and node.input[1] in g.constants and axis is None and np.asarray(g.constants[node.input[1]]).size == 1:
        return _length_of(g, node.input[0], S, depth + 1, int(np.asarray(g.constants[node.input[1]]).reshape(-1)[0]))
    if node.op_type == "Shape" and axis is not None:
        start = g.attr(node, "start", 0)
        return _dim_source(g, node.input[0], axis + start) == _dim_source(g, S, 0)
    return False


def _dim_source(g: GraphIndex, name: str, axis: int) -> tuple[str, int]:
    """Where axis ``axis`` of ``name`` comes from: back through ops that keep (or permute) the
    axes (a transpose, a reversal along time, casts), and through a native node's Y to its X's
    time axis. Two tensors with the same source have that axis' size in common."""
    for _ in range(32):
        node = g.producer.get(name)
        if node is None:
            break
        op = node.op_type
        if op == "Transpose":
            perm = list(g.attr(node, "perm", []))
            if axis >= len(perm):
                break
            name, axis = node.input[0], perm[axis]
        elif op in ("ReverseSequence", "Identity", "Cast", "Relu", "Tanh", "Sigmoid"):
            name = node.input[0]
        elif op == "Squeeze" and g.axes(node) == [1] and axis == 0:
            name = node.input[0]
        elif op in NATIVE_OPS and name == node.output[0] and axis == 0 and g.attr(node, "layout", 0) == 0:
            name = node.input[0]
        else:
            break
    return name, axis


def _condition_ok(g: GraphIndex, body: GraphIndex, name: str, counters: set[str], outer_of: dict[str, str], S: str, depth: int = 0) -> bool:
    """Whether the body's condition ``name`` only compares counters with S's length (so that,
    with the trip count S's length, the loop runs exactly once per element of S)."""
    if depth > 16:
        return False
    if name in counters or (body is g and _length_of(g, name, S)):
        return True
    outer = outer_of.get(name, name if name not in body.producer and name not in body.constants else None)
    if outer is not None:
        return _length_of(g, outer, S) or outer in g.constants
    if name in body.constants:
        return True
    node = body.producer.get(name)
    if node is None or node.op_type not in _COND_OPS:
        return False
    return all(_condition_ok(g, body, i, counters, outer_of, S, depth + 1) for i in node.input)


def _counter(body: GraphIndex, g: GraphIndex, name: str, pairs: dict[str, str], outer_of: dict[str, str]) -> bool:
    """A carried value that starts at 0 and adds 1 each step."""
    nxt = body.prod(body.through(pairs.get(name, "")), "Add")
    start = g.constants.get(outer_of.get(name, ""))
    if nxt is None or start is None or int(np.asarray(start).reshape(-1)[0]) != 0:
        return False
    other = [i for i in nxt.input if i != name]
    return len(other) == 1 and other[0] in body.constants and int(np.asarray(body.constants[other[0]]).reshape(-1)[0]) == 1


def _plan(g: GraphIndex, loop: Any) -> LoopFusion | Declined | None:
    bound = carried_state(loop)
    if bound is None:
        return None
    body = GraphIndex(bound.body, {})
    n = _native(body)
    if n is None:
        return Declined(f"{loop.op_type.lower()}.one_step", "its body holds no LSTM, GRU or RNN step (nor a decomposed cell that rnnx recognises; "
                        "a cell it declined is listed with its own rule)")
    if isinstance(n, Declined):
        return n
    if loop.op_type == "Scan":
        return _plan_scan(g, loop, bound, body, n)
    pairs, outer_of = bound.pairs, bound.outer_of
    ins, outs = [i.name for i in bound.body.input], [o.name for o in bound.body.output]
    unsq = body.prod(n.input[0], "Unsqueeze")
    gather = body.prod(unsq.input[0], "Gather") if unsq is not None and body.axes(unsq) == [0] else None
    if gather is None or body.attr(gather, "axis", 0) != 0 or gather.input[0] in body.producer or gather.input[0] in ins:
        return Declined("loop.input", "the step's input is not the loop's step of a sequence from outside the loop (Gather(S, t))")
    S = gather.input[0]
    t = body.through(gather.input[1], ("Identity", "Cast"))
    counters = {ins[0]}
    counters |= {k for k in pairs if _counter(body, g, k, pairs, outer_of)}
    if t not in counters:
        return Declined("loop.input", "the step reads S at an index that is neither the iteration number nor a counter from 0")
    states = _states(body, n, pairs, "loop.state")
    if isinstance(states, Declined):
        return states
    state_ins = {v[0] for v in states.values()}
    n_carried = len(ins) - 2
    for k, name in enumerate(ins[2:]):
        if name in state_ins:
            continue
        passthrough = body.through(pairs[name]) == name
        if not passthrough and not (name in counters and not g.consumers.get(loop.output[k]) and loop.output[k] not in g.outputs):
            return Declined("loop.carried", f"the loop carries {name!r}, which changes each step and is not the step's state")
    h_new = states["h"][1]
    for k, name in enumerate(outs[1 + n_carried:]):
        if body.through(name) != h_new:
            return Declined("loop.scan_outputs", f"scan output {k} is not the step's new h")
    if not loop.input[0] or not _length_of(g, loop.input[0], S):
        return Declined("loop.trip_count", "the trip count is not the sequence's length (Shape(S)[0])")
    next_counters = {body.prod(body.through(pairs[k]), "Add").output[0] for k in counters if k in pairs}
    if not _condition_ok(g, body, outs[0], counters | next_counters, outer_of, S) or \
            (loop.input[1] and not _condition_ok(g, g, loop.input[1], set(), {}, S)):
        return Declined("loop.trip_count", "the loop's condition depends on more than the step count and the sequence's length")
    finals = {}
    for k, name in enumerate(ins[2:]):
        finals[loop.output[k]] = next((key for key, v in states.items() if v[0] == name), outer_of[name])
    scans = list(loop.output[n_carried:])
    initial = {key: outer_of[v[0]] for key, v in states.items()}
    return _rewrite(loop, bound.body, n, S, initial, finals, scans, "forward", 0, 0)


def _plan_scan(g: GraphIndex, scan: Any, bound: Any, body: GraphIndex, n: Any) -> LoopFusion | Declined:
    ins, outs = [i.name for i in bound.body.input], [o.name for o in bound.body.output]
    n_state = len(bound.pairs)
    unsq = body.prod(n.input[0], "Unsqueeze")
    x_t = body.through(unsq.input[0]) if unsq is not None and body.axes(unsq) == [0] else None
    if x_t not in ins[n_state:]:
        return Declined("scan.input", "the step's input is not one of the Scan's scan inputs")
    j = ins.index(x_t) - n_state
    n_scan = len(ins) - n_state
    if n_scan != 1:
        return Declined("scan.input", f"the Scan reads {n_scan} sequences, expected the step's input alone")
    in_dirs = list(body.attr(scan, "scan_input_directions", [0] * n_scan))
    in_axes = list(body.attr(scan, "scan_input_axes", [0] * n_scan))
    states = _states(body, n, bound.pairs, "scan.state")
    if isinstance(states, Declined):
        return states
    if len(states) != n_state:
        return Declined("scan.state", f"the Scan carries {n_state} values, expected the step's states only")
    h_new = states["h"][1]
    n_out = len(outs) - n_state
    out_dirs = list(body.attr(scan, "scan_output_directions", [0] * n_out))
    out_axes = list(body.attr(scan, "scan_output_axes", [0] * n_out))
    for k, name in enumerate(outs[n_state:]):
        if body.through(name) != h_new:
            return Declined("scan.outputs", f"scan output {k} is not the step's new h")
        if out_dirs[k] != in_dirs[j]:
            return Declined("scan.outputs", "a scan output runs in the other direction than the input")
    if any(a not in (0, 1) for a in [in_axes[j], *out_axes]) or len(set(out_axes)) > 1:
        return Declined("scan.input", "the Scan runs over an axis other than 0 or 1")
    finals = {scan.output[k]: next(key for key, v in states.items() if v[0] == name) for k, name in enumerate(ins[:n_state])}
    initial = {key: scan.input[ins.index(v[0])] for key, v in states.items()}
    return _rewrite(scan, bound.body, n, scan.input[n_state + j], initial, finals, list(scan.output[n_state:]),
                    "reverse" if in_dirs[j] else "forward", in_axes[j], out_axes[0] if out_axes else 0)


def _rewrite(loop: Any, body: Any, n: Any, S: str, initial: dict[str, str], finals: dict[str, str], scans: list[str],
             direction: str, in_axis: int, out_axis: int) -> LoopFusion:
    from onnx import TensorProto, helper

    prefix = f"{loop.name or loop.output[0]}_fused"
    ax0, ax1 = f"{prefix}_axis0", f"{prefix}_axis1"
    nodes = [helper.make_node("Constant", [], [ax0], value=helper.make_tensor(ax0, TensorProto.INT64, [1], [0])),
             helper.make_node("Constant", [], [ax1], value=helper.make_tensor(ax1, TensorProto.INT64, [1], [1]))]
    X = S
    if in_axis == 1:
        X = f"{prefix}_X"
        nodes.append(helper.make_node("Transpose", [S], [X], perm=[1, 0, 2]))
    keys = ["h", "c"] if n.op_type == "LSTM" else ["h"]
    for key in keys:
        nodes.append(helper.make_node("Unsqueeze", [initial[key], ax0], [f"{prefix}_initial_{key}"]))
    outs = [f"{prefix}_Y", f"{prefix}_Y_h"] + ([f"{prefix}_Y_c"] if n.op_type == "LSTM" else [])
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute if a.name != "direction"}
    ins = [X, *n.input[1:4], "", *(f"{prefix}_initial_{k}" for k in keys)]
    nodes.append(helper.make_node(n.op_type, ins, outs, name=prefix, direction=direction, **attrs))
    for out, source in finals.items():
        if source in ("h", "c"):
            nodes.append(helper.make_node("Squeeze", [outs[1 if source == "h" else 2], ax0], [out]))
        else:
            nodes.append(helper.make_node("Identity", [source], [out]))
    for k, out in enumerate(scans):
        target = out if out_axis == 0 else f"{prefix}_steps{k}"
        nodes.append(helper.make_node("Squeeze", [outs[0], ax1], [target]))
        if out_axis == 1:
            nodes.append(helper.make_node("Transpose", [target], [out], perm=[1, 0, 2]))
    weights = [i for i in body.initializer if i.name in n.input[1:4]]
    return LoopFusion(n.op_type, loop.op_type, prefix, S, direction, loop.name or loop.output[0], dict(initial),
                      Edit(nodes, [_copy(w) for w in weights], {id(loop)}))


def _copy(tensor: Any) -> Any:
    from onnx import TensorProto

    out = TensorProto()
    out.CopyFrom(tensor)
    return out
