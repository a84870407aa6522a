"""One comparator for every check rnnx runs (convert, export, fuse, lower, verify).

Semantics are Polygraphy's (``polygraphy run --atol/--rtol/--check-error-stat``), so a
number read in an rnnx report means what it means there:

- absolute error ``|got - want|``; relative error ``|got - want| / |want|``, a zero in
  ``want`` replaced by 2.22e-16 (float64's epsilon) so it stays finite;
- ``elemwise`` (the default): an element fails when its absolute error exceeds ``atol``
  *and* its relative error exceeds ``rtol``; NaN fails;
- ``max``, ``mean``, ``median``, ``quantile``: that statistic of the absolute errors
  exceeds ``atol`` and the same statistic of the relative errors exceeds ``rtol``;
- tolerances may differ per output: ``Tolerances({"": default, "Y": ...})``.

A shape mismatch or a non-finite value where the reference is finite always fails.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rnnx.errors import RNNXError

STATS = ("elemwise", "max", "mean", "median", "quantile")
_EPSILON = 2.220446049250313e-16

# Per dtype of what ran, against the float64 reference. float32: an LSTM step's rounding
# (about 1e-7 relative) grows over a few hundred steps of recurrent products to ~1e-5; 1e-4
# absolute leaves a 10x margin, while a layout mistake (gates, transposes, biases) moves
# outputs by 1e-2 or more. float16/bfloat16: 10-bit (7-bit) mantissas round each step at
# 5e-4 (4e-3) relative, and saturating gates keep it from compounding much past 10x.
# float64: same arithmetic in a different order, so only summation-order rounding remains.


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    stat: str = "elemwise"
    quantile: float = 0.99

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) and v >= 0 for v in (self.atol, self.rtol)):
            raise RNNXError(f"tolerance: expected finite, non-negative atol and rtol, found atol={self.atol}, rtol={self.rtol}")
        if self.stat not in STATS:
            raise RNNXError(f"error statistic {self.stat!r}: expected one of {', '.join(STATS)}")
        if not 0.0 <= self.quantile <= 1.0:
            raise RNNXError(f"quantile {self.quantile}: expected a value between 0 and 1")

    def __str__(self) -> str:
        return f"atol {self.atol:g}, rtol {self.rtol:g}" + ("" if self.stat == "elemwise" else f", {self.stat}")


BY_DTYPE: dict[str, Tolerance] = {
    "float32": Tolerance(1e-4, 1e-3),
    "float16": Tolerance(1e-2, 1e-2),
    "bfloat16": Tolerance(5e-2, 5e-2),
    "float64": Tolerance(1e-10, 1e-8),
}


@dataclass
class Tolerances:
    """Tolerances per output name; the ``""`` entry (else the dtype's) for all others."""

    by_output: dict[str, Tolerance] = field(default_factory=dict)

    def get(self, output: str, dtype: str = "float32") -> Tolerance:
        return self.by_output.get(output) or self.by_output.get("") or BY_DTYPE.get(dtype, BY_DTYPE["float32"])

    def __bool__(self) -> bool:
        return bool(self.by_output)

    @classmethod
    def parse(cls, atol: Iterable[str] | None = None, rtol: Iterable[str] | None = None, stat: Iterable[str] | None = None,
              dtype: str = "float32") -> Tolerances:
        """From Polygraphy-style options: each item ``VALUE`` (every output) or ``NAME:VALUE``."""
        base = BY_DTYPE.get(dtype, BY_DTYPE["float32"])
        fields: dict[str, dict[str, Any]] = {}
        for key, items, convert in (("atol", atol, _float), ("rtol", rtol, _float), ("stat", stat, _stat)):
            for item in items or []:
                name, sep, value = str(item).rpartition(":")
                fields.setdefault(name if sep else "", {})[key] = convert(value, key, item)
        defaults = fields.get("", {})
        out = {}
        for name, given in fields.items():
            merged = {"atol": base.atol, "rtol": base.rtol, "stat": base.stat, **defaults, **given}
            out[name] = Tolerance(merged["atol"], merged["rtol"], merged["stat"])
        return cls(out)


def _float(text: str, key: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RNNXError(f"--{key} {item!r}: expected a number or NAME:NUMBER, like 1e-4 or Y:1e-4") from None
    if not math.isfinite(value) or value < 0:
        raise RNNXError(f"--{key} {item!r}: expected a finite, non-negative number")
    return value


def _stat(text: str, key: str, item: str) -> str:
    if text not in STATS:
        raise RNNXError(f"--check-error-stat {item!r}: expected one of {', '.join(STATS)} (or NAME:STAT)")
    return text


@dataclass
class ErrorStats:
    """How far one output is from what it should be, and whether that is within tolerance."""

    max_abs: float
    mean_abs: float
    median_abs: float
    quantile_abs: float
    max_rel: float
    mean_rel: float
    median_rel: float
    quantile_rel: float
    passed: bool
    atol: float
    rtol: float
    stat: str
    note: str = ""  # why it failed when the numbers alone do not say (shape, NaN)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _nan_max(a: np.ndarray) -> float:
    return float("nan") if np.isnan(a).any() else float(a.max(initial=0.0))


def compare_arrays(got: Any, want: Any, tol: Tolerance) -> ErrorStats:
    """``got`` (what ran) against ``want`` (the reference), both cast to float64."""
    g = np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape:
        inf = float("inf")
        return ErrorStats(inf, inf, inf, inf, inf, inf, inf, inf, False, tol.atol, tol.rtol, tol.stat,
                          note=f"shape {list(g.shape)}, expected {list(w.shape)}")
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    if g64.size == 0:
        return ErrorStats(0, 0, 0, 0, 0, 0, 0, 0, True, tol.atol, tol.rtol, tol.stat)
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.abs(g64 - w64)
        both_nan = np.isnan(g64) & np.isnan(w64)
        absdiff[both_nan] = 0.0
        reldiff = absdiff / np.where(w64 == 0, _EPSILON, np.abs(w64))
    nan = np.isnan(absdiff) | np.isnan(reldiff)
    stats = {
        "max": (_nan_max(absdiff), _nan_max(reldiff)),
        "mean": (float(absdiff.mean()), float(reldiff.mean())),
        "median": (float(np.median(absdiff)), float(np.median(reldiff))),
        "quantile": (float(np.quantile(absdiff, tol.quantile)), float(np.quantile(reldiff, tol.quantile))),
    }
    if tol.stat == "elemwise":
        failed = bool(np.any(((absdiff > tol.atol) | nan) & ((reldiff > tol.rtol) | nan)))
    else:
        a, r = stats[tol.stat]
        failed = (math.isnan(a) or a > tol.atol) and (math.isnan(r) or r > tol.rtol)
    note = ""
    if nan.any() or (np.isinf(g64) & np.isfinite(w64)).any():
        failed, note = True, "non-finite values where the reference is finite"
    (max_a, max_r), (mean_a, mean_r), (med_a, med_r), (q_a, q_r) = (stats[k] for k in ("max", "mean", "median", "quantile"))
    return ErrorStats(max_a, mean_a, med_a, q_a, max_r, mean_r, med_r, q_r, not failed, tol.atol, tol.rtol, tol.stat, note)


def per_step_max(got: Any, want: Any, time_axis: int = 0) -> list[float]:
    """Max abs error at each step along ``time_axis`` (the curve of "where does it drift")."""
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    diff = np.moveaxis(diff, time_axis, 0)
    return [float(d.max(initial=0.0)) for d in diff]


def parse_tol_items(items: Iterable[str] | None) -> Mapping[str, Tolerance]:
    """The older ``--tol BACKEND=ATOL,RTOL`` form, per backend."""
    out = {}
    for item in items or []:
        backend, _, values = item.partition("=")
        try:
            atol, rtol = (float(v) for v in values.split(","))
        except ValueError:
            raise RNNXError(f"--tol {item!r}: expected BACKEND=ATOL,RTOL like ort=1e-4,1e-3") from None
        if not all(math.isfinite(v) and v >= 0 for v in (atol, rtol)):
            raise RNNXError(f"--tol {item!r}: expected finite, non-negative tolerances like ort=1e-4,1e-3")
        out[backend] = Tolerance(atol, rtol)
    return out
