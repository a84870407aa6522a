"""The routes ``rnnx.export`` tries in turn, and what each one failed with.

torch.export with every dimension offered dynamic; the same with the dimensions that reach no
recurrence made static; grown where the dimension audit found the model accepts more; and
torch.onnx's TorchScript exporter (widened the same way). The first whose file passes the
self-check is written; the report says which, and what failed first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters import ops, record, shapes, torchscript_route
from rnnx.exporters.audit import DimensionAudit, resize
from rnnx.exporters.determinism import Variation
from rnnx.exporters.export_finish import finish_graph
from rnnx.exporters.export_trace import cause_of, is_structured, module_of_op, recurrent_arguments, runs_program, to_onnx, unflatten
from rnnx.exporters.writing import ExportReport, write_checked
from rnnx.shapes.roles import BATCH
from rnnx.tolerance import Tolerances

DYNAMO = "torch.export + torch.onnx (dynamo)"
DYNAMO_STATIC = DYNAMO + " with unneeded dimensions static"
DYNAMO_GROWN = DYNAMO + " on the example grown where the model accepts it"
TORCHSCRIPT_WIDENED = torchscript_route.ROUTE + " with the dimensions the audit found dynamic"


class Routes:
    """The translation routes tried in turn, and what each gave: the first file that passes
    its self-check is written; otherwise the failure that got furthest is reported."""

    def __init__(self, model: Any, work: Any, swapped: list[tuple[str, Any]], leaves: list[Any], structure: Any, path: Path, opset: int,
                 output_names: Sequence[str] | None, bare: bool, check: bool, seed: int, tolerances: Tolerances | None,
                 asked_static: frozenset[tuple[str, int]] = frozenset(), varying: Variation | None = None,
                 labels: dict[tuple[str, int], str] | None = None) -> None:
        self.model, self.work, self.swapped, self.leaves, self.structure = model, work, swapped, leaves, structure
        self.path, self.opset, self.output_names, self.bare = path, opset, output_names, bare
        self.check, self.seed, self.tolerances = check, seed, tolerances
        self.asked_static = asked_static
        self.labels = labels or {}  # the user's names for dynamic dimensions, by (input, dim)
        self.varying = varying  # what the model itself moves between runs (rnnx.exporters.determinism)
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
            result = finish_graph(proto, naming, self.leaves, program, self.swapped, self.output_names, bare=self.bare, model=self.model,
                                   structure=self.structure, asked_static=self.asked_static, labels=self.labels)
        except RNNXError as exc:
            self.failed(label or route, exc)
            return
        report = ExportReport(
            path=str(self.path), opset=self.opset, op_types=result.op_types, recurrences=result.recurrences, axes=naming.axes(), tracing=tracing,
            lowered=result.lowered, fused=result.fused, unrolled_cells=result.unrolled, notes=result.notes, route=route,
        )
        if note:
            report.notes.insert(0, note)
        for earlier, error in self.errors:
            report.notes.append(f"{earlier} failed first: {cause_of(error)}")
        for earlier_report in self.reports:
            failure = earlier_report.check.failure() if earlier_report.check is not None else "no check"
            report.notes.append(f"{earlier_report.route} made a file first that failed its self-check: {failure}")
        judged = write_checked(proto, self.path, report, self.model, self.leaves, self.structure, naming, self.check, self.seed, self.tolerances,
                               self.audit, self.asked_static, self.varying)
        if self.made_static and judged is not None:
            # the dimensions this route traced static that the file still fixes (the audit frees
            # those of inputs nothing reads): say so where the note stands
            fixed = [(n, d, size) for n, d, size in self.made_static if any(v.input == n and v.dim == d and v.verdict != "dynamic" for v in judged.dims)]
            said = tuple(f"{n} dim {d} is static at {size}, although" for n, d, size in fixed)
            report.notes = [n for n in report.notes if n != note and not n.startswith(said)]  # the route's reason says it
            if fixed:
                report.notes.insert(0, static_note(fixed))
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
            if runs_program(self.model, self.structure)(trial):
                values = trial
                changed += [f"{self.leaves[i].name} dim {k}" for i, k in [(leaf.index, d)] + probe.partners]
        if not changed:
            leaf, d, probe = self.missed[0]
            values, changed = probe.values, [f"{leaf.name} dim {d}"]
        return values, ", ".join(dict.fromkeys(changed))

    def retrace(self, label: str, trace: Callable[[], tuple[Any, str]], labels: dict[tuple[int, int], str], note: str = "") -> tuple[Any, Any] | None:
        """A torch.export trace (``trace()``: the program and how it traced), its dimensions named
        and tried (:meth:`try_dynamo`); (program, naming), or None where it failed (``label``)."""
        try:
            program, tracing = trace()
            naming = shapes.name_dimensions(program, self.leaves, labels, ops.KINDS)
        except RNNXError as exc:
            self.failed(label, exc)
            return None
        self.try_dynamo(program, naming, tracing, note, label)
        return program, naming

    def try_dynamo(self, program: Any, naming: Any, tracing: str, note: str = "", label: str = DYNAMO) -> None:
        self.program = self.program or program
        progress.step("translating to ONNX")
        try:
            proto = to_onnx(program, self.opset)
        except RNNXError as exc:
            self.failed(label, exc)
            return
        self._finish(DYNAMO, proto, naming, program, tracing, note, label)

    def try_torchscript(self, naming: Any, program: Any) -> None:
        if naming is None:
            naming = shapes.guess_naming(self.leaves, recurrent_arguments(self.model, self.leaves, self.structure))
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
            proto = torchscript_route.translate(self.work, tuple(unflatten(values, self.structure)), names, axes, self.opset)
        except RNNXError as exc:
            if not is_structured(values, self.structure):
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
            label = partner or record.free_label(shapes.Naming({}, roles, dims, {}), "batch" if probe.role == BATCH else "seq")
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
            first.notes += [f"retried by {route}: {cause_of(exc)}" for route, exc in self.errors if route in (DYNAMO_GROWN, TORCHSCRIPT_WIDENED)]
            return first
        if self.reports:  # a file was made but failed its check: that got furthest
            return self.reports[-1]
        route, exc = self.errors[0]
        if len(self.errors) == 1:
            raise exc
        tried = "; ".join(f"{r}: {cause_of(e)}" for r, e in self.errors)
        where = module_of_op(self.program, tried) if self.program is not None else ""
        raise RNNXError(f"no translation route could export the model{where} ({tried}); replace the operator named, or, where a dynamic size "
                        "is the cause, make it static (static= / --static); --debug prints the full trace") from exc


def static_note(static: list[tuple[str, int, int]]) -> str:
    return ("; ".join(f"{n} dim {d} static at {size}" for n, d, size in static)
            + ": torch kept it dynamic, but it reaches no recurrence, and the export with it dynamic failed (name it with dynamic= / --dynamic to insist)")
