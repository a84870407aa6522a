"""What an export reports, and how it writes: atomically, after the self-check passed.
Shared by the torch.export path and the TorchScript path."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters import record
from rnnx.exporters.audit import AuditResult, DimensionAudit, judge
from rnnx.exporters.determinism import Variation
from rnnx.exporters.selfcheck import LAYER_CHECK, SelfCheck, refuse_unvaried, run_self_check, torch_truths
from rnnx.exporters.size_runs import refused_dimensions, ties
from rnnx.exporters.stream_plan import STREAMING
from rnnx.fileio import atomic_output
from rnnx.formats.onnx_build import write_model
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.tolerance import Tolerances


@dataclass
class ExportReport:
    path: str
    opset: int
    op_types: dict[str, int]
    recurrences: list[dict[str, Any]]
    axes: dict[str, dict[int, str]] = field(default_factory=dict)
    tracing: str = ""
    lowered: list[str] = field(default_factory=list)
    unrolled_cells: list[str] = field(default_factory=list)
    fused: list[dict[str, Any]] = field(default_factory=list)
    external_data: bool = False
    written: bool = True
    check: SelfCheck | None = None
    notes: list[str] = field(default_factory=list)
    route: str = ""  # which translation route made the file (torch.onnx's dynamo or TorchScript exporter)

    @property
    def passed(self) -> bool:
        return self.check is None or bool(self.check)

    @property
    def native_nodes(self) -> int:
        return sum(self.op_types.get(op, 0) for op in NATIVE_OPS)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,  # as verify's report: false when the self-check failed (nothing written)
            "path": self.path,
            "written": self.written,
            "opset": self.opset,
            "op_types": self.op_types,
            "native_nodes": self.native_nodes,
            "recurrences": self.recurrences,
            "axes": {name: {str(d): label for d, label in dims.items()} for name, dims in self.axes.items()},
            "tracing": self.tracing,
            "route": self.route,
            "lowered": self.lowered,
            "unrolled_cells": self.unrolled_cells,
            "fused": self.fused,
            "external_data": self.external_data,
            "check": None if self.check is None else self.check.to_json(),
            "notes": self.notes,
        }

    def __str__(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_types.items()))
        head = f"wrote {self.path}" if self.written else f"did not write {self.path} (the self-check failed)"
        lines = [f"{head} (opset {self.opset}{', external data' if self.external_data else ''})", f"nodes: {ops}"]
        for r in self.recurrences:
            lines.append(f"  {r['module'] or '(the model)'}: {r['spec']} -> {r['onnx']}")
        if self.axes:
            lines.append("dynamic axes: " + "; ".join(f"{name}[{', '.join(f'{d}={label}' for d, label in dims.items())}]" for name, dims in self.axes.items() if dims))
        if self.route:
            lines.append(f"route: {self.route}")
        if self.tracing:
            lines.append(f"traced: {self.tracing}")
        lines += [f"note: {n}" for n in self.notes]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


class CheckFailed(Exception):
    """Raised inside the atomic write so that the file is not renamed into place."""


# Loggers that print while torch traces and translates: torch's fake tensors log the full
# traceback of a failed shape check at ERROR ("failed while attempting to run meta for
# aten.mm"), symbolic shapes its guards, dynamo and export their retries, torch.onnx and
# onnxscript their progress. rnnx reports the failure itself, in one line. "torch" covers its
# children that have no level of their own; the others are named because torch's logging
# setup or a user's TORCH_LOGS may have given them one.
QUIET_LOGGERS = ("torch", "torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes", "torch.fx", "torch._dynamo",
                 "torch.export", "torch._export", "torch._functorch", "torch._guards", "torch.onnx", "onnxscript", "onnx_ir")
_SILENT = logging.CRITICAL + 1


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """torch.onnx prints progress and warnings of its own, and torch.export logs its failures
    (a traceback of ~20 lines) before raising them: keep stdout clean for --json and stderr for
    rnnx's one line. TORCH_LOGS, a user's explicit request for torch's logs, is respected."""
    names = () if os.environ.get("TORCH_LOGS") else QUIET_LOGGERS
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(_SILENT)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# torch's size symbols: s66 (backed by an example's size), u3 (unbacked: data-dependent).
_SYMBOL = re.compile(r"\b[su]\d+\b")


def first_line(exc: BaseException) -> str:
    """The line of ``exc``'s message that says what failed, in the user's terms: torch's size
    symbols (``s66``) become the example's sizes where the trace that raised holds them
    (otherwise "a dynamic size"), and torch's suggested fixes are kept, whole, at the end."""
    text = str(exc).strip()
    line = type(exc).__name__
    for candidate in text.splitlines():
        candidate = candidate.strip()
        if candidate and not candidate.startswith(("Failed to", "-", "#", "(Refer", "Traceback")):
            line = candidate[:300]
            break
    fixes = suggested_fixes(text)
    if not isinstance(exc, RNNXError) and _SYMBOL.search(line):  # rnnx's own messages are already in the user's terms
        sizes = _traced_sizes(exc)
        if sizes or _raised_in_torch(exc):
            line = _SYMBOL.sub(lambda m: sizes.get(m.group(0), "a dynamic size" if m.group(0)[0] == "s" else "a data-dependent size"), line)
    if fixes and not any(fix in line for fix in fixes):
        line = line.rstrip() + f" (torch suggests: {'; '.join(fixes)})"
    return line


def suggested_fixes(text: str) -> list[str]:
    """torch's "Suggested fixes:" block, one fix a line (``frames = Dim('frames', min=6)``)."""
    _, found, rest = text.partition("Suggested fixes:")
    fixes: list[str] = []
    for fix in rest.splitlines() if found else ():
        fix = fix.strip()
        if not fix:
            if fixes:
                break
            continue
        if " = " not in fix:
            break
        fixes.append(fix)
    return fixes


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 8:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def _traced_sizes(exc: BaseException) -> dict[str, str]:
    """torch's size symbols -> the sizes they stood for in the trace that raised ``exc``, from
    the ShapeEnv that the frames of its traceback (and its causes') still hold."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    envs: dict[int, Any] = {}
    for link in _chain(exc):
        tb = link.__traceback__
        while tb is not None:
            for value in list(tb.tb_frame.f_locals.values()):
                env = None
                if isinstance(value, ShapeEnv):
                    env = value
                elif isinstance(value, FakeTensorMode):
                    env = value.shape_env
                elif isinstance(value, FakeTensor):
                    env = value.fake_mode.shape_env
                elif isinstance(value, (torch.SymInt, torch.SymFloat)):
                    env = getattr(value.node, "shape_env", None)
                if env is not None:
                    envs.setdefault(id(env), env)
            tb = tb.tb_next
    sizes: dict[str, str] = {}
    for env in envs.values():
        for table in ("backed_var_to_val", "unbacked_var_to_val"):
            for symbol, value in (getattr(env, table, None) or {}).items():
                try:
                    sizes.setdefault(str(symbol), str(int(value)))
                except (TypeError, ValueError):  # a symbolic or infinite value says nothing more
                    continue
        if not hasattr(env, "backed_var_to_val"):  # torch before 2.10 called it var_to_val
            for symbol, value in (getattr(env, "var_to_val", None) or {}).items():
                sizes.setdefault(str(symbol), str(value))
    return sizes


def _raised_in_torch(exc: BaseException) -> bool:
    for link in _chain(exc):
        tb = link.__traceback__
        while tb is not None:
            if f"{os.sep}torch{os.sep}" in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
    return False


def run_layer_check(check: SelfCheck, path: Path) -> None:
    """The layer-by-layer check set in :data:`~rnnx.exporters.selfcheck.LAYER_CHECK`, if any,
    on the file about to be written; a check that cannot run is a note, not a failure."""
    hook = LAYER_CHECK.get()
    if hook is None:
        return
    progress.step("checking each recurrent layer against the float64 reference")
    try:
        check.layer_failure, check.layers, notes = hook(path)
    except RNNXError as exc:
        check.notes.append(f"the layer-by-layer check could not run: {exc}")
        return
    check.notes += [f"layer check: {n}" for n in notes]


def write_checked(proto: Any, path: Path, report: ExportReport, model: Any, leaves: list[Any], structure: Any, naming: Any, check: bool, seed: int,
                   tolerances: Tolerances | None = None, audit: DimensionAudit | None = None,
                   user_static: frozenset[tuple[str, int]] = frozenset(), varying: Variation | None = None) -> AuditResult | None:
    """Check ``proto`` (the dimension audit, then the self-check, then the layer check) and
    write it to ``path`` if it passed; returns the audit's result where it ran. ``varying``: the
    outputs the model itself moves between runs, and the tolerance the caller gave them."""
    judged = None
    if check:
        progress.step("asking the torch model which sizes it accepts")
        refused = refused_dimensions(model, leaves, structure, naming, seed)
        tied = ties(model, leaves, structure, naming, refused, seed) if refused else {}
        if tied:
            record.tie_dimensions(proto, naming, tied)
            report.axes = naming.axes()
            for label, other in tied.items():
                report.notes.append(f"{label} is {other}: the model raised with {label} alone at another size ({refused.pop(label)}), and runs with the two equal")
        if refused:
            fixed = record.fix_dimensions(proto, naming, leaves, refused)
            report.axes = naming.axes()
            for label, why in refused.items():
                report.notes.append(f"{label} is static at {fixed[label]}: torch kept it dynamic, but the model itself raised at another size ({why})")
        judged = judge(audit or DimensionAudit(model, leaves, structure), proto, naming, set(user_static))
        report.axes = naming.axes()
        report.notes += judged.notes
        if judged.failure:
            report.written = False
            report.check = SelfCheck(tolerances=tolerances or Tolerances(), dims=judged.to_json(), audit_failure=judged.failure)
            return judged
    stream = STREAMING.get()  # a streaming export: its state pairs recorded in the file, and its chunked check
    if stream is not None:
        stream.annotate(proto, report)
    # The torch model's side of the self-check runs before the temporary file exists: a forward
    # that ends the process (os._exit) at one of its shapes must not leave a .part file behind.
    truth_notes: list[str] = []
    truths = torch_truths(model, leaves, structure, naming, seed, truth_notes) if check else None
    data = path.with_name(path.name + ".data")
    try:
        with atomic_output(path) as tmp:
            report.external_data = write_model(proto, tmp, path.name)
            if check:
                report.check = run_self_check(model, leaves, structure, naming, tmp, seed=seed, tolerances=tolerances,
                                              given=varying.given() if varying is not None else None, truths=truths)
                report.check.notes[:0] = truth_notes
                if varying is not None:
                    report.check.notes.append(varying.note())
                    report.check.nondeterministic = varying.to_json([o.name for o in proto.graph.output])
                report.check.dims = judged.to_json() if judged is not None else []
                if report.check and stream is not None:
                    stream.check(report.check, tmp, model, leaves, structure, naming, seed)
                if report.check:  # after the chunked check, whose cases (from the model's own states) vary the batch too
                    refuse_unvaried(report.check.cases, naming)
                if report.check:
                    run_layer_check(report.check, tmp)
                if not report.check:
                    raise CheckFailed
                freed = record.free_output_dims(proto, report.check.cases)
                if freed:  # declared as ONNX Runtime ran them: the file is written again, checked as it was
                    report.external_data = write_model(proto, tmp, path.name)
                    report.notes.append("output dimensions torch.onnx declared static, which the self-check saw at other sizes, declared dynamic: "
                                        + ", ".join(freed))
    except CheckFailed:
        report.written = False
        if report.external_data and data.exists():
            data.unlink()
    except BaseException:
        if report.external_data and data.exists():
            data.unlink()
        raise
    return judged
