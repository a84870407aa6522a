"""One judge: a run's output held to its truth under a rule, giving a :class:`Row`.

The rule is decided here once: where nobody set a tolerance for the output and an honest
run (the same computation in the candidate's dtype) gives a rounding floor, the calibrated
rule holds (:func:`rnnx.tolerance.compare_calibrated`); otherwise the fixed tolerance does
(:func:`rnnx.tolerance.compare_arrays`). And a row passes only where something was compared:
an output the run did not return, one cut short (another shape), one whose truth has no
finite value, or a truth that never ran, each fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.tolerance import ErrorStats, Tolerance, Tolerances, compare_arrays, compare_calibrated, quantile_label

NOT_RETURNED = "the run did not return this output"
NOTHING_COMPARED = "nothing was compared: the truth has no finite value here"
NOTHING_HELD = "nothing was compared: the truth holds no values here (a dimension of size 0)"

#: How far the honest run may land from the truth, as a share of the truth's largest magnitude,
#: and still be the same computation rounded: float32's 2^16 epsilons (0.8%), float16's and
#: bfloat16's a quarter. Honest runs measured for the calibrated rule land orders of magnitude
#: closer (rnnx/tolerance.py); one this far off is another computation (a model that draws
#: random numbers, a forward that branches on its dtype), and a floor taken from it would let
#: anything of the output's size pass, an output of zeros included.
HONEST_SHARE = {"float32": 2.0 ** -7, "float16": 0.25, "bfloat16": 0.25}
NUMBERS = "fciub"  # numpy's kinds of number: float, complex, signed and unsigned integer, bool


@dataclass(frozen=True)
class Rule:
    """How one output is held: ``fixed``, or the calibrated rule where ``honest`` (the honest run's
    array, in ``dtype``) is given."""

    fixed: Tolerance
    honest: Any = None
    dtype: str = "float32"

    @classmethod
    def of(cls, tolerances: Tolerances | None, output: str = "", dtype: str = "float32", honest: Any = None, fixed_in: str | None = None) -> Rule:
        """The rule for ``output`` run in ``dtype``: calibrated on ``honest`` where the caller set no
        tolerance for it and there is an honest run; else the tolerance set, laid over that of
        ``fixed_in`` (default ``dtype``: the whole-model checks hold every output to float32's)."""
        tolerances = tolerances or Tolerances()
        return cls(tolerances.get(output, fixed_in or dtype), honest if tolerances.calibrates(output) else None, dtype)


@dataclass
class Row:
    """One output of one run against its truth: what names it in its report (``labels``: a
    backend, an output, a case, a length ...), the error statistics, how many values were held
    to the rule, and why nothing was compared where it was not (``error``: the run or the truth
    failed). Labels and statistics read as attributes (``row.backend``, ``row.max_abs``), as the
    reports and their readers name them."""

    labels: dict[str, Any]
    stats: ErrorStats | None
    compared: int = 0
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and self.stats is not None and self.stats.passed and self.compared > 0

    def __getattr__(self, name: str) -> Any:
        labels = self.__dict__.get("labels") or {}
        if name in labels:
            return labels[name]
        if name in _STAT_FIELDS:
            return _stat(self.__dict__.get("stats"), name)
        raise AttributeError(name)

    def flat(self) -> dict[str, Any]:
        """Labels, statistics under the names reports print (``p99_abs``, ``stat`` as ``p99``), the verdict."""
        return {**self.labels, **{k: _stat(self.stats, k) for k in _STAT_FIELDS}, "passed": self.passed, "error": self.error,
                "compared": self.compared, "stats": None if self.stats is None else self.stats.to_json() | {"passed": self.passed}}

    def to_json(self, fields: Sequence[str] | None = None) -> dict[str, Any]:
        """The fields a report's schema pins, in its order (default: labels, verdict, error and the
        statistics nested); ``"**stats"`` spreads :meth:`ErrorStats.to_json` in place."""
        flat = self.flat()
        out: dict[str, Any] = {}
        for name in fields or (*self.labels, "passed", "error", "compared", "stats"):
            if name == "**stats":
                out.update(flat["stats"] or {})
            else:
                out[name] = flat[name]
        return out


# A row's statistics as reports name them (left) and where ErrorStats keeps them.
_STAT_NAMES = {"max_abs": "max_abs", "mean_abs": "mean_abs", "median_abs": "median_abs", "p99_abs": "quantile_abs",
               "max_rel": "max_rel", "mean_rel": "mean_rel", "median_rel": "median_rel", "p99_rel": "quantile_rel",
               "atol": "atol", "rtol": "rtol", "note": "note", "quantile": "quantile", "floor": "floor", "multiple": "multiple",
               "ratio": "ratio", "stat": "stat"}
_STAT_FIELDS = tuple(_STAT_NAMES)


def _stat(stats: ErrorStats | None, name: str) -> Any:
    if stats is None:
        return "" if name == "note" else None
    if name == "stat":
        return quantile_label(stats.quantile) if stats.stat == "quantile" else stats.stat
    return getattr(stats, _STAT_NAMES[name])


def judge(got: Any, truth: Any, rule: Rule, **labels: Any) -> Row:
    """``got`` (None: the run did not return it) against ``truth`` (None: the truth did not run)
    under ``rule``; ``labels`` name the row in its report."""
    if truth is None:
        return Row(labels, None, 0, "the truth was not run: nothing to hold this output to")
    want = np.asarray(truth)
    if got is None:
        stats = compare_arrays(np.zeros(0), want, rule.fixed)
        stats.passed, stats.note = False, NOT_RETURNED
        return Row(labels, stats)
    got = np.asarray(got)
    if got.dtype.kind not in NUMBERS or want.dtype.kind not in NUMBERS:  # a string "1.0" would compare as 1.0; a dict would raise
        stats = compare_arrays(np.zeros(0), np.zeros(1), rule.fixed)  # (the statistics of an output cut short: inf, failed)
        stats.note = f"nothing was compared: expected numbers, found {got.dtype} against the truth's {want.dtype}"
        return Row(labels, stats)
    honest = rule.honest
    if "c" in (got.dtype.kind, want.dtype.kind):  # float64 keeps only the real part: compare (real, imaginary) pairs
        got, want, honest = _pairs(got), _pairs(want), None
    moved = _moved(honest, want, rule.dtype) if honest is not None else ""
    if honest is not None and not moved:
        stats = compare_calibrated(got, want, honest, rule.dtype, rule.fixed)
    else:
        stats = compare_arrays(got, want, rule.fixed)
        stats.note = "; ".join(n for n in (stats.note, moved) if n)
    compared = int(np.isfinite(want.astype(np.float64)).sum()) if got.shape == want.shape else 0
    if not compared and stats.passed:
        stats.passed, stats.note = False, NOTHING_HELD if want.size == 0 else NOTHING_COMPARED
    return Row(labels, stats, compared)


def _pairs(values: np.ndarray) -> np.ndarray:
    """Each value as its (real, imaginary) pair, along a new last axis."""
    return np.stack([values.real, values.imag], axis=-1).astype(np.float64)


def _moved(honest: Any, want: np.ndarray, dtype: str) -> str:
    """Why ``honest`` gives no rounding floor for ``want`` ("" where it may): it lands further from
    the truth than :data:`HONEST_SHARE` of the truth's scale allows. A shape that differs or a
    non-finite value is :func:`rnnx.tolerance.rounding_floor`'s to refuse, with its own note."""
    share = HONEST_SHARE.get(dtype)
    if share is None or want.dtype.kind != "f":
        return ""
    h, w = np.asarray(honest, np.float64), want.astype(np.float64)
    if h.shape != w.shape or not w.size or not (np.isfinite(h).all() and np.isfinite(w).all()):
        return ""
    off, scale = float(np.abs(h - w).max()), float(np.abs(w).max())
    if off <= share * scale:
        return ""
    return (f"the truth's own {dtype} run lands {off:.3g} from it, over {share:.3g} of its scale {scale:.3g}: not the same computation "
            "rounded (a model that draws random numbers or branches on its dtype), so no rounding floor; the fixed tolerance applied")


def judge_outputs(got: Mapping[str, Any], truth: Mapping[str, Any] | None, rules: Mapping[str, Rule] | Rule, **labels: Any) -> list[Row]:
    """Each output of ``truth`` against ``got``'s of that name (one row each, ``output`` labelled),
    under its rule (one rule for all, or one per output); a truth that did not run is one failed row."""
    if truth is None:
        return [judge(None, None, rules if isinstance(rules, Rule) else Rule(Tolerance(0.0, 0.0)), output="*", **labels)]
    rows = []
    for name, want in truth.items():
        rule = rules if isinstance(rules, Rule) else rules[name]
        rows.append(judge(got.get(name), want, rule, output=name, **labels))
    return rows


def worst_failure(rows: Sequence[Row]) -> Row | None:
    """The failing row to name first: a run or truth that failed, then NaN, then the largest error."""
    failed = [r for r in rows if not r.passed]
    return max(failed, key=_badness, default=None)


def _badness(row: Row) -> tuple[bool, bool, float]:
    max_abs = row.stats.max_abs if row.stats is not None else float("inf")
    return bool(row.error), bool(np.isnan(max_abs)), float(np.nan_to_num(max_abs, nan=np.inf))
