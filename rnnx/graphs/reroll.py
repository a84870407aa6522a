"""Re-roll a loop over time that a trace unrolled: one ONNX ``Loop`` with one step as its body.

Every exporter runs the model's Python, so ``for t in range(x.size(1))`` becomes the
example's number of copies of the step, each reading ``x[:, t]``, and the file is fixed at
that length. Where the copies are one step repeated, they are one ``Loop`` over the length
the file is given. :mod:`rnnx.graphs.reroll_match` tells the steps apart and matches each
against step 1; the rules here, for a sequence S sliced at t = 0..T-1 along axis 0 or 1:

- ``reroll.length``: T is at least 3 (step 2 says which values are carried, and the last step
  is where the epilogue starts), and the steps read all of S where the graph says its length;
- ``reroll.same_step``: every step is step 1's computation (see reroll_match);
- ``reroll.used_after``: a step's value is read after the loop only by a stack of every
  step's value (``Concat`` of the steps' values in order, as ``torch.stack`` and
  ``torch.cat`` export), or, for the last step, by anything (the final state, a head);
- ``reroll.types``: shape inference gives each carried and stacked value's type.

The rewrite: ``Loop(Shape(S)[axis], true, initial values)`` whose body is step 1's nodes with
the slice read as ``Gather(S, iteration, axis)``, step 0's values read as the carried inputs
and prelude values read from the outer scope; each stack is the body's scan output moved to
its axis; a last-step value is the final carried value, or the last of its scan output. The
slices' source becomes dynamic along its time axis where it is a graph input. Loops of one
length are apart where one's sequence comes from another's slices (layers, one loop each: the
producer first); a loop over ``reversed(range(T))`` reads ``Gather(S, T-1-i)``.

Where the body is a cell ONNX has a native node for, :mod:`rnnx.graphs.fuse_steps` fuses the
chain first and no slice is left here; this pass runs where it declined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rnnx.graphs.index import GraphIndex, _live, rewrite
from rnnx.graphs.reroll_match import PRELUDE, Steps, Unrolled, by_dependency, match_steps, oriented, partition, prev_reads
from rnnx.graphs.reroll_segments import Segments, body_slice, check_segments, segment_groups, trip_count
from rnnx.graphs.time_slice import time_slice, time_steps
from rnnx.pass_result import Declined, PassResult

_MIN_STEPS = 3
_MAX_LOOPS = 16  # loops re-rolled in one graph (an encoder's, a decoder's): a bound on the passes over it


def reroll(model: Any, seq_label: str = "seq", keep: frozenset[tuple[str, int]] = frozenset(),
           labels: dict[tuple[str, int], str] | None = None) -> PassResult[dict[str, Any]]:
    """Re-roll every unrolled loop of the main graph in place; a re-rolled sequence that is a
    graph input gets the dynamic length ``seq_label`` (or the user's label for it, in ``labels``
    by (input, axis)). ``keep``: (input, axis) the user asked static, whose loops stay unrolled.
    Each rewrite is a record: source, axis, steps, node, carried, stacked, body (op types), and
    dynamic_seq, seq_label."""
    result: PassResult[dict[str, Any]] = PassResult()
    refused: set[tuple[str, int]] = set()
    for _ in range(_MAX_LOOPS):
        g = GraphIndex(model.graph)
        per_step = _groups(g)
        stepped = set().union(*(sources for _, sources, _ in per_step))  # x[:, t] read as Slice(x, t, t+1) is no segment loop
        segments = [(seg.n, seg.sources, seg) for seg in segment_groups(g, stepped)]
        groups = [grp for grp in per_step + segments if not grp[1] & refused]
        asked = [grp for grp in groups if grp[1] & keep]
        for _, sources, _ in asked:
            result.left_alone.append(Declined("reroll.asked_static", "its length was asked static").at(", ".join(sorted(s for s, _ in sources))))
            refused |= sources
        groups = [grp for grp in groups if not grp[1] & keep]
        if not groups:
            break
        types = _types(model)
        for T, sources, seg in groups:
            plan = _plan(g, T, sources, types, f"reroll{len(result.rewritten)}", seg)
            if isinstance(plan, Declined):
                result.left_alone.append(plan.at(", ".join(sorted(s for s, _ in sources))))
                refused |= sources
                continue
            nodes, removed, info = plan
            rewrite(model.graph, removed, nodes)
            _make_sequence_dynamic(model, info, (labels or {}).get((info["source"], info["axis"]), seq_label))
            result.rewritten.append(info)
            break
        else:
            break
    return result


def unrolled(model: Any) -> list[Declined]:
    """Why each loop the graph still holds unrolled is not one ONNX Loop: :func:`reroll`'s
    refusals, planned again and nothing rewritten (for a message that names the loop)."""
    g = GraphIndex(model.graph)
    per_step = _groups(g)
    stepped = set().union(*(sources for _, sources, _ in per_step))
    groups = per_step + [(seg.n, seg.sources, seg) for seg in segment_groups(g, stepped)]
    types = _types(model) if groups else {}
    found = [_plan(g, T, sources, types, "unrolled", seg) for T, sources, seg in groups]
    return [plan.at(", ".join(sorted(s for s, _ in sources))) for plan, (_, sources, _) in zip(found, groups) if isinstance(plan, Declined)]


def left_unrolled(model: Any) -> list[tuple[str, int, int, int]]:
    """(S, axis, steps, segment) of each sequence a loop the graph still holds unrolled reads
    whole: ``steps`` slices of one step (segment 1), or ``steps`` segments of ``segment`` steps."""
    g = GraphIndex(model.graph)
    per_step = _groups(g)
    found = [(S, axis, T, 1) for T, sources, _ in per_step for S, axis in sorted(sources)]
    stepped = set().union(*(sources for _, sources, _ in per_step))
    return found + [(S, axis, seg.n, seg.size) for seg in segment_groups(g, stepped) for S, axis in sorted(seg.sources)]


def _groups(g: GraphIndex) -> list[tuple[int, set[tuple[str, int]], Segments | None]]:
    """Sequences sliced at every t = 0..T-1, T >= 2, grouped by T (one loop may read several), and
    apart where one's values come from another's slices (a loop over the stack of the loop before)."""
    seen: dict[tuple[str, int], set[int]] = {}
    for node in g.nodes:
        found = time_slice(g, node.output[0]) if node.output else None
        if found is not None:
            seen.setdefault((found[0], found[2]), set()).add(found[1])
    by_length: dict[int, set[tuple[str, int]]] = {}
    for source, ts in seen.items():
        if len(ts) >= 2 and ts == set(range(len(ts))):
            by_length.setdefault(len(ts), set()).add(source)
    return [(T, loop, None) for T, sources in sorted(by_length.items(), key=lambda item: -item[0]) for loop in by_dependency(g, sources)]


@dataclass
class _Stack:
    concat: Any  # the Concat over the steps' values
    value: str  # the template value it stacks
    axis: int  # its axis, made non-negative
    flipped: bool = False  # the last step's value first (a loop backwards whose outputs are put in time order)


def _plan(g: GraphIndex, T: int, sources: set[tuple[str, int]], types: dict[str, Any], prefix: str,
          seg: Segments | None = None) -> Declined | tuple[list[Any], set[int], dict[str, Any]]:
    if T < _MIN_STEPS:
        if seg is not None:
            return Declined("reroll.length", f"only {T} segments of {seg.size} steps traced: a loop over segments is re-rolled from "
                            f"{_MIN_STEPS} or more (an example longer than {(_MIN_STEPS - 1) * seg.size} steps)")
        return Declined("reroll.length", f"only {T} steps traced: a loop is re-rolled from {_MIN_STEPS} or more")
    for S, axis in sorted(sources):
        held = time_steps(g, S, axis)
        if seg is None and held is not None and held != T:
            return Declined("reroll.length", f"the steps read {T} of the {held} steps of {S!r} along axis {axis}: a loop over part of it")
    u = oriented(g, T, sources) if seg is None else partition(g, T, sources, seg.find())
    inner = sorted(s for s, _ in sources if g.producer.get(s) is not None and u.step_of[id(g.producer[s])] != PRELUDE)
    if inner:
        return Declined("reroll.length", f"{inner[0]!r} is computed by the steps that slice it")
    steps = match_steps(g, u, peeled=seg is not None)
    if isinstance(steps, Declined):
        return steps
    if seg is not None:
        why = check_segments(g, u, steps, seg)
        if why is not None:
            return why
    used = _used_after(g, u, steps, peeled=seg is not None)
    if isinstance(used, Declined):
        return used
    stacks, lasts = used
    carried = prev_reads(g, u, steps.template)
    wanted = [steps.carried[p] for p in carried] + [s.value for s in stacks] + sorted(lasts) + carried
    untyped = [n for n in wanted if n not in types]
    if untyped:
        return Declined("reroll.types", f"shape inference gives no type for {untyped[0]!r}, a value the loop carries or stacks")
    return _build(g, u, steps, carried, stacks, lasts, types, prefix, seg)


def _used_after(g: GraphIndex, u: Unrolled, steps: Steps, peeled: bool = False) -> Declined | tuple[list[_Stack], set[str]]:
    """The stacks over the steps and the template values read from the last step after the
    loop; or the value read after the loop from another step (but step 0 where it stays, ``peeled``)."""
    T = u.T
    step_nodes = set().union(*steps.matched) | steps.before  # what computes an initial value from step 0 reads it before the loop
    inverse = [{v: t for t, v in m.items()} for m in steps.maps]
    stacks: dict[int, _Stack] = {}
    lasts: set[str] = set()
    for k in range(T):
        for tname, name in steps.maps[k].items():
            for reader in g.consumers.get(name, []):
                if id(reader) in step_nodes:
                    continue  # the step itself, or the next one reading a carried value (matched so)
                stack = stacks.get(id(reader)) or _stack(g, reader, steps, inverse, flips=not peeled)
                if stack is not None:
                    stacks[id(reader)] = stack
                elif k == T - 1:
                    lasts.add(tname)
                elif not (peeled and k == 0):
                    return Declined("reroll.used_after", f"step {k}'s {name!r} is read after the loop by {reader.op_type} "
                                    f"{reader.name or reader.output[0]!r}, which neither is the next step nor stacks every step's value")
            if name in g.outputs:
                if k < T - 1 and not (peeled and k == 0):
                    return Declined("reroll.used_after", f"step {k}'s {name!r} is a graph output")
                if k < T - 1:
                    continue
                lasts.add(tname)
    return list(stacks.values()), lasts


def _stack(g: GraphIndex, node: Any, steps: Steps, inverse: list[dict[str, str]], flips: bool = True) -> _Stack | None:
    """The stack ``node`` is, if it concatenates one template value of every step, in order
    (or, where ``flips``, in reverse order: ``outs.insert(0, h)``)."""
    T = len(steps.maps)
    if node.op_type != "Concat" or len(node.input) != T:
        return None
    for flipped in (False, True) if flips else (False,):
        order = range(T - 1, -1, -1) if flipped else range(T)
        value = inverse[1].get(node.input[list(order).index(1)])
        if value is not None and all(steps.maps[k].get(value) == node.input[j] for j, k in enumerate(order)):
            axis = g.attr(node, "axis")
            return _Stack(node, value, axis, flipped) if axis is not None else None
    return None


def _types(model: Any) -> dict[str, Any]:
    """Each value's TypeProto, as shape inference finds it (its static shapes are the
    example's; only element types and ranks are used)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  what the graph declares is the fallback
        inferred = model
    g = inferred.graph
    return {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}


def _value_info(name: str, type_proto: Any) -> Any:
    """``name`` with ``type_proto``'s element type and rank, every dimension unknown: the
    body runs at every batch and length."""
    from onnx import helper

    rank = len(type_proto.tensor_type.shape.dim)
    return helper.make_tensor_value_info(name, type_proto.tensor_type.elem_type, [None] * rank)


def _rank(types: dict[str, Any], name: str) -> int:
    return len(types[name].tensor_type.shape.dim)


def _build(g: GraphIndex, u: Unrolled, steps: Steps, carried: list[str], stacks: list[_Stack], lasts: set[str], types: dict[str, Any],
           prefix: str, seg: Segments | None = None) -> tuple[list[Any], set[int], dict[str, Any]] | Declined:
    from onnx import TensorProto, helper

    t_in, cond_in, cond_out = f"{prefix}/t", f"{prefix}/cond_in", f"{prefix}/cond_out"
    local = {o for n in steps.template for o in n.output if o}
    inside = {p: f"{prefix}/in{j}" for j, p in enumerate(carried)}
    renamed = {**{v: f"{prefix}/{v}" for v in local}, **inside}
    body: list[Any] = []
    for n in steps.template:
        found = u.slices.get(id(n))
        if found is not None:
            S, _, axis = found
            if seg is None:
                at = _backwards(prefix, t_in, body) if u.reverse else t_in
                body.append(helper.make_node("Gather", [S, at], [renamed[n.output[0]]], axis=axis, name=f"{renamed[n.output[0]]}/slice"))  # a step may read S twice
            else:
                body += body_slice(prefix, S, axis, seg.size, t_in, renamed[n.output[0]])
            continue
        copy = helper.make_node(n.op_type, [renamed.get(i, i) for i in n.input], [renamed.get(o, o) for o in n.output],
                                name=f"{prefix}/{n.name or n.output[0]}", domain=n.domain or None)
        copy.attribute.extend(n.attribute)
        body.append(copy)
    body.append(helper.make_node("Identity", [cond_in], [cond_out]))
    outs = [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, [])]
    ins = [helper.make_tensor_value_info(t_in, TensorProto.INT64, []), helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])]
    for j, p in enumerate(carried):
        body.append(helper.make_node("Identity", [renamed[steps.carried[p]]], [f"{prefix}/out{j}"]))
        outs.append(_value_info(f"{prefix}/out{j}", types[steps.carried[p]]))
        ins.append(_value_info(inside[p], types[p]))
    last = steps.maps[u.T - 1]
    S, axis = sorted(u.sources)[0]
    finals, named = [], set()
    for j, p in enumerate(carried):
        nxt = steps.carried[p]
        take = nxt in lasts and nxt not in named
        named.add(nxt)
        finals.append(last[nxt] if take else f"{prefix}/final{j}")
    if seg is None:
        nodes, extra_ins, extra_finals = _scanned(g, u, steps, stacks, lasts - named, types, prefix, body, outs, renamed)
        initial = [steps.initial[p] for p in carried]
        nodes[:0] = [helper.make_node("Constant", [], [f"{prefix}/axis"], value=helper.make_tensor(f"{prefix}/axis", TensorProto.INT64, [], [axis])),
                     helper.make_node("Shape", [S], [f"{prefix}/shape"]),
                     helper.make_node("Gather", [f"{prefix}/shape", f"{prefix}/axis"], [f"{prefix}/steps"], axis=0)]
        trips = f"{prefix}/steps"
        removed = set().union(*steps.matched) - steps.before  # what computes an initial value stays
    else:
        # Segment 0 stays as traced, and every output is carried: a shorter last segment gives a
        # shorter value, which a Loop's scan outputs (one shape for all iterations) cannot hold.
        nodes, extra_ins, extra_finals = _accumulated(steps, stacks, lasts - named, types, prefix, body, outs, ins, renamed)
        initial = list(carried)
        count, trips = trip_count(prefix, S, axis, seg.size)
        nodes[:0] = count
        removed = set().union(*steps.matched[1:])
    body = _live(body, {o.name for o in outs})
    graph = helper.make_graph(body, f"{prefix}_body", ins, outs)
    # a condition given, though the trip count alone ends the loop: ONNX's reference evaluator runs no step without one
    go = helper.make_node("Constant", [], [f"{prefix}/go"], value=helper.make_tensor(f"{prefix}/go", TensorProto.BOOL, [], [True]))
    loop = helper.make_node("Loop", [trips, f"{prefix}/go", *initial, *extra_ins], finals + extra_finals, name=prefix, body=graph)
    nodes[:0] = [go, loop]
    removed |= {id(s.concat) for s in stacks}
    info = {"source": S, "axis": axis, "sources": sorted(u.sources), "steps": u.T, "node": prefix, "carried": len(carried),
            "stacked": [s.concat.output[0] for s in stacks], "body": [n.op_type for n in steps.template],
            "steps_outputs": {s.concat.output[0]: s.axis for s in stacks}}
    if seg is not None:
        info.update(segment=seg.size, steps_outputs={})
    return nodes, removed, info


def _scanned(g: GraphIndex, u: Unrolled, steps: Steps, stacks: list[_Stack], lasts: set[str], types: dict[str, Any], prefix: str,
             body: list[Any], outs: list[Any], renamed: dict[str, str]) -> tuple[list[Any], list[str], list[str]]:
    """A loop over steps: each stack is the body's scan output moved to its axis; a last-step
    value not carried is the last of its scan output. Adds the body's scan outputs; returns the
    nodes after the Loop, the Loop's extra inputs (none) and its scan outputs."""
    from onnx import TensorProto, helper

    # What is stacked: a stack of Unsqueeze(v, axis) stacks v, the rest concatenate whole.
    scanned: dict[str, str] = {}
    plans = []
    for s in stacks:
        rank = _rank(types, s.value)
        axis = s.axis + rank if s.axis < 0 else s.axis
        unsq = g.producer.get(s.value)
        squeezed = unsq is not None and unsq.op_type == "Unsqueeze" and [a % rank for a in (g.axes(unsq) or [])] == [axis]
        v = unsq.input[0] if squeezed and unsq is not None else s.value
        scanned.setdefault(v, f"{prefix}/scan{len(scanned)}")
        plans.append((s, v, axis, squeezed))
    for v in sorted(lasts):
        scanned.setdefault(v, f"{prefix}/scan{len(scanned)}")
    for v, name in scanned.items():
        body.append(helper.make_node("Identity", [renamed[v]], [name]))
        outs.append(_value_info(name, types[v]))
    stacked = [f"{prefix}/stacked{j}" for j in range(len(scanned))]
    by_value = dict(zip(scanned, stacked))
    nodes: list[Any] = []
    for s, v, axis, squeezed in plans:
        nodes += _restack(by_value[v], s.concat.output[0], axis, _rank(types, v) + 1, squeezed, f"{prefix}/{s.concat.name or 'stack'}", s.flipped)
    last = steps.maps[u.T - 1]
    for v in sorted(lasts):
        idx = f"{prefix}/last_index"
        if not any(idx in n.output for n in nodes):
            nodes.append(helper.make_node("Constant", [], [idx], value=helper.make_tensor(idx, TensorProto.INT64, [], [-1])))
        nodes.append(helper.make_node("Gather", [by_value[v], idx], [last[v]], axis=0))
    return nodes, [], stacked


def _accumulated(steps: Steps, stacks: list[_Stack], lasts: set[str], types: dict[str, Any], prefix: str,
                 body: list[Any], outs: list[Any], ins: list[Any], renamed: dict[str, str]) -> tuple[list[Any], list[str], list[str]]:
    """A loop over segments 1..n-1: each stack is carried, ``Concat(stack so far, segment's value)``,
    from segment 0's value; a last-segment value is carried, from segment 0's. Adds the body's
    inputs and outputs; returns the nodes after the Loop (none), its extra inputs and outputs."""
    from onnx import helper

    first, last = steps.maps[0], steps.maps[len(steps.maps) - 1]
    extra_ins, extra_finals = [], []
    for j, s in enumerate(stacks):
        acc_in, acc_out = f"{prefix}/acc_in{j}", f"{prefix}/acc_out{j}"
        body.append(helper.make_node("Concat", [acc_in, renamed[s.value]], [acc_out], axis=s.axis))
        ins.append(_value_info(acc_in, types[s.value]))
        outs.append(_value_info(acc_out, types[s.value]))
        extra_ins.append(first[s.value])
        extra_finals.append(s.concat.output[0])
    for j, v in enumerate(sorted(lasts)):
        keep_in, keep_out = f"{prefix}/last_in{j}", f"{prefix}/last_out{j}"
        body.append(helper.make_node("Identity", [renamed[v]], [keep_out]))
        ins.append(_value_info(keep_in, types[v]))
        outs.append(_value_info(keep_out, types[v]))
        extra_ins.append(first[v])
        extra_finals.append(last[v])
    return [], extra_ins, extra_finals


def _restack(stacked: str, out: str, axis: int, rank: int, squeezed: bool, prefix: str, flipped: bool = False) -> list[Any]:
    """The Loop's scan output (steps first, ``rank`` axes) as the stack that ``out`` was: the
    steps moved to ``axis``, last step first where ``flipped``; where each step's value was
    concatenated whole (not unsqueezed), the steps axis merged with the one after it."""
    from onnx import TensorProto, helper

    if flipped:
        ends = {f"{prefix}_{k}": v for k, v in (("from", -1), ("to", -(2**63)), ("axis0", 0), ("back", -1))}  # every step, last first
        flips = [helper.make_node("Constant", [], [k], value=helper.make_tensor(k, TensorProto.INT64, [1], [v])) for k, v in ends.items()]
        flips.append(helper.make_node("Slice", [stacked, *ends], [f"{prefix}_flipped"]))
        return flips + _restack(f"{prefix}_flipped", out, axis, rank, squeezed, prefix)
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))
    if squeezed:
        return [helper.make_node("Transpose", [stacked], [out], perm=perm)] if axis else [helper.make_node("Identity", [stacked], [out])]
    moved, shape, head, tail, target = (f"{prefix}_{s}" for s in ("moved", "shape", "head", "tail", "target"))
    consts = {f"{prefix}_{k}": v for k, v in (("zero", 0), ("a", axis), ("a2", axis + 2), ("end", rank), ("minus1", -1))}
    nodes = [helper.make_node("Constant", [], [k], value=helper.make_tensor(k, TensorProto.INT64, [1], [v])) for k, v in consts.items()]
    zero, a, a2, end, minus1 = consts
    nodes += [
        helper.make_node("Transpose", [stacked], [moved], perm=perm),
        helper.make_node("Shape", [moved], [shape]),
        helper.make_node("Slice", [shape, zero, a], [head]),
        helper.make_node("Slice", [shape, a2, end], [tail]),
        helper.make_node("Concat", [head, minus1, tail], [target], axis=0),
        helper.make_node("Reshape", [moved, target], [out]),
    ]
    return nodes


def _backwards(prefix: str, t: str, body: list[Any]) -> str:
    """The time index T-1-t of iteration ``t`` of a loop that runs backwards; T is the Loop's
    trip count, read from the outer graph. Appends its nodes to ``body``."""
    from onnx import TensorProto, helper

    one, last, at = f"{prefix}/one", f"{prefix}/last_t", f"{prefix}/t_back"
    if any(at in n.output for n in body):
        return at  # a step that reads two sequences, or one twice
    body += [helper.make_node("Constant", [], [one], value=helper.make_tensor(one, TensorProto.INT64, [], [1])),
             helper.make_node("Sub", [f"{prefix}/steps", one], [last]), helper.make_node("Sub", [last, t], [at])]
    return at


def _make_sequence_dynamic(model: Any, info: dict[str, Any], label: str) -> None:
    """The source's time axis is ``label`` where it is a graph input. Each graph output keeps
    the static dimensions shape inference still proves; a stack's time axis is ``label``; a
    dimension inference loses through the Loop stays static unless it is a multiple of the
    traced length (a length, or a stack of stacks)."""
    import onnx

    graph = model.graph
    info["dynamic_seq"] = False
    sliced = {tuple(s) for s in info["sources"]}  # every sequence the steps slice shares the loop's length
    for vi in graph.input:
        for name, axis in sliced:
            if vi.name == name and len(vi.type.tensor_type.shape.dim) > axis:
                vi.type.tensor_type.shape.dim[axis].dim_param = label
                info["dynamic_seq"], info["seq_label"] = True, label
    del graph.value_info[:]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for o in probe.graph.output:
        o.type.tensor_type.ClearField("shape")
    try:
        inferred = {o.name: o.type.tensor_type for o in onnx.shape_inference.infer_shapes(probe).graph.output}
    except Exception:  # noqa: BLE001  then what the graph declared is all there is
        inferred = {}
    for o in graph.output:
        dims = o.type.tensor_type.shape.dim
        found = inferred.get(o.name)
        proven = list(found.shape.dim) if found is not None and found.HasField("shape") and len(found.shape.dim) == len(dims) else []
        for k, d in enumerate(dims):
            if proven and proven[k].HasField("dim_value"):
                d.dim_value = proven[k].dim_value
            elif info["steps_outputs"].get(o.name) in (k, k - len(dims)):
                d.dim_param = label
            elif d.HasField("dim_value") and (info.get("segment") or d.dim_value % info["steps"] == 0):
                d.Clear()  # a segment's output may be of any length (a strided encoder's), so none is asserted
