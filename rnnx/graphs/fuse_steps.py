"""Fuse chains of one-step native nodes (a cell stepped in a Python loop) into one node.

Rules, for LSTM / GRU / RNN nodes in the main graph:
- a *step* is a forward node without sequence_lens whose X is ``Unsqueeze(x_t, [0])``, x_t step
  ``t`` of a sequence S as :mod:`rnnx.graphs.time_slice` reads it (Gather, Slice or Split along
  time, as ``x[t]`` and ``x.unbind(0)`` export);
- step B follows step A when B's initial_h (and initial_c) is ``Unsqueeze(Squeeze(A.Y_h))``
  (and the same for Y_c) and both use the same W, R, B and attributes;
- a chain fuses when ``steps.sliced_input``: every step's X is sliced from one input, and
  ``steps.in_order``: its steps read t = 0, 1, ..., T-1 of one S that holds T steps (where its declared
  shape or a Split of it says how many);
  ``steps.states``: every state is read through ``Squeeze`` only, and no step's Y is read;
  ``steps.h_private`` / ``steps.c_private``: no intermediate state is used outside the chain
  except by a ``Concat`` (axis 0, or 1 batch-first) that stacks every step's
  ``Unsqueeze(h_t)``, ``steps.stack_order``: in order, or by per-step work on h that
  :mod:`rnnx.graphs.per_step` can apply to all steps at once (its rules are ``per_step.*``);
- the fused node reads all of S: the stack becomes ``Squeeze(Y, [1])`` and the last
  step's states ``Squeeze(Y_h)`` / ``Squeeze(Y_c)``; when S is a graph input read by
  nothing else but Shape, its first dimension (and the stack's, if a graph output)
  becomes the dynamic ``seq``.

A chain that breaks a rule is left alone, and the result says which rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rnnx.graphs.index import GraphIndex, graphs, rewrite
from rnnx.graphs.passes import Edit
from rnnx.graphs.per_step import find_per_step, hoist
from rnnx.graphs.time_slice import describe_source, time_slice, time_steps
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.pass_result import Declined, PassResult


def _is_one_step(g: GraphIndex, node: Any) -> bool:
    unsq = g.prod(node.input[0], "Unsqueeze")
    return unsq is not None and g.axes(unsq) == [0]


def _step_input(g: GraphIndex, node: Any) -> str:
    return g.prod(node.input[0], "Unsqueeze").input[0]


def _state_from(g: GraphIndex, name: str) -> str | None:
    """``Unsqueeze(Squeeze(Y_h))`` -> Y_h."""
    unsq = g.prod(name, "Unsqueeze")
    sq = g.prod(unsq.input[0], "Squeeze") if unsq is not None and g.axes(unsq) == [0] else None
    return sq.input[0] if sq is not None and g.axes(sq) == [0] else None


_FED_BY_HOPS = 256  # how far back from a step's input to look for the last step's output; bounds a refusal's cost


def _fed_by(g: GraphIndex, name: str, step: Any) -> bool:
    """Whether ``name`` is computed from ``step``'s outputs, looking back at most _FED_BY_HOPS nodes."""
    targets = {o for o in step.output if o}
    seen: set[str] = set()
    frontier = [name]
    while frontier and len(seen) < _FED_BY_HOPS:
        t = frontier.pop()
        if t in targets:
            return True
        if t in seen:
            continue
        seen.add(t)
        node = g.producer.get(t)
        if node is not None and node is not step:
            frontier.extend(i for i in node.input if i and i not in g.constants)
    return False


def _key(node: Any) -> tuple[Any, ...]:
    attrs = tuple(sorted((a.name, str(a)) for a in node.attribute))
    return (node.op_type, tuple(node.input[1:4]), attrs)


@dataclass
class ChainFusion:
    """A chain of ``steps`` one-step ``op`` nodes over ``source`` (time on ``axis``) fused into
    ``node``. ``stack``: the Concat of the steps' outputs it replaces; ``steps_outputs``: each
    output stacked over time, with its time axis; ``hoisted``: per-step work applied to all steps
    at once; ``seq_label``: the dynamic length the main graph's input got (None where it kept its size)."""

    op: str
    steps: int
    source: str
    axis: int
    node: str
    stack: str | None
    steps_outputs: dict[str, int]
    hoisted: list[str] | None = None
    seq_label: str | None = None
    edit: Edit = field(default_factory=Edit, repr=False, compare=False)

    @property
    def dynamic_seq(self) -> bool:
        return self.seq_label is not None

    def to_json(self) -> dict[str, Any]:
        """The record export and fuse report: op, steps, source, axis, node, stack, steps_outputs
        (and hoisted, dynamic_seq, seq_label where they apply)."""
        found: dict[str, Any] = {"op": self.op, "steps": self.steps, "source": self.source, "axis": self.axis, "node": self.node,
                                 "stack": self.stack, "steps_outputs": dict(self.steps_outputs)}
        if self.hoisted is not None:
            found["hoisted"] = self.hoisted
        if self.seq_label is not None:
            found.update(dynamic_seq=True, seq_label=self.seq_label)
        return found


def fuse_steps(model: Any, seq_label: str = "seq") -> PassResult[ChainFusion]:
    """Fuse every chain of one-step nodes, in the main graph and in If/Loop/Scan bodies, in
    place; a fused sequence input of the main graph gets the dynamic length ``seq_label``."""
    result: PassResult[ChainFusion] = PassResult()
    for graph, outer in list(graphs(model.graph)):
        before = len(result.rewritten)
        _fuse_steps_in(GraphIndex(graph, outer), result)
        if graph is model.graph:
            for info in result.rewritten[before:]:
                _make_sequence_dynamic(model, info, seq_label)
    return result


def _fuse_steps_in(g: GraphIndex, result: PassResult[ChainFusion]) -> None:
    fused_before = len(result.rewritten)
    steps = {}
    for node in g.nodes:
        if node.op_type not in NATIVE_OPS or g.attr(node, "direction", b"forward") not in (b"forward", "forward"):
            continue
        if len(node.input) > 4 and node.input[4]:
            continue
        if _is_one_step(g, node):
            # (S, t, axis) where the step's X is Unsqueeze(x_t, [0]), x_t step t of S: x[t] or x.unbind(0) time-major, x[:, t] batch-first
            steps[id(node)] = (node, time_slice(g, _step_input(g, node)))
    follows: dict[int, Any] = {}
    has_prev: set[int] = set()
    for node, _ in steps.values():
        if len(node.input) <= 5 or not node.input[5]:
            continue
        prev_h = _state_from(g, node.input[5])
        prev = g.producer.get(prev_h) if prev_h else None
        if prev is not None and id(prev) in steps and _key(prev) == _key(node) and prev.output[1] == prev_h:
            if node.op_type == "LSTM" and _state_from(g, node.input[6]) != prev.output[2]:
                continue
            follows[id(prev)] = node
            has_prev.add(id(node))
    new_nodes: list[Any] = []
    removed: set[int] = set()
    for node, _ in steps.values():
        if id(node) in has_prev:
            continue
        chain = [node]
        while id(chain[-1]) in follows:
            chain.append(follows[id(chain[-1])])
        if len(chain) < 2:
            continue
        plan = _plan(g, chain, steps)
        if isinstance(plan, Declined):
            result.left_alone.append(plan.at(chain[0].name))
            continue
        new_nodes.extend(plan.edit.nodes)
        removed |= plan.edit.removed
        result.rewritten.append(plan)
    if len(result.rewritten) > fused_before:
        rewrite(g.graph, removed, new_nodes)


def _plan(g: GraphIndex, chain: list[Any], steps: dict[int, Any]) -> ChainFusion | Declined:
    """The chain's record with the nodes that replace ``chain`` and the ids of the nodes they
    make dead; or the rule it breaks."""
    from onnx import TensorProto, helper

    sources = [steps[id(n)][1] for n in chain]
    T = len(chain)
    if any(src is None for src in sources):
        k = next(i for i, src in enumerate(sources) if src is None)
        fed = next((j for j in range(max(k, 1), min(k + 2, T)) if _fed_by(g, _step_input(g, chain[j]), chain[j - 1])), None)
        why = f" (an autoregressive loop: step {fed}'s input is computed from step {fed - 1}'s output)" if fed is not None else ""
        return Declined("steps.sliced_input", f"step {k}'s input is {describe_source(g, _step_input(g, chain[k]))}, not step {k} of one "
                        f"sequence (Gather, Slice or Split along time){why}: its steps cannot run as one node")
    S, axis = sources[0][0], sources[0][2]
    if any(s != S or a != axis for s, _, a in sources) or [t for _, t, _ in sources] != list(range(T)):
        return Declined("steps.in_order", f"steps read {[t for _, t, _ in sources]} of {sorted({s for s, _, _ in sources})}, not 0..{T - 1} of one tensor")
    is_lstm = chain[0].op_type == "LSTM"
    squeezes_h = [_only_squeeze(g, n.output[1]) for n in chain]
    last = chain[-1]
    # The last step's c may be unused and dropped from its outputs.
    last_c = _only_squeeze(g, last.output[2]) if is_lstm and len(last.output) > 2 and last.output[2] else None
    found_c = [_only_squeeze(g, n.output[2]) if len(n.output) > 2 else None for n in chain[:-1]] if is_lstm else []
    if any(s is None for s in squeezes_h + found_c):
        return Declined("steps.states", "a step's state is used other than through Squeeze")
    squeezes_c = [s for s in found_c if s is not None]  # every one of them, after the check above
    if any(g.consumers.get(n.output[0]) for n in chain if n.output[0]):
        return Declined("steps.states", "a step's Y output is used; only its states may be")
    chain_ids = {id(n) for n in chain}
    per = find_per_step(g, [sq.output[0] for sq in squeezes_h], chain_ids)
    if isinstance(per, Declined):
        return per
    stack = None
    for k, sq in enumerate(squeezes_h):
        for user in g.consumers.get(sq.output[0], []):
            if per is not None and id(user) in per.roots:
                continue  # per-step work, applied to all steps after the fused node
            axes = g.axes(user) if user.op_type == "Unsqueeze" else None
            if axes is not None and axes in ([0], [1]):
                others = [c for c in g.consumers.get(user.output[0], []) if id(c) not in chain_ids]
                if not others and axes == [0]:
                    continue  # feeds the next step only
                if (len(others) == 1 and others[0].op_type == "Concat" and g.attr(others[0], "axis") == axes[0]
                        and (stack is None or others[0] is stack)):
                    stack = others[0]  # the outputs stacked over time (axis 0, or 1 batch-first)
                    continue
            if k == T - 1:
                continue  # the final state may go anywhere
            return Declined("steps.h_private", f"step {k}'s h is used outside the chain by {user.op_type} {user.name!r}")
        if k < T - 1 and sq.output[0] in g.outputs:
            return Declined("steps.h_private", f"step {k}'s h is a graph output")
    for k, sq in enumerate(squeezes_c):
        users = g.consumers.get(sq.output[0], [])
        if sq.output[0] in g.outputs or any(id(c) not in chain_ids for u in users for c in g.consumers.get(u.output[0], [])):
            return Declined("steps.c_private", f"step {k}'s c is used outside the chain")
    if stack is not None:
        stacked = [g.prod(i, "Unsqueeze") for i in stack.input]
        if [u.input[0] if u is not None else None for u in stacked] != [s.output[0] for s in squeezes_h]:
            return Declined("steps.stack_order", "the steps' outputs are concatenated in another order or with other tensors")
    held = time_steps(g, S, axis)
    if held is not None and held != T:
        return Declined("steps.in_order", f"the steps read {T} of the {held} steps of {S!r}: one node over all of it would run {held}")
    first = chain[0]
    prefix = f"{first.name or first.op_type}_fused"
    nodes = []
    X = S
    if axis == 1:  # batch-first: the fused node reads (seq, batch, features)
        X = f"{prefix}_X"
        nodes.append(helper.make_node("Transpose", [S], [X], perm=[1, 0, 2], name=X))
    ins = [X] + list(first.input[1:4]) + [""] + list(first.input[5:7] if is_lstm else first.input[5:6])
    outs = [f"{prefix}_Y", f"{prefix}_Y_h"] + ([f"{prefix}_Y_c"] if is_lstm else [])
    nodes.append(helper.make_node(first.op_type, ins, outs, name=prefix, **{a.name: helper.get_attribute_value(a) for a in first.attribute}))
    nodes[-1].metadata_props.extend(first.metadata_props)  # where the step came from (the exporter's module scope)
    axis1, axis0 = f"{prefix}_axis1", f"{prefix}_axis0"
    nodes.append(helper.make_node("Constant", [], [axis1], value=helper.make_tensor(axis1, TensorProto.INT64, [1], [1])))
    nodes.append(helper.make_node("Constant", [], [axis0], value=helper.make_tensor(axis0, TensorProto.INT64, [1], [0])))
    stack_axis = g.attr(stack, "axis") if stack is not None else 0
    steps_y = stack.output[0] if stack is not None and stack_axis == 0 else f"{prefix}_Y_steps"
    if stack is not None or per is not None:
        nodes.append(helper.make_node("Squeeze", [outs[0], axis1], [steps_y]))
    if stack is not None and stack_axis == 1:
        nodes.append(helper.make_node("Transpose", [steps_y], [stack.output[0]], perm=[1, 0, 2]))
    if per is not None:
        nodes += hoist(per, squeezes_h[0].output[0], steps_y, prefix)
    nodes.append(helper.make_node("Squeeze", [outs[1], axis0], [squeezes_h[-1].output[0]]))
    if last_c is not None:
        nodes.append(helper.make_node("Squeeze", [outs[2], axis0], [last_c.output[0]]))
    dead = {id(n) for n in chain} | {id(squeezes_h[-1])} | ({id(last_c)} if last_c is not None else set()) | ({id(stack)} if stack is not None else set())
    if per is not None:
        dead |= per.stacked | {id(c) for _, c in per.terminals} | {id(n) for region in per.regions[:-1] for n in region}
    steps_outputs = {stack.output[0]: stack_axis} if stack is not None else {}
    if per is not None:
        steps_outputs.update({c.output[0]: g.attr(c, "axis") for _, c in per.terminals})
    return ChainFusion(first.op_type, T, S, axis, prefix, stack.output[0] if stack is not None else None, steps_outputs,
                       per.op_types if per is not None else None, edit=Edit(nodes, [], dead))


def _only_squeeze(g: GraphIndex, name: str) -> Any:
    users = g.consumers.get(name, [])
    if name in g.outputs or len(users) != 1 or users[0].op_type != "Squeeze" or g.axes(users[0]) != [0]:
        return None
    return users[0]


def _make_sequence_dynamic(model: Any, info: ChainFusion, label: str) -> None:
    graph = model.graph
    consumers = [n for n in graph.node if info.source in n.input]
    if not all(n.op_type == "Shape" or n.name.startswith(info.node) for n in consumers):
        return
    for vi in graph.input:
        if vi.name == info.source and len(vi.type.tensor_type.shape.dim) > info.axis:
            vi.type.tensor_type.shape.dim[info.axis].dim_param = label
    for vi in graph.output:  # the stacks over time, which declared the example's step count
        axis = info.steps_outputs.get(vi.name)
        if axis is not None and len(vi.type.tensor_type.shape.dim) > axis:
            vi.type.tensor_type.shape.dim[axis].dim_param = label
    info.seq_label = label
    del graph.value_info[:]
