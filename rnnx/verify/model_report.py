"""The report of a whole-model verify: per case and output, the error against the torch
model in float64 and float32; per recurrent layer, its error on its own inputs; and the
first layer that drifts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.check import Case, Row, Verdict
from rnnx.verify.layers import LayerCheck

#: A row's fields in the JSON report (rnnx/cli/schema/verify.json): its labels, then every statistic.
ROW_FIELDS = ("case", "output", "against", "**stats")
#: A case's fields there: its sizes and shapes, and why it was skipped or failed ("" where not).
CASE_FIELDS = ("name", "sizes", "shapes", "skipped", "error", "at_example")


@dataclass
class WholeModelReport(Verdict):
    model: str
    against: str
    inputs: dict[str, list[int | str]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)  # labelled case, output, against ("torch float64" or "torch float32")
    layers: list[LayerCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    self_check: bool = False  # no torch model: each layer against its own stored weights only
    called: str = ""  # how the torch model was called (the file's call record, the model's example_inputs, flat)
    # each input dimension: what the file says, what the torch model says, and which decided the sizes checked
    # (rnnx.verify.model_dims.DimSource as JSON); empty where no torch model was asked
    dimensions: list[dict[str, Any]] = field(default_factory=list)
    refused: str = ""  # a failed case at a size only the torch model vouched for, in one line
    # each batch or length the file declares dynamic that no case that ran varied: "seq (held at 8)"; the verdict line says them
    not_varied: list[str] = field(default_factory=list)

    @property
    def ran(self) -> list[Case]:
        return [c for c in self.cases if not c.skipped]

    @property
    def first_drift(self) -> LayerCheck | None:
        return next((la for la in self.layers if la.status == "drifts"), None)

    def _judged(self) -> list[Row]:
        """The rows the verdict rests on: against the float64 torch model when it ran."""
        return [r for r in self.rows if r.against == "torch float64"] or self.rows

    @property
    def passed(self) -> bool:
        judged = self._judged()
        if self.self_check:
            checked = [la for la in self.layers if la.status != "not checked"]
            return bool(self.ran) and not any(c.error for c in self.cases) and bool(checked) and self.first_drift is None
        return (bool(self.ran) and not any(c.error for c in self.cases) and bool(judged) and all(r.passed for r in judged)
                and self.first_drift is None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_drift
        return {"model": self.model, "against": self.against, "self_check": self.self_check, "passed": self.passed, "inputs": self.inputs, "roles": self.roles,
                "cases": [c.to_json(CASE_FIELDS) for c in self.cases], "rows": [r.to_json(ROW_FIELDS) for r in self.rows],
                "layers": [la.to_json() for la in self.layers], "first_drift": first.name if first else None, "notes": self.notes,
                "called": self.called, "dimensions": self.dimensions, "refused": self.refused or None,
                "not_varied": self.not_varied}

    def __str__(self) -> str:
        if self.self_check and self.against != "its own weights":  # a weights file given: its groups are the layers' truth
            head = f"against {self.against}: each recurrent layer against the float64 reference with the weights of the group of its spec"
        elif self.self_check:
            head = "on its own weights: each recurrent layer against the float64 reference (give --against to check the weights too)"
        else:
            head = f"against the torch model {self.against}"
        lines = [f"verify {self.model} {head}"]
        lines.append("  inputs: " + "; ".join(f"{k} ({', '.join(map(str, v))})" for k, v in self.inputs.items())
                     + ("  dynamic: " + ", ".join(f"{k} ({v})" for k, v in self.roles.items()) if self.roles else ""))
        if self.called:
            lines.append(f"  torch called as {self.called}")
        if self.dimensions:
            lines.append("  sizes checked, per input dimension (the torch model asked which it takes, as rnnx export's audit asks):")
            lines += [f"    {d['line']}" for d in self.dimensions]
        lines += [f"  note: {n}" for n in self.notes]
        judged = self._judged()
        width = max([len(c.name) for c in self.cases] + [4]) + 1
        lines.append("  cases: " + "; ".join(c.name for c in self.cases))
        if judged or any(c.skipped or c.error for c in self.cases):
            lines.append(f"{'case':<{width}} {'output':<14} {'vs':<14} {'max abs':>10} {'mean abs':>10} {'p99 abs':>10} {'max rel':>10}  result")
        for c in self.cases:
            if c.skipped or c.error:
                lines.append(f"{c.name:<{width}} {'skipped: ' + c.skipped if c.skipped else 'FAIL: ' + c.error}")
        for r in judged:
            s = r.stats
            if s is None:  # a truth that did not run: no statistics, the row's error says why
                lines.append(f"{r.case:<{width}} {r.output[:14]:<14} {r.against:<14} FAIL: {r.error}")
                continue
            verdict = "ok" if s.passed else f"FAIL ({s.note or s.rule})"
            if s.floor is not None:
                verdict += f" ({s.ratio:.2g}x the rounding floor {s.floor:.1e}; {s.multiple:g}x allowed)"
            lines.append(f"{r.case:<{width}} {r.output[:14]:<14} {r.against:<14} {s.max_abs:>10.2e} {s.mean_abs:>10.2e} {s.quantile_abs:>10.2e} {s.max_rel:>10.2e}  {verdict}")
        if len(judged) < len(self.rows):
            worst = max((r.stats.max_abs for r in self.rows if r not in judged and r.stats is not None), default=0.0)
            lines.append(f"  (against torch in float32 as well: max abs {worst:.2e}; every row is in the JSON report)")
        if self.layers:
            lines.append("layer by layer (each recurrent layer on the inputs it received, against the float64 reference):")
            for la in self.layers:
                where = f"{la.op} {la.form}, {la.truth}" if la.truth else f"{la.op} {la.form}"
                if la.status == "not checked":
                    lines.append(f"  {la.name:<28} {where}: not checked ({la.reason})")
                else:
                    ratio = f" ({la.ratio:.2g}x its rounding floor)" if la.ratio is not None else ""
                    lines.append(f"  {la.name:<28} {where}: max abs {la.max_abs:.2e}{ratio} {'ok' if la.status == 'ok' else 'DRIFTS'}")
        first = self.first_drift
        if first is not None:
            steps = ", ".join(f"{e:.1e}" for e in first.per_step[:12]) + (" ..." if len(first.per_step) > 12 else "")
            lines.append(f"first layer out of tolerance: {first.name} ({first.op}, {first.truth}) at {first.worst_case}; error per step: {steps}")
            lines += [f"  diagnosis: {d}" for d in first.diagnosis]
        elif self.rows and not self.passed and self.layers and all(la.status != "not checked" for la in self.layers):
            lines.append("every recurrent layer matches on its own inputs: the difference comes from the graph's other operators")
        if self.refused:
            lines.append(f"the file fails where the torch model runs: {self.refused}")
        held = f" (not varied, so not checked at other sizes: {'; '.join(self.not_varied)})" if self.not_varied else ""
        lines.append(("PASS" if self.passed else "FAIL") + held)
        return "\n".join(lines)


def judge_returns(cases: list[Case], runs: list[tuple[str, dict[str, Any]]], outputs: list[str]) -> None:
    """With no torch model to hold them to, what the file returns is still held to being there:
    each case whose run returned an output with no values, or with NaN, fails naming it. Its layers
    can all match while a head multiplies the result by NaN (a check must not pass on part of
    the file). Infinities are left alone: a masked log-probability is -inf by design."""
    by_name = {c.name: c for c in cases}
    for name, got in runs:
        case = by_name.get(name)
        if case is None or case.error:
            continue
        for out in outputs:
            value = np.asarray(got[out]) if out in got else None
            if value is None or value.size == 0:
                case.error = f"output {out} returned no values ({'shape ' + str(list(value.shape)) if value is not None else 'not returned'})"
            elif value.dtype.kind in "fc" and np.isnan(value).any():
                case.error = f"output {out} holds NaN ({int(np.isnan(value).sum())} of {value.size} values) on finite inputs"
            if case.error:
                break
