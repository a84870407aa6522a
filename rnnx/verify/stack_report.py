"""What ``rnnx verify`` reports for a recurrent stack: one row per backend, output, length, batch
and dtype, each backend's status, and the report that prints them, as text and JSON
(:mod:`rnnx.verify.run` runs the backends and fills it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rnnx.check import Row, Verdict
from rnnx.tolerance import CALIBRATED_MULTIPLE, Tolerance

#: A row's fields in the JSON report, in order (rnnx/cli/schema/verify.json pins them): the labels
#: run.py gives each row (backend, output, seq_len, batch, dtype, against, per_step), then its statistics.
ROW_FIELDS = ("backend", "output", "seq_len", "batch", "dtype", "against", "max_abs", "mean_abs", "max_rel", "mean_rel", "atol", "rtol",
              "passed", "per_step", "p99_abs", "p99_rel", "stat", "note", "floor", "multiple", "ratio")


@dataclass
class BackendResult:
    name: str
    status: str  # "ran" or "skipped"
    reason: str = ""


@dataclass
class VerifyReport(Verdict):
    model: str
    source: str
    spec: str
    backends: list[BackendResult] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)  # rnnx.check rows, labelled as ROW_FIELDS says
    diagnosis: list[dict[str, Any]] = field(default_factory=list)
    driven: dict[str, Any] = field(default_factory=dict)  # how the file's inputs and outputs were mapped
    shapes: dict[str, Any] = field(default_factory=dict)  # the lengths and batches that ran
    tolerances: dict[str, Any] = field(default_factory=dict)  # by dtype, what the user set, and per-backend overrides
    notes: list[str] = field(default_factory=list)  # what the reader must know to read the rows (a quantized model's tolerance)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(replace(self, rows=[])), "rows": [r.to_json(ROW_FIELDS) for r in self.rows], "passed": self.passed}

    def __str__(self) -> str:
        lines = [f"verify {self.model} against {self.source} ({self.spec})"]
        if self.driven:
            d = self.driven
            roles = ", ".join(f"{k}={v}" for k, v in {**d["inputs"], **d["outputs"]}.items())
            lines.append(f"  driven by {d['source']}: {roles}" + (" (batch-major X and Y)" if d["batch_first"] else ""))
        if self.shapes:
            lines.append(f"  shapes: lengths {self.shapes['seq_lens']} x batches {self.shapes['batches']}" + (f" ({self.shapes['note']})" if self.shapes["note"] else ""))
        if self.tolerances:
            t = self.tolerances
            lines.append(f"  calibrated where no tolerance is set: max abs error within {CALIBRATED_MULTIPLE:g}x the rounding floor, the reference's "
                         "arithmetic run in the same dtype (the 'floor' column: multiple x floor: ratio reached)")
            lines.append("  otherwise, and for float64 (Polygraphy's: a value fails only past both atol and rtol): "
                         + "; ".join(f"{k} {Tolerance(**v)}" for k, v in t.get("by_dtype", {}).items())
                         + (f"; set: {', '.join(f'{k}: {v}' for k, v in t['given'].items())}" if t.get("given") else "")
                         + (f"; per backend: {', '.join(f'{k}: {Tolerance(**v)}' for k, v in t['backends'].items())}" if t.get("backends") else ""))
        lines += [f"  {b.name:<10} {b.status}" + (f": {b.reason}" if b.reason else "") for b in self.backends]
        lines += [f"  note: {note}" for note in self.notes]
        lines.append(f"{'backend':<10} {'vs':<9} {'dtype':<5} {'output':<6} {'T':>4} {'B':>3} {'max abs':>9} {'mean abs':>9} {'p99 abs':>9} {'max rel':>9}  "
                     f"{'atol, rtol, stat | floor':<24} result")
        for r in self.rows:
            verdict = "ok" if r.passed else "FAIL" + (f" ({r.note})" if r.note else "")
            tol = f"{r.multiple:g} x {r.floor:.1e}: {r.ratio:.2g}" if r.floor is not None else f"{r.atol:g}, {r.rtol:g}, {r.stat}"
            lines.append(f"{r.backend:<10} {r.against:<9} {r.dtype:<5} {r.output:<6} {r.seq_len:>4} {r.batch:>3} {r.max_abs:>9.2e} {r.mean_abs:>9.2e} "
                         f"{r.p99_abs:>9.2e} {r.max_rel:>9.2e}  {tol:<24} {verdict}")
        for d in self.diagnosis:
            lines += [f"diagnosis for {d['backend']}: {line}" for line in d["lines"]]
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)
