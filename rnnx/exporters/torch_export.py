"""``rnnx.export``: a PyTorch model to ONNX with native recurrent nodes, checked.

The route: copy the model, put it in eval mode, give each nn.LSTM / GRU / RNN and each
Cell rnnx's forward (one custom op per layer or step; the module is otherwise untouched),
trace with torch.export offering every input dimension as ``Dim.AUTO`` (see
:mod:`rnnx.exporters.shapes`), translate with torch.onnx, convert to the requested opset,
lower what ONNX has no node for (projections), fuse stepped cells, name the dynamic
dimensions by where they flow, record the recurrences in ``metadata_props``, and check
the file in ONNX Runtime against the original module with every dynamic dimension varied
(see :mod:`rnnx.exporters.selfcheck`) before it is renamed into place.

Where that route fails, or its file fails the check, two more are tried in turn
(:class:`Routes`): the same with every dimension that reaches no recurrence made static,
then torch.onnx's TorchScript exporter (:mod:`rnnx.exporters.torchscript_route`). The
report says which made the file and what failed first.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters import shapes
from rnnx.exporters.determinism import check_determinism
from rnnx.exporters.export_routes import DYNAMO, DYNAMO_GROWN, DYNAMO_STATIC, Routes, static_note
from rnnx.exporters.export_trace import asked_static, in_recurrence, leaf_specs, runs_on_example, trace_export, unflatten, unneeded_dimensions, without_static
from rnnx.exporters.scripted import export_scripted
from rnnx.exporters.writing import ExportReport
from rnnx.formats.onnx_build import check_opset
from rnnx.layouts.onnx import DEFAULT_OPSET
from rnnx.tolerance import Tolerances


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
    nondeterministic_atol: float | None = None,
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
    Before anything is traced the model runs twice on the example: outputs that move between the
    runs refuse the export, or, with ``nondeterministic_atol``, are held to that max abs error
    (:mod:`rnnx.exporters.determinism`).
    """
    try:
        import onnxscript  # noqa: F401  torch.onnx's exporter and rnnx's translations are written in it
        import torch
    except ImportError as exc:
        raise RNNXError(f"rnnx export needs {exc.name}, which is not installed: pip install 'rnnx[torch]'") from None

    from rnnx.exporters.modules import direct_calls_seen

    check_opset(opset)
    path = Path(path)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if isinstance(model, torch.jit.ScriptModule):
        if dynamic_shapes is not None or dynamic or static:
            raise RNNXError("a TorchScript model takes no dynamic shapes: rnnx finds its sequence and batch axes from its recurrent modules")

        return export_scripted(model, args, path, opset=opset, input_names=input_names, output_names=output_names, check=check, seed=seed,
                               tolerances=tolerances, nondeterministic_atol=nondeterministic_atol)
    if not isinstance(model, torch.nn.Module):
        raise RNNXError(f"model: expected a torch.nn.Module, found a {type(model).__name__}")
    # A recurrent module the model calls by .forward() (AWD-LSTM's WeightDrop) must still run the
    # hooks that tell which inputs reach it, and as what.
    with direct_calls_seen(model):
        return _export_module(model, args, path, opset, dynamic_shapes, dynamic, static, input_names, output_names, check, seed, tolerances,
                              nondeterministic_atol)


def _export_module(model: Any, args: tuple[Any, ...], path: Path, opset: int, dynamic_shapes: Any, dynamic: Mapping[str, Mapping[int, str | None]] | None,
                   static: Mapping[str, Sequence[int]] | None, input_names: Sequence[str] | None, output_names: Sequence[str] | None, check: bool,
                   seed: int, tolerances: Tolerances | None, nondeterministic_atol: float | None) -> ExportReport:
    """:func:`export` of an nn.Module, its arguments checked."""
    import torch

    from rnnx.exporters.modules import swap_recurrent_modules, swappable

    if path.is_dir():
        raise RNNXError(f"{path}: is a folder; give the ONNX file to write, e.g. {path / 'model.onnx'}")
    doubles = sorted({name for name, p in model.named_parameters() if p.dtype == torch.float64 and in_recurrence(model, name)})
    if doubles:
        raise RNNXError(f"{doubles[0]} is float64, which ONNX Runtime and TensorRT have no LSTM/GRU/RNN kernels for; export a float32 copy (model.float())")
    leaves, structure = shapes.leaves_of(model, args)
    if not any(leaf.is_tensor for leaf in leaves):
        raise RNNXError("example inputs: expected at least one tensor, found none")
    # A size of 0 is refused before anything runs: torch traces nothing of it, and ONNX Runtime's
    # LSTM ends the process (SIGABRT/SIGFPE, no message) in the self-check at batch 0.
    for leaf in (leaf for leaf in leaves if leaf.is_tensor and 0 in leaf.value.shape):
        raise RNNXError(f"example input {leaf.name}: expected every dimension at least 1, found dim {list(leaf.value.shape).index(0)} of size 0 "
                        f"(shape {'x'.join(map(str, leaf.value.shape))}); give an example of sizes the model takes (a dynamic batch or length "
                        "still takes other sizes in the written file)")
    if dynamic_shapes is not None:
        if dynamic or static:
            raise RNNXError("give either dynamic_shapes (torch.export's format) or dynamic/static, not both")
        specs = leaf_specs(args, dynamic_shapes)
        labels = shapes.user_labels(leaves, specs)
        offered = dynamic_shapes
    else:
        # Overrides may name inputs by forward's names or by the graph names given.
        alias = dict(zip(input_names or [], (leaf.name for leaf in leaves if leaf.is_tensor)))
        overrides = shapes.Overrides({alias.get(k, k): dict(v) for k, v in (dynamic or {}).items()},
                                     {alias.get(k, k): set(v) for k, v in (static or {}).items()})
        specs, labels = shapes.offered_shapes(leaves, overrides)
        offered = shapes.bind_dynamic_shapes(model, unflatten(specs, structure))
    shapes.rename_leaves(leaves, input_names)
    asked = asked_static(leaves, specs)
    runs_on_example(model, leaves, structure)
    varying = check_determinism(model, leaves, structure, nondeterministic_atol, output_names) if check else None

    work = copy.deepcopy(model).eval()
    swapped = swap_recurrent_modules(work)
    by_name = {(leaf.name, d): label for leaf in leaves for (i, d), label in labels.items() if leaf.index == i}
    routes = Routes(model, work, swapped, leaves, structure, path, opset, output_names, swappable(model), check, seed, tolerances, asked, varying,
                    by_name)
    progress.step("tracing with torch.export")
    program, naming = routes.retrace(DYNAMO, lambda: trace_export(model, work, leaves, structure, specs, offered, user_shapes=dynamic_shapes is not None),
                                     labels) or (None, None)
    if program is not None:
        if not routes.done and routes.missed and dynamic_shapes is None:
            # the model runs with a batch or a length the trace fixed: trace again on the inputs
            # it ran with, so that torch sees that dimension vary
            grown, how = routes.grown_example()
            progress.step(f"tracing again with {how} grown")
            again = routes.retrace(DYNAMO_GROWN, lambda: trace_export(model, work, leaves, structure, specs, offered, user_shapes=False, grown=(grown, how)),
                                   labels)
            if again and routes.done:
                program, naming = again
        unread = [] if routes.done or dynamic_shapes is not None else unneeded_dimensions(naming, leaves, labels)
        if unread:
            # torch kept these dynamic, but no recurrence reads them: a shape the model throws
            # away (a pooled image height) may be what broke the first try, so try them static.
            narrowed = without_static(specs, unread, leaves)
            progress.step("tracing again with " + ", ".join(f"{n} dim {d}" for n, d, _ in unread) + " static")
            routes.made_static = unread
            routes.retrace(DYNAMO_STATIC, lambda: trace_export(model, work, leaves, structure, narrowed,
                                                               shapes.bind_dynamic_shapes(model, unflatten(narrowed, structure)), user_shapes=False),
                           labels, static_note(unread))
            routes.made_static = []
    if not routes.done:
        routes.try_torchscript(naming, program)
    report = routes.result()
    _refuse_named(report, leaves, labels)
    if model.training:
        report.notes.append("the model was in training mode: it was exported, and checked, in eval mode (dropout off, batch-norm statistics used)")
    return report


def _refuse_named(report: ExportReport, leaves: list[Any], labels: dict[tuple[int, int], str]) -> None:
    """A dimension the user named dynamic that the file could not keep so (a length a Python
    loop runs over) is a refusal of what was asked, exit 2, not a check that failed."""
    if report.check is None or not report.check.audit_failure:
        return
    index = {leaf.name: leaf.index for leaf in leaves}
    for dim in report.check.dims:
        label = labels.get((index.get(dim["input"], -1), dim["dim"]))
        if dim["verdict"] == "missed" and label:
            raise RNNXError(f"dynamic axis {dim['input']}:{dim['dim']}={label}: asked dynamic, but the file can only fix it at {dim['size']}: "
                            f"{dim['why']}; nothing was written (drop the --dynamic / dynamic= for it, or give --static to accept the fixed size)")
