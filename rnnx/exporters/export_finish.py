"""The translated graph made rnnx's: native recurrent nodes from the custom ops, stepped
cells and unrolled steps fused, projections lowered, inputs the trace dropped kept, dynamic
dimensions named by where they flow, and the records written."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rnnx.errors import RNNXError
from rnnx.exporters import call_record, record
from rnnx.exporters.example_values import value_summary
from rnnx.exporters.export_trace import unflatten
from rnnx.exporters.writing import first_line
from rnnx.formats.onnx_scan import lower_projections
from rnnx.graphs.export_repairs import drop_noop_squeezes, separate_outputs
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.graphs.index import all_graphs
from rnnx.graphs.reroll import left_unrolled, reroll
from rnnx.layouts.onnx import NATIVE_OPS, OP_TYPES
from rnnx.shapes.roles import BATCH, LENGTH, OTHER


@dataclass
class Finished:
    op_types: dict[str, int]
    recurrences: list[dict[str, Any]]
    lowered: list[str]
    fused: list[dict[str, Any]]
    unrolled: list[str]
    notes: list[str]


def finish_graph(proto: Any, naming: Any, leaves: list[Any], program: Any, swapped: list[tuple[str, Any]],
                  output_names: Sequence[str] | None, bare: bool, model: Any = None, structure: Any = None,
                  asked_static: frozenset[tuple[str, int]] = frozenset(), labels: dict[tuple[str, int], str] | None = None) -> Finished:
    """Everything between torch.onnx's graph and the file: names, lowering, fusing, records."""
    import onnx

    from rnnx.exporters.modules import NativeCell, module_spec

    tensors = [leaf for leaf in leaves if leaf.is_tensor]
    if len(proto.graph.input) != len(tensors):
        _keep_dropped_inputs(proto, tensors)
    wanted = {i.name: leaf.name for i, leaf in zip(proto.graph.input, tensors) if i.name != leaf.name}
    _make_room(proto, set(wanted.values()) - set(wanted))
    record.rename_values(proto, wanted)
    repairs = separate_outputs(proto).rewritten + drop_noop_squeezes(proto).rewritten
    count = len(proto.graph.output)
    outputs = list(output_names) if output_names else record.output_names(program, bare, count) if program is not None else [f"output_{i}" for i in range(count)]
    if len(outputs) != len(proto.graph.output) or len(set(outputs)) != len(outputs) or not all(outputs):
        raise RNNXError(f"output names: expected {len(proto.graph.output)} distinct names (one per output tensor), found {outputs}")
    clash = set(outputs) & {leaf.name for leaf in tensors}
    if clash:
        raise RNNXError(f"output names: {sorted(clash)[0]!r} is also an input's name; choose another")
    record.rename_values(proto, {o.name: new for o, new in zip(proto.graph.output, outputs) if o.name != new})
    record.rename_dims(proto, naming.rename)
    record.name_weights(proto)
    lowered = lower_projections(proto)
    stepped = [name for name, m in swapped if isinstance(m, NativeCell)]
    notes = []
    fused_info: list[dict[str, Any]] = []
    unrolled: list[str] = []
    # A cell written by hand (Linear layers, gate chunks, sigmoid and tanh) and looped over
    # time in Python is traced as that many decomposed steps: each becomes a one-step native
    # node here, and the chain one node over the sequence below, as stepped nn cells do.
    cells = fuse_cells(proto)
    if cells.rewritten:
        notes.append(f"{len(cells.rewritten)} step(s) of a recurrent cell written from elementwise operations recognised as native "
                     f"{'/'.join(sorted({n.op_type for n in proto.graph.node if n.op_type in NATIVE_OPS}))} steps")
    if stepped or cells.rewritten:
        fused = fuse_steps(proto, seq_label=record.free_label(naming, "seq"))
        fused_info = [chain.to_json() for chain in fused.rewritten]
        for info in fused_info:
            if info.get("dynamic_seq") and info["source"] in naming.input_dims:  # a source computed inside the graph has no input dim to name
                dims = naming.input_dims[info["source"]]
                dims[info["axis"]] = info["seq_label"]
                naming.roles[info["seq_label"]] = "length"
                batch = dims[1 - info["axis"]] if len(dims) > 1 else None
                if isinstance(batch, str) and naming.roles.get(batch) == OTHER:  # a hand-written cell's batch reached no nn module
                    naming.roles[batch] = BATCH
            notes.append(f"{info['steps']} steps of a stepped cell fused into one {info['op']} node over {info['source']}"
                         + (", sequence length dynamic" if info.get("dynamic_seq") else "")
                         + (f"; per-step {', '.join(info['hoisted'])} applied to all steps after it" if info.get("hoisted") else ""))
        calls = collections.Counter(record.module_of(n) for n in proto.graph.node if n.op_type in NATIVE_OPS)
        looped = [name for name in stepped if calls.get(name, 0) > 1]  # a cell called once is one step, not a loop
    # Whatever loop over time is still unrolled (a cell with work between its steps, a loop
    # with no cell at all) is re-rolled into one Loop where its steps are one step repeated.
    rolled = _reroll(proto, naming, notes, asked_static, labels or {}, tensors)
    if not rolled and (stepped or cells.rewritten):  # once re-rolled, no step count stays fixed at the example's
        if cells.rewritten and not fused.rewritten:
            notes.append("the hand-written cell's steps stay one node per step, so their step count is fixed at the example's ("
                         + ("; ".join(str(r) for r in fused.left_alone) or "no chain of steps over one input found") + ")")
        if looped and (not fused.rewritten or fused.left_alone):
            unrolled = looped
            reasons = "; ".join(str(r) for r in fused.left_alone) or "no chain of steps over one input found"
            notes.append(f"cells stepped in Python stay one node per step, so their step count is fixed at the example's ({reasons})")
    if lowered:
        notes.append(f"ONNX has no LSTM projection: {len(lowered.rewritten)} layer(s) lowered to Scans with the input product hoisted")
    notes += [f"repaired: {r}" for r in repairs]
    proto.ir_version = min(proto.ir_version, onnx.helper.find_min_ir_version_for(list(proto.opset_import)))
    record.drop_unused_initializers(proto)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise RNNXError(f"the translated graph is not valid ONNX: {first_line(exc)}") from exc
    recurrences = [
        {"module": name, "spec": str(module_spec(m)), "onnx": _onnx_form(m), "batch_first": bool(getattr(m, "batch_first", False)),
         "cell": isinstance(m, NativeCell)}
        for name, m in swapped
    ]
    call = call_record.call_of_program(program, leaves) if program is not None else call_record.call_of_module(
        model, tuple(unflatten([leaf.value for leaf in leaves], structure)), [leaf.name for leaf in tensors])
    record.write_metadata(proto, naming, recurrences, {leaf.name: list(leaf.value.shape) for leaf in tensors}, call=call,
                          values={leaf.name: value_summary(leaf.value.detach().float().cpu().numpy() if leaf.value.is_floating_point() else leaf.value.detach().cpu().numpy())
                                  for leaf in tensors})
    op_types = collections.Counter(n.op_type for n in proto.graph.node)
    return Finished(dict(op_types), recurrences, lowered.rewritten, fused_info, unrolled, notes)


def _reroll(proto: Any, naming: Any, notes: list[str], asked_static: frozenset[tuple[str, int]], labels: dict[tuple[str, int], str],
            tensors: list[Any]) -> Any:
    """Re-roll the loops over time the trace unrolled (rnnx.graphs.reroll), but where the user
    asked the length static; each re-rolled input's time axis is named a length (by the user's
    label where one was given), so the audit and the self-check vary it. A loop left unrolled
    over an axis the trace declared dynamic (TorchScript's, given the axis) reads only the
    traced steps at any length: that axis is made static, so that the audit names the loop
    rather than the file read part of a longer input."""
    rolled = reroll(proto, seq_label=record.free_label(naming, "seq"), keep=asked_static, labels=labels)
    for info in rolled.rewritten:
        for source, axis in info["sources"] if info.get("dynamic_seq") else []:
            dims = naming.input_dims.get(source)
            if dims is None:  # a sequence computed inside the graph has no input dimension to name
                continue
            dims[axis] = info["seq_label"]
            naming.roles[info["seq_label"]] = LENGTH
            batch = dims[1 - axis] if len(dims) > 1 else None
            if isinstance(batch, str) and naming.roles.get(batch) == OTHER:  # a loop's batch that reached no nn module
                naming.roles[batch] = BATCH
        what = f"segments of {info['segment']} steps" if info.get("segment") else "steps"
        notes.append(f"a Python loop over {info['source']} dim {info['axis']}, unrolled by the trace ({info['steps']} {what}), re-rolled into one ONNX Loop "
                     f"({info['carried']} carried value(s), {len(info['stacked'])} stacked output(s))"
                     + (", its length dynamic" if info.get("dynamic_seq") else ""))
    notes += [f"a loop over time the trace unrolled is not re-rolled ({d})" for d in rolled.left_alone]
    sizes = {leaf.name: list(leaf.value.shape) for leaf in tensors}
    fixed = {}
    for source, axis, count, segment in left_unrolled(proto):
        dims, example = naming.input_dims.get(source), sizes.get(source)
        if dims is None or example is None or len(dims) <= axis or not isinstance(dims[axis], str):
            continue
        if -(-example[axis] // segment) == count:  # the traced steps are all of the example's: a loop over the whole axis
            fixed[dims[axis]] = f"{source} dim {axis}"
    if fixed:
        record.fix_dimensions(proto, naming, tensors, set(fixed))
        notes += [f"{where} is static at the example's size: a Python loop over it stays unrolled, one copy per traced step" for where in fixed.values()]
    return rolled


def _keep_dropped_inputs(proto: Any, tensors: list[Any]) -> None:
    """Put back, as graph inputs, the tensors a trace dropped because nothing it recorded reads
    them (torch.onnx's TorchScript exporter drops an input that reaches only a branch condition
    or nothing): the file takes every input the model takes, in the model's order. Their
    shapes are the example's here; the dimension audit frees them, and checks that the model
    really ignores their values."""
    import onnx

    kept = {i.name: i for i in proto.graph.input}
    missing = [t for t in tensors if t.name not in kept]
    if len(kept) + len(missing) != len(tensors):
        raise RNNXError(f"the translated graph has {len(kept)} inputs for {len(tensors)} tensor inputs "
                        f"({', '.join(t.name for t in tensors)}), and their names do not say which is which")
    added = {t.name: onnx.helper.make_tensor_value_info(t.name, onnx.helper.np_dtype_to_tensor_dtype(t.value.detach().cpu().numpy().dtype),
                                                        list(t.value.shape)) for t in missing}
    ordered = [kept.get(t.name) or added[t.name] for t in tensors]
    del proto.graph.input[:]
    proto.graph.input.extend(ordered)


def _make_room(proto: Any, names: set[str]) -> None:
    """Rename any value already called one of ``names`` (torch.onnx calls a returned input's
    copy by the input's name, and the input ``<name>_orig``), so the inputs can take them."""
    used = {n for g in all_graphs(proto.graph) for node in g.node for n in list(node.input) + list(node.output)}
    used |= {v.name for v in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.initializer)}
    moves = {}
    for name in sorted(names & used):
        fresh, k = f"{name}_value", 2
        while fresh in used:
            fresh, k = f"{name}_value{k}", k + 1
        used.add(fresh)
        moves[name] = fresh
    record.rename_values(proto, moves)


def _onnx_form(native: Any) -> str:
    from rnnx.exporters.modules import NativeCell, module_spec

    spec = module_spec(native)
    if isinstance(native, NativeCell):
        return f"one {OP_TYPES[spec.cell]} step per call"
    return "Scan (projection lowered)" if spec.proj_size else f"{spec.num_layers} x {OP_TYPES[spec.cell]}"
