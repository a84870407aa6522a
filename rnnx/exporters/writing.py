"""What an export reports, and how it writes: atomically, after the self-check passed.
Shared by the torch.export path and the TorchScript path."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx.exporters import record
from rnnx.exporters.selfcheck import SelfCheck, refused_dimensions, run_self_check
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

    @property
    def passed(self) -> bool:
        return self.check is None or bool(self.check)

    @property
    def native_nodes(self) -> int:
        return sum(self.op_types.get(op, 0) for op in NATIVE_OPS)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "written": self.written,
            "opset": self.opset,
            "op_types": self.op_types,
            "native_nodes": self.native_nodes,
            "recurrences": self.recurrences,
            "axes": {name: {str(d): label for d, label in dims.items()} for name, dims in self.axes.items()},
            "tracing": self.tracing,
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
        if self.tracing:
            lines.append(f"traced: {self.tracing}")
        lines += [f"note: {n}" for n in self.notes]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


class CheckFailed(Exception):
    """Raised inside the atomic write so that the file is not renamed into place."""


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """torch.onnx prints progress and warnings of its own; keep stdout clean for --json."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript", "torch._dynamo", "torch.fx", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Failed to", "-", "#", "(Refer", "Traceback")):
            return line[:300]
    return type(exc).__name__


def write_checked(proto: Any, path: Path, report: ExportReport, model: Any, leaves: list[Any], structure: Any, naming: Any, check: bool, seed: int,
                   tolerances: Tolerances | None = None) -> None:
    if check:
        refused = refused_dimensions(model, leaves, structure, naming, seed)
        if refused:
            fixed = record.fix_dimensions(proto, naming, leaves, refused)
            report.axes = naming.axes()
            for label, why in refused.items():
                report.notes.append(f"{label} is static at {fixed[label]}: torch kept it dynamic, but the model itself raised at another size ({why})")
    data = path.with_name(path.name + ".data")
    try:
        with atomic_output(path) as tmp:
            report.external_data = write_model(proto, tmp, path.name)
            if check:
                report.check = run_self_check(model, leaves, structure, naming, tmp, seed=seed, tolerances=tolerances)
                if not report.check:
                    raise CheckFailed
    except CheckFailed:
        report.written = False
        if report.external_data and data.exists():
            data.unlink()
    except BaseException:
        if report.external_data and data.exists():
            data.unlink()
        raise
