"""A stack's check: a backend run on fresh seeded inputs at a few shapes, each output judged
against the float64 reference by :func:`rnnx.check.judge` (convert's check of a written file,
and the tests' check of every runner).

Its rows are :class:`rnnx.check.Row` s labelled ``backend``, ``output``, ``seq_len``, ``batch``,
``ran`` (False: the file was only read back and the reference run on it) and ``dtype`` (what
ran, so whose tolerance applied); :data:`ROW_FIELDS` is their JSON, as convert's ``--json``
has always written it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.check.judge import Row, Rule, judge
from rnnx.check.report import NOTHING_CHECKED, Verdict
from rnnx.parity import honest_outputs, random_inputs, reference_outputs
from rnnx.tolerance import Tolerances
from rnnx.weights import RNNWeights

DEFAULT_SHAPES = ((1, 1), (5, 3), (11, 7))  # (seq_len, batch): batch 1, and two more shapes so that nothing baked in passes

#: A row's fields in the JSON, in order (rnnx/cli/schema/convert.json's check rows).
ROW_FIELDS = ("backend", "output", "seq_len", "batch", "max_abs", "max_rel", "atol", "rtol", "passed", "ran", "mean_abs", "p99_abs",
              "mean_rel", "p99_rel", "stat", "dtype", "note", "floor", "multiple", "ratio")


def held_to(row: Row) -> str:
    """The rule a row was held to, in words: the calibrated floor, or the fixed tolerance."""
    if row.floor is not None:
        return f"max abs <= {row.multiple:g} x floor {row.floor:.2e} (ratio {row.ratio:.3g})"
    return f"atol {row.atol:g}, rtol {row.rtol:g}, {row.stat}"


def describe(row: Row) -> str:
    """One line: which output, where, how far off, and the rule it was held to."""
    seq_len, batch = row.labels.get("seq_len", 0), row.labels.get("batch", 0)
    where = f"{row.backend} {row.output}" + (f" at T={seq_len}, B={batch}" if seq_len or batch else "")
    if row.stats is None:
        return f"{where}: {row.error}"
    if row.note and not np.isfinite(row.max_abs):
        return f"{where}: {row.note} ({held_to(row)})"
    return (f"{where}: max abs error {row.max_abs:.3e} (mean {row.mean_abs:.3e}, p99 {row.p99_abs:.3e}), max rel {row.max_rel:.3e}, "
            f"beyond {held_to(row)}" + (f"; {row.note}" if row.note else ""))


@dataclass
class StackReport(Verdict):
    """Rows of a stack's check; truthy when there is at least one and every one passed."""

    rows: list[Row] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    def worst(self) -> Row | None:
        return max(self.rows, key=lambda r: r.max_abs if r.stats is not None else np.inf, default=None)

    def failure(self) -> str:
        """One line naming the worst failing row and its rule ("" when everything passed)."""
        row = self.first_failure()
        if row is None:
            return "" if self.passed else NOTHING_CHECKED
        return describe(row)

    def to_json(self) -> list[dict[str, Any]]:  # type: ignore[override]  # convert's --json: the rows alone
        return [r.to_json(ROW_FIELDS) for r in self.rows]

    def __str__(self) -> str:
        lines = [f"{'backend':<14} {'output':<6} {'T':>4} {'B':>3} {'max abs':>10} {'mean abs':>10} {'p99 abs':>10} {'max rel':>10}  "
                 f"{'tolerance (atol, rtol, stat | floor)':<30} result"]
        for r in self.rows:
            verdict = ("ok" if r.ran else "read back only") if r.passed else "FAIL" + (f" ({r.note or r.error})" if r.note or r.error else "")
            tol = f"{r.multiple:g} x {r.floor:.2e}: {r.ratio:.3g}" if r.floor is not None else f"{r.atol:g}, {r.rtol:g}, {r.stat}"
            lines.append(f"{r.backend:<14} {r.output:<6} {r.seq_len:>4} {r.batch:>3} {r.max_abs:>10.3e} {r.mean_abs:>10.3e} {r.p99_abs:>10.3e} "
                         f"{r.max_rel:>10.3e}  {tol:<30} {verdict}")
        return "\n".join(lines)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def compare(backend: str, got: Mapping[str, Any], want: Mapping[str, np.ndarray], seq_len: int, batch: int,
            dtype: str | Mapping[str, str] = "float32", tolerances: Tolerances | None = None,
            honest: Mapping[str, np.ndarray] | None = None, ran: bool = True) -> list[Row]:
    """Each output in ``want`` against ``got``'s of that name, judged under :meth:`Rule.of`: the
    calibrated rule on ``honest``'s output where the caller set no tolerance for it, else the
    tolerance set or that of the dtype that ran (``dtype``, or a dtype per output)."""
    rows = []
    for name, ref in want.items():
        kind = dtype if isinstance(dtype, str) else dtype.get(name, "float32")
        rule = Rule.of(tolerances, name, kind, (honest or {}).get(name))
        rows.append(judge(got.get(name), ref, rule, backend=backend, output=name, seq_len=seq_len, batch=batch, ran=ran, dtype=kind))
    return rows


def check(
    backend: str,
    run: Callable[[dict[str, np.ndarray]], Mapping[str, Any]],
    weights: RNNWeights,
    shapes: Iterable[tuple[int, int]] = DEFAULT_SHAPES,
    seed: int = 0,
    ragged: bool = False,
    batch_first: bool = False,
    states: bool = True,
    dtype: str = "float32",
    ran: bool = True,
    tolerances: Tolerances | None = None,
    feed_dtype: str | None = None,
) -> StackReport:
    """Run ``run`` at each (seq_len, batch) on fresh seeded inputs against the reference;
    ``dtype`` is what the backend takes (a float16 ONNX file takes float16 inputs), and the
    reference runs on those same rounded inputs, its arithmetic in ``dtype`` the calibrated
    rule's honest run. ``feed_dtype``: what the backend is fed where it differs from the dtype
    it computes in."""
    report = StackReport()
    for k, (seq_len, batch) in enumerate(shapes):
        inputs = random_inputs(weights, seq_len, batch, seed=seed + k, ragged=ragged, states=states, dtype=dtype)
        if feed_dtype is not None:  # a float16 file that takes float32 (Casts at its edges): values float16 holds exactly
            inputs = {key: (v.astype(feed_dtype) if v.dtype.kind == "f" else v) for key, v in inputs.items()}
        feed = dict(inputs)
        if batch_first:
            feed["X"] = inputs["X"].transpose(1, 0, 2).copy()
        want = reference_outputs(weights, feed, batch_first=batch_first)
        honest = honest_outputs(weights, feed, dtype, batch_first) if (tolerances or Tolerances()).calibrates() else None
        report.rows += compare(backend, run(feed), want, seq_len, batch, dtype, tolerances, honest, ran)
    return report
