"""``rnnx.export``: a PyTorch model to ONNX with native recurrent nodes, checked.

The route: copy the model, put it in eval mode, give each nn.LSTM / GRU / RNN and each
Cell rnnx's forward (one custom op per layer or step; the module is otherwise untouched),
trace with torch.export offering every input dimension as ``Dim.AUTO`` (see
:mod:`rnnx.exporters.shapes`), translate with torch.onnx, convert to the requested opset,
lower what ONNX has no node for (projections), fuse stepped cells, name the dynamic
dimensions by where they flow, record the recurrences in ``metadata_props``, and check
the file in ONNX Runtime against the original module with every dynamic dimension varied
(see :mod:`rnnx.exporters.selfcheck`) before it is renamed into place.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters.writing import ExportReport, first_line, quiet, write_checked
from rnnx.layouts.onnx import NATIVE_OPS, OP_TYPES
from rnnx.layouts.onnx import DEFAULT_OPSET
from rnnx.formats.onnx_build import check_opset
from rnnx.tolerance import Tolerances
from rnnx.exporters import ops, shapes
from rnnx.exporters.scripted import export_scripted
from rnnx.exporters.selfcheck import run_eager
from rnnx.graphs.legalize import convert_down
from rnnx.exporters import record
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.formats.onnx_scan import lower_projections

# torch.onnx builds at 18 or later; rnnx converts down itself with onnx's converter, since
# torch.onnx's own down-conversion fails on reductions and in a process that ran its
# TorchScript exporter before.
TORCH_ONNX_MIN_OPSET = 18


def export(
    model: Any,
    example_inputs: Any,
    path: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    dynamic_shapes: Any = None,
    dynamic: Mapping[str, Mapping[int, str | None]] | None = None,
    static: Mapping[str, Sequence[int]] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    check: bool = True,
    seed: int = 0,
    tolerances: Tolerances | None = None,
) -> ExportReport:
    """Export ``model`` to ``path`` with native LSTM/GRU/RNN nodes and check it.

    With no axes given, torch finds which input dimensions are dynamic. ``dynamic_shapes``
    (torch.export's own format) is passed through as it is; ``dynamic`` and ``static`` name
    or fix single dimensions by input name and leave the rest to torch
    (``dynamic={"x": {1: "frames"}}``, ``static={"x": [2]}``). ``input_names`` and
    ``output_names`` name the graph's tensors. The file is written only if the self-check
    passes (``report.written``); ``report.passed`` says whether it did. The self-check holds
    each output to ``tolerances`` by graph output name (:class:`rnnx.tolerance.Tolerances`;
    default: the tolerance of the dtype torch returns it in, :data:`rnnx.tolerance.BY_DTYPE`).
    """
    try:
        import onnxscript  # noqa: F401  torch.onnx's exporter and rnnx's translations are written in it
        import torch
    except ImportError as exc:
        raise RNNXError(f"rnnx export needs {exc.name}, which is not installed: pip install 'rnnx[torch]'") from None

    from rnnx.exporters.modules import swap_recurrent_modules, swappable

    check_opset(opset)
    path = Path(path)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if isinstance(model, torch.jit.ScriptModule):
        if dynamic_shapes is not None or dynamic or static:
            raise RNNXError("a TorchScript model takes no dynamic shapes: rnnx finds its sequence and batch axes from its recurrent modules")

        return export_scripted(model, args, path, opset=opset, input_names=input_names, output_names=output_names, check=check, seed=seed,
                               tolerances=tolerances)
    if not isinstance(model, torch.nn.Module):
        raise RNNXError(f"model: expected a torch.nn.Module, found a {type(model).__name__}")
    if path.is_dir():
        raise RNNXError(f"{path}: is a folder; give the ONNX file to write, e.g. {path / 'model.onnx'}")
    doubles = sorted({name for name, p in model.named_parameters() if p.dtype == torch.float64 and _in_recurrence(model, name)})
    if doubles:
        raise RNNXError(f"{doubles[0]} is float64, which ONNX Runtime and TensorRT have no LSTM/GRU/RNN kernels for; export a float32 copy (model.float())")
    leaves, structure = shapes.leaves_of(model, args)
    if not any(leaf.is_tensor for leaf in leaves):
        raise RNNXError("example inputs: expected at least one tensor, found none")
    if dynamic_shapes is not None:
        if dynamic or static:
            raise RNNXError("give either dynamic_shapes (torch.export's format) or dynamic/static, not both")
        specs = _leaf_specs(args, dynamic_shapes)
        labels = shapes.user_labels(leaves, specs)
        offered = dynamic_shapes
    else:
        # Overrides may name inputs by forward's names or by the graph names given.
        alias = dict(zip(input_names or [], (leaf.name for leaf in leaves if leaf.is_tensor)))
        overrides = shapes.Overrides({alias.get(k, k): dict(v) for k, v in (dynamic or {}).items()},
                                     {alias.get(k, k): set(v) for k, v in (static or {}).items()})
        specs, labels = shapes.offered_shapes(leaves, overrides)
        offered = _unflatten(specs, structure)
    shapes.rename_leaves(leaves, input_names)

    work = copy.deepcopy(model).eval()
    swapped = swap_recurrent_modules(work)
    progress.step("tracing with torch.export")
    program, tracing = _trace(model, work, leaves, structure, specs, offered, user_shapes=dynamic_shapes is not None)
    naming = shapes.name_dimensions(program, leaves, labels, ops.KINDS)
    progress.step("translating to ONNX")
    proto = _to_onnx(program, opset)
    progress.step("naming, lowering and fusing")
    result = _finish_graph(proto, naming, leaves, program, swapped, output_names, bare=swappable(model))
    report = ExportReport(
        path=str(path), opset=opset, op_types=result.op_types, recurrences=result.recurrences, axes=naming.axes(), tracing=tracing,
        lowered=result.lowered, fused=result.fused, unrolled_cells=result.unrolled, notes=result.notes,
    )
    if model.training:
        report.notes.append("the model was in training mode: it was exported, and checked, in eval mode (dropout off, batch-norm statistics used)")
    write_checked(proto, path, report, model, leaves, structure, naming, check, seed, tolerances)
    return report


def _in_recurrence(model: Any, param: str) -> bool:
    from rnnx.exporters.modules import swappable

    owner = model.get_submodule(param.rpartition(".")[0]) if "." in param else model
    return swappable(owner)


def _leaf_specs(args: tuple[Any, ...], spec: Any) -> list[Any]:
    """torch.export's dynamic_shapes tree, one entry per flattened input."""
    import torch

    out: list[Any] = []

    def walk(arg: Any, entry: Any) -> None:
        if isinstance(arg, torch.Tensor) or not isinstance(arg, (tuple, list, dict)):
            out.append(entry)
        elif isinstance(arg, dict):
            for k in arg:
                walk(arg[k], entry.get(k) if isinstance(entry, dict) else None)
        else:
            for i, a in enumerate(arg):
                walk(a, entry[i] if isinstance(entry, (tuple, list)) and i < len(entry) else None)

    walk(args, tuple(spec) if isinstance(spec, (tuple, list)) else (spec,) if len(args) == 1 else spec)
    return out


def _unflatten(values: list[Any], structure: Any) -> Any:
    from torch.utils._pytree import tree_unflatten

    return tree_unflatten(values, structure)


def _runs(model: Any, structure: Any) -> Any:
    """A probe: does the eager model run on these inputs?"""

    def runs(values: list[Any]) -> bool:
        try:
            run_eager(model, values, structure)
            return True
        except Exception:  # any exception means "not at this shape"; the user's model may raise anything
            return False

    return runs


def _trace(model: Any, work: Any, leaves: list[Any], structure: Any, specs: list[Any], offered: Any, user_shapes: bool) -> tuple[Any, str]:
    """The ExportedProgram, and how size-1 dimensions were handled (for the report)."""
    import torch
    import torch.fx.experimental._config as fx_config

    from rnnx.exporters.modules import packed_sequences_as_lengths

    values = [leaf.value for leaf in leaves]
    attempts: list[tuple[list[Any], bool, str]] = []
    has_one = any(leaf.is_tensor and 1 in leaf.value.shape for leaf in leaves)
    if user_shapes:
        attempts.append((values, True, "with the dynamic shapes given, size-oblivious (as torch.onnx does)"))
    elif has_one:
        grown, which = shapes.grow_size_one(_runs(model, structure), leaves, specs)
        if which:
            attempts.append((grown, False, "on a copy of the example grown to 2 along " + ", ".join(f"{n} dim {d}" for n, d in which)
                             + " (size-1 dimensions the model also runs with), so that torch sees them as dynamic"))
            attempts.append((values, True, "size-oblivious (torch's backed_size_oblivious), so that size-1 dimensions can stay dynamic"))
        # Size-1 dimensions the model does not run with at 2 (an image's channel, one layer's
        # states) are static: torch's own 0/1 rule says so.
        attempts.append((values, False, "on the example as given; its size-1 dimensions are static"))
    else:
        attempts.append((values, False, "on the example as given"))
    errors = []
    for vals, oblivious, how in attempts:
        shapes_now = offered
        for _ in range(2):  # once more with torch's own suggested fixes, as torch.onnx does
            try:
                with quiet(), packed_sequences_as_lengths(), fx_config.patch(backed_size_oblivious=oblivious):
                    program = torch.export.export(work, _unflatten(vals, structure), dynamic_shapes=shapes_now, strict=False)
                if shapes_now is not offered:
                    how += "; named dimensions narrowed to the ranges torch found (" + first_line(errors[-1])[:120] + ")"
                return program, how
            except torch._dynamo.exc.UserError as exc:
                errors.append(exc)
                try:
                    shapes_now = torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes(exc.msg, shapes_now)
                except Exception:  # no usable suggestion: this attempt has failed
                    break
            except Exception as exc:  # torch.export raises many types; the first line says what failed
                errors.append(exc)
                break
    raise RNNXError(f"torch.export could not trace the model: {first_line(errors[0])}; the full trace is its cause (the CLI prints it with --debug)") from errors[0]


def _to_onnx(program: Any, opset: int) -> Any:
    import torch


    try:
        with quiet():
            onnx_program = torch.onnx.export(program, custom_translation_table=ops.TRANSLATIONS,
                                             opset_version=max(opset, TORCH_ONNX_MIN_OPSET), verbose=False, optimize=True)
    except Exception as exc:  # torch.onnx raises many types; the first line tells what failed
        raise RNNXError(f"torch.onnx could not translate the model: {first_line(exc)}; the full trace is its cause (the CLI prints it with --debug)") from exc
    proto = onnx_program.model_proto
    return convert_down(proto, opset) if opset < TORCH_ONNX_MIN_OPSET else proto


@dataclass
class _Finished:
    op_types: dict[str, int]
    recurrences: list[dict[str, Any]]
    lowered: list[str]
    fused: list[dict[str, Any]]
    unrolled: list[str]
    notes: list[str]


def _finish_graph(proto: Any, naming: Any, leaves: list[Any], program: Any, swapped: list[tuple[str, Any]],
                  output_names: Sequence[str] | None, bare: bool) -> _Finished:
    """Everything between torch.onnx's graph and the file: names, lowering, fusing, records."""
    import onnx

    from rnnx.exporters.modules import NativeCell, module_spec

    tensors = [leaf for leaf in leaves if leaf.is_tensor]
    record.rename_values(proto, {i.name: leaf.name for i, leaf in zip(proto.graph.input, tensors) if i.name != leaf.name})
    outputs = list(output_names) if output_names else record.output_names(program, bare, len(proto.graph.output))
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
    if stepped:
        fused = fuse_steps(proto, seq_label=record.free_label(naming, "seq"))
        fused_info = fused.rewritten
        for info in fused.rewritten:
            if info.get("dynamic_seq"):
                naming.input_dims[info["source"]][info["axis"]] = info["seq_label"]
                naming.roles[info["seq_label"]] = "length"
            notes.append(f"{info['steps']} steps of a stepped cell fused into one {info['op']} node over {info['source']}"
                         + (", sequence length dynamic" if info.get("dynamic_seq") else "")
                         + (f"; per-step {', '.join(info['hoisted'])} applied to all steps after it" if info.get("hoisted") else ""))
        calls = collections.Counter(record.module_of(n) for n in proto.graph.node if n.op_type in NATIVE_OPS)
        looped = [name for name in stepped if calls.get(name, 0) > 1]  # a cell called once is one step, not a loop
        if looped and (not fused.rewritten or fused.left_alone):
            unrolled = looped
            reasons = "; ".join(str(r) for r in fused.left_alone) or "no chain of steps over one input found"
            notes.append(f"cells stepped in Python stay one node per step, so their step count is fixed at the example's ({reasons})")
    if lowered:
        notes.append(f"ONNX has no LSTM projection: {len(lowered.rewritten)} layer(s) lowered to Scans with the input product hoisted")
    proto.ir_version = min(proto.ir_version, onnx.helper.find_min_ir_version_for(list(proto.opset_import)))
    record.drop_unused_initializers(proto)
    onnx.checker.check_model(proto)
    recurrences = [
        {"module": name, "spec": str(module_spec(m)), "onnx": _onnx_form(m), "batch_first": bool(getattr(m, "batch_first", False)),
         "cell": isinstance(m, NativeCell)}
        for name, m in swapped
    ]
    record.write_metadata(proto, naming, recurrences, {leaf.name: list(leaf.value.shape) for leaf in tensors})
    op_types = collections.Counter(n.op_type for n in proto.graph.node)
    return _Finished(dict(op_types), recurrences, lowered.rewritten, fused_info, unrolled, notes)


def _onnx_form(native: Any) -> str:
    from rnnx.exporters.modules import NativeCell, module_spec

    spec = module_spec(native)
    if isinstance(native, NativeCell):
        return f"one {OP_TYPES[spec.cell]} step per call"
    return "Scan (projection lowered)" if spec.proj_size else f"{spec.num_layers} x {OP_TYPES[spec.cell]}"
