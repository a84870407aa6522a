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
(:class:`_Routes`): the same with every dimension that reaches no recurrence made static,
then torch.onnx's TorchScript exporter (:mod:`rnnx.exporters.torchscript_route`). The
report says which made the file and what failed first.
"""

from __future__ import annotations

import collections
import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters.writing import ExportReport, first_line, quiet, suggested_fixes, write_checked
from rnnx.layouts.onnx import NATIVE_OPS, OP_TYPES
from rnnx.layouts.onnx import DEFAULT_OPSET
from rnnx.formats.onnx_build import check_opset
from rnnx.tolerance import Tolerances
from rnnx.exporters import ops, shapes
from rnnx.exporters.scripted import export_scripted
from rnnx.exporters import torchscript_route
from rnnx.exporters.selfcheck import run_eager
from rnnx.graphs.legalize import convert_down
from rnnx.exporters import record
from rnnx.exporters.audit import DimensionAudit, resize
from rnnx.exporters.example_values import value_summary
from rnnx.formats.torch import clip
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.formats.onnx_scan import lower_projections
from rnnx.graphs.index import all_graphs
from rnnx.graphs.export_repairs import drop_noop_squeezes, separate_outputs

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
        offered = shapes.bind_dynamic_shapes(model, _unflatten(specs, structure))
    shapes.rename_leaves(leaves, input_names)
    asked = _asked_static(leaves, specs)
    _runs_on_example(model, leaves, structure)

    work = copy.deepcopy(model).eval()
    swapped = swap_recurrent_modules(work)
    routes = _Routes(model, work, swapped, leaves, structure, path, opset, output_names, swappable(model), check, seed, tolerances, asked)
    progress.step("tracing with torch.export")
    try:
        program, tracing = _trace(model, work, leaves, structure, specs, offered, user_shapes=dynamic_shapes is not None)
        naming = shapes.name_dimensions(program, leaves, labels, ops.KINDS)
    except RNNXError as exc:
        routes.failed(DYNAMO, exc)
        program = naming = None
    if program is not None:
        routes.try_dynamo(program, naming, tracing)
        if not routes.done and routes.missed and dynamic_shapes is None:
            # the model runs with a batch or a length the trace fixed: trace again on the inputs
            # it ran with, so that torch sees that dimension vary
            grown, how = routes.grown_example()
            progress.step(f"tracing again with {how} grown")
            try:
                program3, tracing3 = _trace(model, work, leaves, structure, specs, offered, user_shapes=False, grown=(grown, how))
                naming3 = shapes.name_dimensions(program3, leaves, labels, ops.KINDS)
                routes.try_dynamo(program3, naming3, tracing3, label=DYNAMO_GROWN)
                if routes.done:
                    program, naming = program3, naming3
            except RNNXError as exc:
                routes.failed(DYNAMO_GROWN, exc)
        static = [] if routes.done or dynamic_shapes is not None else _unneeded_dimensions(naming, leaves, labels)
        if static:
            # torch kept these dynamic, but no recurrence reads them: a shape the model throws
            # away (a pooled image height) may be what broke the first try, so try them static.
            narrowed = _without(specs, static, leaves)
            progress.step("tracing again with " + ", ".join(f"{n} dim {d}" for n, d, _ in static) + " static")
            try:
                program2, tracing2 = _trace(model, work, leaves, structure, narrowed, shapes.bind_dynamic_shapes(model, _unflatten(narrowed, structure)),
                                          user_shapes=False)
                naming2 = shapes.name_dimensions(program2, leaves, labels, ops.KINDS)
                routes.made_static = static
                routes.try_dynamo(program2, naming2, tracing2, _static_note(static), label=DYNAMO_STATIC)
            except RNNXError as exc:
                routes.failed(DYNAMO_STATIC, exc)
            finally:
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


def _static_note(static: list[tuple[str, int, int]]) -> str:
    return ("; ".join(f"{n} dim {d} static at {size}" for n, d, size in static)
            + ": torch kept it dynamic, but it reaches no recurrence, and the export with it dynamic failed (name it with dynamic= / --dynamic to insist)")


DYNAMO = "torch.export + torch.onnx (dynamo)"
DYNAMO_STATIC = DYNAMO + " with unneeded dimensions static"
DYNAMO_GROWN = DYNAMO + " on the example grown where the model accepts it"
TORCHSCRIPT_WIDENED = torchscript_route.ROUTE + " with the dimensions the audit found dynamic"


class _Routes:
    """The translation routes tried in turn, and what each gave: the first file that passes
    its self-check is written; otherwise the failure that got furthest is reported."""

    def __init__(self, model: Any, work: Any, swapped: list[tuple[str, Any]], leaves: list[Any], structure: Any, path: Path, opset: int,
                 output_names: Sequence[str] | None, bare: bool, check: bool, seed: int, tolerances: Tolerances | None,
                 asked_static: frozenset[tuple[str, int]] = frozenset()) -> None:
        self.model, self.work, self.swapped, self.leaves, self.structure = model, work, swapped, leaves, structure
        self.path, self.opset, self.output_names, self.bare = path, opset, output_names, bare
        self.check, self.seed, self.tolerances = check, seed, tolerances
        self.asked_static = asked_static
        self.audit = DimensionAudit(model, leaves, structure)
        # (leaf, dim, probe) of each batch or length the model accepts at another size and the
        # last file fixed: a later route is tried on the inputs the model ran with
        self.missed: list[Any] = []
        self.made_static: list[tuple[str, int, int]] = []  # what the route under way traced static
        self.errors: list[tuple[str, RNNXError]] = []
        self.reports: list[ExportReport] = []
        self.program: Any = None  # the first torch.export program, to say where a failing op sits

    @property
    def done(self) -> bool:
        return any(r.passed and r.written for r in self.reports)

    def failed(self, route: str, exc: RNNXError) -> None:
        self.errors.append((route, exc))

    def _finish(self, route: str, proto: Any, naming: Any, program: Any, tracing: str, note: str = "", label: str = "") -> None:
        try:
            progress.step("naming, lowering and fusing")
            result = _finish_graph(proto, naming, self.leaves, program, self.swapped, self.output_names, bare=self.bare, model=self.model,
                                   structure=self.structure)
        except RNNXError as exc:
            self.failed(label or route, exc)
            return
        report = ExportReport(
            path=str(self.path), opset=self.opset, op_types=result.op_types, recurrences=result.recurrences, axes=naming.axes(), tracing=tracing,
            lowered=result.lowered, fused=result.fused, unrolled_cells=result.unrolled, notes=result.notes, route=route,
        )
        if note:
            report.notes.insert(0, note)
        for earlier, exc in self.errors:
            report.notes.append(f"{earlier} failed first: {_cause(exc)}")
        for earlier_report in self.reports:
            report.notes.append(f"{earlier_report.route} made a file first that failed its self-check: {earlier_report.check.failure()}")
        judged = write_checked(proto, self.path, report, self.model, self.leaves, self.structure, naming, self.check, self.seed, self.tolerances,
                               self.audit, self.asked_static)
        if self.made_static and judged is not None:
            # the dimensions this route traced static that the file still fixes (the audit frees
            # those of inputs nothing reads): say so where the note stands
            fixed = [(n, d, size) for n, d, size in self.made_static if any(v.input == n and v.dim == d and v.verdict != "dynamic" for v in judged.dims)]
            said = tuple(f"{n} dim {d} is static at {size}, although" for n, d, size in fixed)
            report.notes = [n for n in report.notes if n != note and not n.startswith(said)]  # the route's reason says it
            if fixed:
                report.notes.insert(0, _static_note(fixed))
                for dim in report.check.dims if report.check is not None else []:
                    if (dim["input"], dim["dim"]) in {(n, d) for n, d, _ in fixed} and dim["verdict"] == "static":
                        dim["why"] += "; the export with it dynamic failed"
        if judged is not None and judged.missed:
            self.missed = judged.missed
        self.reports.append(report)

    def grown_example(self) -> tuple[list[Any], str]:
        """The example with every missed dimension (and the partners it ran with) at the size
        the model accepted, where the model runs on them all together; else the first's alone."""
        values = [leaf.value for leaf in self.leaves]
        changed: list[str] = []
        for leaf, d, probe in self.missed:
            trial = list(values)
            for i, k in [(leaf.index, d)] + probe.partners:
                if int(trial[i].shape[k]) == int(leaf.value.shape[d]):
                    trial[i] = resize(trial[i], k, probe.accepted)
            if _runs(self.model, self.structure)(trial):
                values = trial
                changed += [f"{self.leaves[i].name} dim {k}" for i, k in [(leaf.index, d)] + probe.partners]
        if not changed:
            leaf, d, probe = self.missed[0]
            values, changed = probe.values, [f"{leaf.name} dim {d}"]
        return values, ", ".join(dict.fromkeys(changed))

    def try_dynamo(self, program: Any, naming: Any, tracing: str, note: str = "", label: str = DYNAMO) -> None:
        self.program = self.program or program
        progress.step("translating to ONNX")
        try:
            proto = _to_onnx(program, self.opset)
        except RNNXError as exc:
            self.failed(label, exc)
            return
        self._finish(DYNAMO, proto, naming, program, tracing, note, label)

    def try_torchscript(self, naming: Any, program: Any) -> None:
        if naming is None:
            naming = shapes.guess_naming(self.leaves, _recurrent_arguments(self.model, self.leaves, self.structure))
        how = "torch.export's dynamic dimensions" if program is not None else "dimensions placed from the recurrent modules (torch.export failed)"
        self._torchscript(naming, program, [leaf.value for leaf in self.leaves], how)
        if not self.done and self.missed:
            # the audit found a batch or a length the model accepts and the file fixed: hand
            # the TorchScript exporter that axis too, and trace it on inputs where it is not 1
            widened, named = self._widened(naming)
            if not named:  # the axes handed over already hold them: nothing new to try
                return
            grown, changed = self.grown_example()
            self._torchscript(widened, program, grown, f"{how}, and {named} dynamic, traced with {changed} grown", TORCHSCRIPT_WIDENED)

    def _torchscript(self, naming: Any, program: Any, values: list[Any], how: str, label: str = "") -> None:
        tensors = [leaf for leaf in self.leaves if leaf.is_tensor]
        axes = {name: {d: v for d, v in enumerate(dims) if isinstance(v, str) and v.isidentifier()} for name, dims in naming.input_dims.items()}
        progress.step(f"translating with {torchscript_route.ROUTE}")
        names = [leaf.name for leaf in tensors]
        try:
            proto = torchscript_route.translate(self.work, tuple(_unflatten(values, self.structure)), names, axes, self.opset)
        except RNNXError as exc:
            if not _structured(values, self.structure):
                self.failed(label or torchscript_route.ROUTE, exc)
                return
            # the exporter flattens namedtuples and reads dicts as keywords: call the model with
            # its own structure rebuilt around flat tensors
            wrapper, flat = torchscript_route.flat_call(self.work, values, self.structure)
            try:
                proto = torchscript_route.translate(wrapper, flat, names, axes, self.opset)
            except RNNXError:
                self.failed(label or torchscript_route.ROUTE, exc)
                return
            torchscript_route.unscope(proto)
        self._finish(torchscript_route.ROUTE, proto, naming, program, f"by {torchscript_route.ROUTE}, with {how}", label=label)

    def _widened(self, naming: Any) -> tuple[Any, str]:
        """``naming`` with every missed dimension dynamic: named as a dynamic partner it ran with
        where there is one (a batch shared across inputs), else after its role."""
        dims = {name: list(v) for name, v in naming.input_dims.items()}
        roles = dict(naming.roles)
        named = []
        for leaf, d, probe in self.missed:
            if isinstance(dims.get(leaf.name, [None] * (d + 1))[d], str):
                continue
            partner = next((dims[self.leaves[i].name][k] for i, k in probe.partners
                            if isinstance(dims.get(self.leaves[i].name, [None] * (k + 1))[k], str)), None)
            label = partner or record.free_label(shapes.Naming({}, roles, dims, {}), "batch" if probe.role == shapes.BATCH else "seq")
            roles.setdefault(label, probe.role)
            for i, k in [(leaf.index, d)] + [p for p in probe.partners if not partner]:
                dims.setdefault(self.leaves[i].name, list(self.leaves[i].value.shape))[k] = label
            named.append(f"{leaf.name} dim {d} as {label}")
        return shapes.Naming(dict(naming.symbol_labels), roles, dims, dict(naming.lengths_inputs)), ", ".join(named)

    def result(self) -> ExportReport:
        passed = [r for r in self.reports if r.passed and r.written]
        if passed:
            return passed[0]
        audited = [r for r in self.reports if r.check is not None and r.check.audit_failure]
        if audited:
            # the model accepts a size the first file fixed: that is the finding; the retries'
            # failures are what was tried to get past it
            first = audited[0]
            first.notes += [f"retried by {r.route}" + (f" ({r.tracing})" if r.tracing else "") + f": {r.check.failure() if r.check is not None else 'no check'}"
                            for r in self.reports if r is not first]
            first.notes += [f"retried by {route}: {_cause(exc)}" for route, exc in self.errors if route in (DYNAMO_GROWN, TORCHSCRIPT_WIDENED)]
            return first
        if self.reports:  # a file was made but failed its check: that got furthest
            return self.reports[-1]
        route, exc = self.errors[0]
        if len(self.errors) == 1:
            raise exc
        tried = "; ".join(f"{r}: {_cause(e)}" for r, e in self.errors)
        where = _module_of_op(self.program, tried) if self.program is not None else ""
        raise RNNXError(f"no translation route could export the model{where} ({tried}); replace the operator named, or, where a dynamic size "
                        "is the cause, make it static (static= / --static); --debug prints the full trace") from exc


def _runs_on_example(model: Any, leaves: list[Any], structure: Any) -> None:
    """The model on the example as given, before any route: an example it refuses (tokens as
    floats, a wrong rank) is the user's input, and its own error says what is wrong with it."""
    progress.step("running the model on the example")
    try:
        run_eager(model, [leaf.value for leaf in leaves], structure)
    except Exception as exc:  # noqa: BLE001  the user's model may raise anything
        given = ", ".join(f"{leaf.name} {'x'.join(map(str, leaf.value.shape)) or 'scalar'} {str(leaf.value.dtype).removeprefix('torch.')}"
                          for leaf in leaves if leaf.is_tensor)
        raise RNNXError(f"the model raised on the example as given ({given}): {type(exc).__name__}: {clip(' '.join(str(exc).split()), 300)}; "
                        "give an example the model runs on (--input shapes and dtypes)") from exc


def _structured(values: list[Any], structure: Any) -> bool:
    """Whether the example holds more than tensors in tuples and lists (namedtuples, dicts,
    values that are not tensors), which the TorchScript exporter does not pass through as given."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    if any(not isinstance(v, torch.Tensor) for v in values):
        return True
    paths, _ = tree_flatten_with_path(_unflatten(values, structure))
    return any(not hasattr(k, "idx") or type(k).__name__ != "SequenceKey" for path, _ in paths for k in path)


def _module_of_op(program: Any, text: str) -> str:
    """" in <module> (<Class>)" for the first ATen op named in ``text`` that the traced program
    calls, from the node's nn_module_stack; "" where it cannot be told."""
    names = re.findall(r"aten(?:::|\.)_?(\w+)", text)
    for node in program.graph.nodes:
        target = str(getattr(node, "target", ""))
        if node.op == "call_function" and any(re.search(rf"aten\._?{re.escape(n)}\b", target) for n in names):
            stack = node.meta.get("nn_module_stack") or {}
            if stack:
                path, cls = list(stack.values())[-1]
                cls_name = getattr(cls, "__name__", str(cls).rpartition(".")[2].strip("'>"))
                return f" at {path or '(the model)'} ({cls_name})"
    return ""


def _cause(exc: BaseException) -> str:
    """An error's own words, without the wrapper rnnx and torch put around them."""
    text = first_line(exc)
    for prefix in ("torch.onnx could not translate the model: ", "torch.export could not trace the model: ",
                   f"{torchscript_route.ROUTE} could not translate the model: "):
        text = text.removeprefix(prefix)
    text = re.sub(r"^<class '[\w.]+'>: ", "", text)
    return text.split("; the full trace is its cause")[0]


def _unneeded_dimensions(naming: Any, leaves: list[Any], given: dict[tuple[int, int], str]) -> list[tuple[str, int, int]]:
    """(input, dim, size) of every dynamic input dimension that is neither a batch nor a
    length and that the user did not name."""
    out = []
    for leaf in leaves:
        for d, v in enumerate(naming.input_dims.get(leaf.name, [])):
            if isinstance(v, str) and naming.roles.get(v, shapes.OTHER) == shapes.OTHER and (leaf.index, d) not in given:
                out.append((leaf.name, d, int(leaf.value.shape[d])))
    return out


def _asked_static(leaves: list[Any], specs: list[Any]) -> frozenset[tuple[str, int]]:
    """(input, dim) of every dimension the user made static: left out of the offered entry
    (static= / --static), or, with torch.export's own dynamic_shapes, given no Dim there."""
    out = set()
    for leaf, spec in zip(leaves, specs):
        if not leaf.is_tensor:
            continue
        entry = dict(spec) if isinstance(spec, dict) else dict(enumerate(spec)) if isinstance(spec, (list, tuple)) else {}
        out |= {(leaf.name, d) for d in range(leaf.value.dim()) if entry.get(d) is None}
    return frozenset(out)


def _without(specs: list[Any], static: list[tuple[str, int, int]], leaves: list[Any]) -> list[Any]:
    """``specs`` with the ``static`` dimensions left out (torch.export keeps those at the example's size)."""
    return [_drop(spec, {d for n, d, _ in static if n == leaf.name}) or None for leaf, spec in zip(leaves, specs)]


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


def _accepts(program: Any, values: list[Any], structure: Any) -> bool:
    """Whether the traced program's input constraints admit ``values`` (its module checks them)."""
    import torch

    try:
        with quiet(), torch.no_grad():
            program.module()(*_unflatten(values, structure))
        return True
    except Exception:  # a violated constraint, or anything the graph raises at that shape
        return False


def _drop(spec: Any, dims: set[int]) -> Any:
    """A leaf's dynamic-shapes entry without ``dims`` (torch.export keeps those at the example's size)."""
    return {d: v for d, v in spec.items() if d not in dims} if isinstance(spec, dict) and dims else spec


def _recurrent_arguments(model: Any, leaves: list[Any], structure: Any) -> dict[int, tuple[str, Any]]:
    """leaf index -> ("input" or "state", module) for every example tensor that reaches an
    nn.LSTM / GRU / RNN unchanged, as its input or its initial state. Found by running the
    model once with a hook on each recurrent module, since only the call says which is which."""
    import torch

    from rnnx.exporters.modules import RECURRENT_MODULES

    ids = {id(leaf.value): leaf.index for leaf in leaves if leaf.is_tensor}
    found: dict[int, tuple[str, Any]] = {}

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else kwargs.get("input")
        if isinstance(x, torch.Tensor) and id(x) in ids:
            found.setdefault(ids[id(x)], ("input", module))
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        for state in (hx if isinstance(hx, (tuple, list)) else (hx,)):
            if isinstance(state, torch.Tensor) and id(state) in ids:
                found.setdefault(ids[id(state)], ("state", module))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in model.modules() if isinstance(m, RECURRENT_MODULES)]
    try:
        run_eager(model, [leaf.value for leaf in leaves], structure)
    except Exception:  # the model's own failure is reported by the trace, not here
        pass
    finally:
        for h in handles:
            h.remove()
    return found


def _state_layer_axes(model: Any, leaves: list[Any], structure: Any) -> dict[int, set[int]]:
    """leaf index -> {0} for every example tensor that reaches a recurrent module as its
    initial state: its first axis counts layers times directions, which no size-1 guess may
    grow; its batch axis may grow with the others."""
    return {i: {0} for i, (role, _) in _recurrent_arguments(model, leaves, structure).items() if role == "state" and leaves[i].value.dim() == 3}


def _trace(model: Any, work: Any, leaves: list[Any], structure: Any, specs: list[Any], offered: Any, user_shapes: bool,
           grown: tuple[list[Any], str] | None = None) -> tuple[Any, str]:
    """The ExportedProgram, and how size-1 dimensions were handled (for the report). ``grown``:
    inputs the model ran with where the audit found a batch or length fixed, traced on instead."""
    import torch
    import torch.fx.experimental._config as fx_config

    from rnnx.exporters.modules import data_writes_traced, packed_sequences_as_lengths

    values = [leaf.value for leaf in leaves]
    attempts: list[tuple[list[Any], bool, str]] = []
    has_one = any(leaf.is_tensor and 1 in leaf.value.shape for leaf in leaves)
    if grown is not None:
        attempts.append((grown[0], False, f"on a copy of the example with {grown[1]} at a size the model runs with, so that torch sees them vary"))
        attempts.append((grown[0], True, f"on a copy of the example with {grown[1]} at a size the model runs with, size-oblivious"))
    elif user_shapes:
        attempts.append((values, True, "with the dynamic shapes given, size-oblivious (as torch.onnx does)"))
    elif has_one:
        layer_axes = _state_layer_axes(model, leaves, structure)
        grown, which = shapes.grow_size_one(_runs(model, structure), leaves, [_drop(spec, layer_axes.get(leaf.index, set())) for leaf, spec in zip(leaves, specs)])
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
                with quiet(), packed_sequences_as_lengths(), data_writes_traced(), fx_config.patch(backed_size_oblivious=oblivious):
                    program = torch.export.export(work, _unflatten(vals, structure), dynamic_shapes=shapes_now, strict=False)
                if vals is not values and not _accepts(program, values, structure):
                    # traced on a grown copy, torch may have pinned a grown dimension at 2 or
                    # above: a program that refuses the user's own example is not kept
                    errors.append(RNNXError("the trace on the grown example refuses the example as given"))
                    break
                if shapes_now is not offered:
                    how += "; named dimensions narrowed to the ranges torch suggested (" + "; ".join(suggested_fixes(str(errors[-1]))) + ")"
                return program, how
            except torch._dynamo.exc.UserError as exc:
                errors.append(exc)
                try:
                    shapes_now = _refined(exc.msg, shapes_now)
                except Exception:  # no usable suggestion: this attempt has failed
                    break
            except Exception as exc:  # torch.export raises many types; the first line says what failed
                errors.append(exc)
                break
    raise RNNXError(f"torch.export could not trace the model: {first_line(errors[0])}; the full trace is its cause (the CLI prints it with --debug)") from errors[0]


def _refined(msg: str, dynamic_shapes: Any) -> Any:
    """torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes, for shapes
    that mix named Dims with Dim.AUTO: torch's own reads every entry's ``__name__`` and fails
    on a Dim.AUTO (a _DimHint) with AttributeError. The hints are held out while torch
    applies its fixes to the named Dims, then put back."""
    from torch.export.dynamic_shapes import _DimHint, refine_dynamic_shapes_from_suggested_fixes

    def held_out(tree: Any) -> Any:
        if isinstance(tree, _DimHint):
            return None
        if isinstance(tree, dict):
            return {k: held_out(v) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return type(tree)(held_out(v) for v in tree)
        return tree

    def put_back(given: Any, refined: Any) -> Any:
        if isinstance(given, _DimHint):
            return given
        if isinstance(given, dict) and isinstance(refined, dict):
            return {k: put_back(v, refined.get(k)) for k, v in given.items()}
        if isinstance(given, (list, tuple)) and isinstance(refined, (list, tuple)):
            return type(given)(put_back(a, b) for a, b in zip(given, refined))
        return refined

    return put_back(dynamic_shapes, refine_dynamic_shapes_from_suggested_fixes(msg, held_out(dynamic_shapes)))


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
                  output_names: Sequence[str] | None, bare: bool, model: Any = None, structure: Any = None) -> _Finished:
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
        fused_info = fused.rewritten
        for info in fused.rewritten:
            if info.get("dynamic_seq") and info["source"] in naming.input_dims:  # a source computed inside the graph has no input dim to name
                dims = naming.input_dims[info["source"]]
                dims[info["axis"]] = info["seq_label"]
                naming.roles[info["seq_label"]] = "length"
                batch = dims[1 - info["axis"]] if len(dims) > 1 else None
                if isinstance(batch, str) and naming.roles.get(batch) == shapes.OTHER:  # a hand-written cell's batch reached no nn module
                    naming.roles[batch] = shapes.BATCH
            notes.append(f"{info['steps']} steps of a stepped cell fused into one {info['op']} node over {info['source']}"
                         + (", sequence length dynamic" if info.get("dynamic_seq") else "")
                         + (f"; per-step {', '.join(info['hoisted'])} applied to all steps after it" if info.get("hoisted") else ""))
        calls = collections.Counter(record.module_of(n) for n in proto.graph.node if n.op_type in NATIVE_OPS)
        looped = [name for name in stepped if calls.get(name, 0) > 1]  # a cell called once is one step, not a loop
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
    call = record.call_of_program(program, leaves) if program is not None else record.call_of_module(
        model, tuple(_unflatten([leaf.value for leaf in leaves], structure)), [leaf.name for leaf in tensors])
    record.write_metadata(proto, naming, recurrences, {leaf.name: list(leaf.value.shape) for leaf in tensors}, call=call,
                          values={leaf.name: value_summary(leaf.value.detach().float().cpu().numpy() if leaf.value.is_floating_point() else leaf.value.detach().cpu().numpy())
                                  for leaf in tensors})
    op_types = collections.Counter(n.op_type for n in proto.graph.node)
    return _Finished(dict(op_types), recurrences, lowered.rewritten, fused_info, unrolled, notes)


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
