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

Where nobody set a tolerance, the checks use the calibrated rule instead
(:func:`compare_calibrated`, :data:`CALIBRATED_MULTIPLE`): the max abs error within a
multiple of this model's rounding floor on these inputs, measured by an honest run in the
same dtype. ``--atol/--rtol/--check-error-stat`` are explicit overrides of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from rnnx.errors import RNNXError

STATS = ("elemwise", "max", "mean", "median", "quantile")
_EPSILON = 2.220446049250313e-16

# Per dtype of what ran, against the float64 reference run on the same inputs rounded to that
# dtype (the weights stay the source's: their rounding is part of the run's error).
#
# Measured (torch 2.13 on the CPU computing in each dtype; 11 seeded stacks: LSTM with and
# without projection, GRU, tanh and relu RNN, 1 to 3 layers, bidirectional or not, hidden 5 to
# 128; 3 seeds each; lengths 1, 2, 5, 9, 17, 33, 64 at batch 4; weights at PyTorch's init scale
# 1/sqrt(hidden) and at 1.5x it). "Needed" is the smallest atol = rtol the elemwise rule passes;
# the last column is the same run held against the reference with two gates swapped (LSTM g and
# o, GRU z and n), the mildest layout mistake, at its closest over all stacks and lengths:
#
#   dtype     worst max abs  needed   mean abs  | gate swap, needed
#   float32   6.5e-7         4.2e-7   7.7e-8    | 8.9e-2
#   float16   3.9e-3         2.3e-3   4.3e-4    | 8.9e-2
#   bfloat16  3.9e-2         2.1e-2   3.9e-3    | 8.8e-2
#   float64   8.9e-16        8.9e-16  1.4e-16   | 8.9e-2
#
# So: float32 1e-4 / 1e-3 sits 200x above its rounding and 900x below a gate swap (ONNX Runtime's
# float32 errors are of the same size, ~1e-7). float16 1e-2 / 1e-2: 4x above, 9x below.
# bfloat16 5e-2 / 5e-2 has the narrowest window: 2.4x above the worst (a relu RNN at 1.5x scale;
# LSTMs and GRUs needed at most 9.7e-3) and 1.8x below the closest gate swap. float64 1e-10 /
# 1e-8 leaves room for summation order on long sequences (2e-13 at worst below) and still fails
# anything a float32 step would round.
#
# Outside that range no tolerance works: with weights at 4x the init scale and more (uniform in
# +-0.5 at hidden 64 or 128) the recurrence is chaotic and rounding grows like a mistake: float16
# reached 0.40, bfloat16 1.5, against 0.34 for a gate swap, while float32 stayed under 9e-5 and
# float64 under 2.3e-13. Check such models in fp32 (or fp64).


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
        return f"atol {self.atol:g}, rtol {self.rtol:g}, {self.stat_label}"

    @property
    def stat_label(self) -> str:
        """The statistic as reports name it: ``elemwise``, ``max``, ``mean``, ``median`` or ``p99``."""
        return quantile_label(self.quantile) if self.stat == "quantile" else self.stat

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def quantile_label(q: float) -> str:
    """``p99`` for 0.99, ``p99.9`` for 0.999."""
    return f"p{q * 100:g}"


BY_DTYPE: dict[str, Tolerance] = {
    "float32": Tolerance(1e-4, 1e-3),
    "float16": Tolerance(1e-2, 1e-2),
    "bfloat16": Tolerance(5e-2, 5e-2),
    "float64": Tolerance(1e-10, 1e-8),
}


# --- the calibrated rule: a multiple of this model's own rounding floor --------------------------
#
# A fixed atol/rtol cannot serve every model: behind a Linear and a log-softmax, a layout
# mistake comes out 10^4 times smaller in relative terms than on a stack's own outputs, under
# 1e-4 / 1e-3. So where nobody set a tolerance, each check also runs an honest computation in
# the candidate's dtype (torch's model in float32, or the float64 reference's own arithmetic
# run in float32) on the same inputs. Its distance from the float64 reference is this model's
# rounding floor on these inputs, per output; the candidate's max abs error must stay within
# CALIBRATED_MULTIPLE times it. The floor is never taken below one unit of the dtype's
# epsilon at the output's largest magnitude or at 1, whichever is larger: an output the honest
# run gets exactly (a copy, a zero) still leaves room for a differently rounded step, and
# ONNX Runtime's tanh and sigmoid are approximations whose error is absolute, a few epsilons
# whatever the value (a tanh RNN's output of 0.028 came out 23 epsilons at 0.028 off, 0.6 at 1).
#
# Measured (benchmarks/calibration.py; float32, ONNX Runtime 1.23 and torch 2.13 on the CPU,
# the numpy float32 reference as the honest run; 10 stacks: LSTM plain, projected, 3-layer and
# bidirectional, GRU reset after and before, tanh and relu RNN, hidden 16 to 128; weights at
# init scale and 1.5x; lengths 1, 7, 40, 150 at batches 1 to 3; the stack's own outputs and a
# Linear + log-softmax head; 544 outputs in all):
#
#   honest: ONNX Runtime's max abs error / the floor    worst 2.4, p99 1.8
#   planted in the last layer's last direction, the same ratio at its smallest, per output:
#     1% scale on one gate's input rows                    51 (h_n of a projected LSTM; the
#                                                          head: 113, at 3.8e-5, which 1e-4 /
#                                                          1e-3 passed, as it did 77 of 544)
#     one bias dropped                                     2.0e4
#     one gate's R transposed                              1.7e4
#     the last two gates swapped                           1.4e5
#
# 16 sits 6.7x above the worst honest ratio and 3.2x below the mildest mistake. float16 (torch
# computing in float16 against the numpy reference in float16, the same stacks): honest worst
# 1.7; a gate swap 82; a 1% scale lies below float16's rounding (0.28) and no tolerance can see
# it. bfloat16 uses the same rule with its epsilon. float64 has no more exact run to measure a
# floor against: it keeps the fixed rule above.
CALIBRATED_MULTIPLE = 16.0
CALIBRATED_DTYPES = ("float32", "float16", "bfloat16")
_EPSILONS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def rounding_floor(honest: Any, want: Any, dtype: str, least_scale: float = 1.0) -> float | None:
    """The honest run's max abs distance from the float64 reference, never below one epsilon of
    ``dtype`` at the output's largest magnitude (or at ``least_scale``, if larger); None where it says
    nothing (a shape that differs, a non-finite value, a dtype not calibrated). ``least_scale=0``
    holds an output to its own scale, however small (the device check: an fp16 output of 0.01 must
    not let an engine of zeros pass); never 0, so that a floor always divides."""
    if dtype not in _EPSILONS:
        return None
    h, w = np.asarray(honest, np.float64), np.asarray(want, np.float64)
    if h.shape != w.shape or not (np.isfinite(h).all() and np.isfinite(w).all()):
        return None
    if not w.size:
        return _EPSILONS[dtype]
    scale = max(float(np.abs(w).max()), least_scale)
    return max(float(np.abs(h - w).max()), _EPSILONS[dtype] * scale, float(np.finfo(np.float32).tiny))


def calibrated(floor: float, multiple: float = CALIBRATED_MULTIPLE) -> Tolerance:
    """The tolerance the calibrated rule applies: max abs error within ``multiple`` floors."""
    return Tolerance(multiple * floor, 0.0, "max")


def compare_calibrated(got: Any, want: Any, honest: Any, dtype: str, fixed: Tolerance) -> ErrorStats:
    """``got`` against ``want`` (the float64 reference) under the calibrated rule, the floor
    measured by ``honest`` (see :data:`CALIBRATED_MULTIPLE`); under ``fixed`` where the honest
    run gives no floor (float64, a non-finite value), with a note saying so."""
    floor = None if honest is None else rounding_floor(honest, want, dtype)
    if floor is None:
        stats = compare_arrays(got, want, fixed)
        if honest is not None and dtype in _EPSILONS and stats.passed:
            stats.note = "no rounding floor (the honest run was not finite or not this shape): the fixed tolerance applied"
        return stats
    stats = compare_arrays(got, want, calibrated(floor))
    stats.floor, stats.multiple = floor, CALIBRATED_MULTIPLE
    return stats


@dataclass
class Tolerances:
    """Tolerances per output name, for the checks of one command.

    Two ways to fill it: ``by_output`` holds complete :class:`Tolerance` entries (``""`` for
    every output not named); ``given`` holds only the fields a user set (``Tolerances.parse``),
    laid over the tolerance of the dtype that ran, so ``--rtol 1e-2`` alone keeps each dtype's
    own atol. Empty, every output gets :data:`BY_DTYPE`'s entry for its dtype.
    """

    by_output: dict[str, Tolerance] = field(default_factory=dict)
    given: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, output: str = "", dtype: str = "float32") -> Tolerance:
        """The tolerance for ``output`` of a run in ``dtype`` (``float32``, ``float16``, ...)."""
        if output in self.by_output:
            return self.by_output[output]
        base = self.by_output.get("") or BY_DTYPE.get(dtype, BY_DTYPE["float32"])
        fields = {**self.given.get("", {}), **self.given.get(output, {})}
        return replace(base, **fields) if fields else base

    def __bool__(self) -> bool:
        return bool(self.by_output or self.given)

    def calibrates(self, output: str = "") -> bool:
        """Whether ``output`` is held to the calibrated rule: the caller set nothing for it."""
        return not any(key in mapping for key in ("", output) for mapping in (self.by_output, self.given))

    def to_json(self) -> dict[str, Any]:
        """What the user set, by output (``"*"`` for every output); the rest is :data:`BY_DTYPE`'s."""
        out: dict[str, Any] = {(name or "*"): t.to_json() for name, t in self.by_output.items()}
        for name, fields in self.given.items():
            out.setdefault(name or "*", {}).update(fields)
        return out

    @classmethod
    def parse(cls, atol: Iterable[str] | None = None, rtol: Iterable[str] | None = None, stat: Iterable[str] | None = None,
              dtype: str | None = None) -> Tolerances:
        """From Polygraphy-style options: each item ``VALUE`` (every output) or ``NAME:VALUE``.

        The fields not given come from the dtype that runs (see :meth:`get`); ``dtype``, when
        given, fixes them now instead. Each combination is validated here, so a bad value is
        refused before anything runs.
        """
        given: dict[str, dict[str, Any]] = {}
        for key, items, convert in (("atol", atol, _float), ("rtol", rtol, _float), ("stat", stat, _stat)):
            for item in items or []:
                name, sep, value = str(item).rpartition(":")
                given.setdefault(name if sep else "", {})[key] = convert(value, key, str(item))
        result = cls(given=given)
        for name in given:
            for d in BY_DTYPE:
                result.get(name, d)  # raises RNNXError on an impossible combination
        if dtype is not None:
            return cls({name: result.get(name, dtype) for name in given})
        return result


def _float(text: str, key: str, item: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise RNNXError(f"{key}: {item!r}: expected a number or NAME:NUMBER, like 1e-4 or Y:1e-4") from None
    if not math.isfinite(value) or value < 0:
        raise RNNXError(f"{key}: {item!r}: expected a finite, non-negative number")
    return value


def _stat(text: str, key: str, item: str) -> str:
    text = text.strip()
    if text not in STATS:
        raise RNNXError(f"check_error_stat: {item!r}: expected one of {', '.join(STATS)} (or NAME:STAT)")
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
    quantile: float = 0.99  # the quantile of quantile_abs and quantile_rel
    floor: float | None = None  # the calibrated rule's rounding floor (None: a fixed tolerance held)
    multiple: float | None = None  # ... and the multiple of it allowed

    @property
    def ratio(self) -> float | None:
        """max abs error over the rounding floor: how far from honest arithmetic (None: fixed rule)."""
        return None if self.floor is None else self.max_abs / self.floor

    @property
    def tolerance(self) -> Tolerance:
        return Tolerance(self.atol, self.rtol, self.stat, self.quantile)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio}

    @property
    def rule(self) -> str:
        """The rule held, as reports print it."""
        if self.floor is None:
            return str(self.tolerance)
        return f"max abs <= {self.multiple:g} x floor {self.floor:.2e}"

    def __str__(self) -> str:
        q = quantile_label(self.quantile)
        return (f"max abs {self.max_abs:.3e}, mean abs {self.mean_abs:.3e}, {q} abs {self.quantile_abs:.3e}, max rel {self.max_rel:.3e} "
                f"({'ok' if self.passed else 'FAIL'}: {self.rule})" + (f"; {self.note}" if self.note else ""))


def _nan_max(a: np.ndarray) -> float:
    return float("nan") if np.isnan(a).any() else float(a.max(initial=0.0))


def compare_arrays(got: Any, want: Any, tol: Tolerance) -> ErrorStats:
    """``got`` (what ran) against ``want`` (the reference), both cast to float64."""
    g = np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape:
        inf = float("inf")
        return ErrorStats(inf, inf, inf, inf, inf, inf, inf, inf, False, tol.atol, tol.rtol, tol.stat,
                          note=f"shape {list(g.shape)}, expected {list(w.shape)}", quantile=tol.quantile)
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    if g64.size == 0:
        return ErrorStats(0, 0, 0, 0, 0, 0, 0, 0, True, tol.atol, tol.rtol, tol.stat, quantile=tol.quantile)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absdiff = np.abs(g64 - w64)
        same = (np.isnan(g64) & np.isnan(w64)) | (g64 == w64)  # NaN where the reference has NaN, or the same infinity
        absdiff[same] = 0.0
        reldiff = absdiff / np.where(w64 == 0, _EPSILON, np.where(same, 1.0, np.abs(w64)))
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
    if (~np.isfinite(g64) & np.isfinite(w64)).any():
        failed, note = True, "non-finite values where the reference is finite"
    elif nan.any():
        failed, note = True, "NaN or Inf in the reference where the run differs"
    (max_a, max_r), (mean_a, mean_r), (med_a, med_r), (q_a, q_r) = (stats[k] for k in ("max", "mean", "median", "quantile"))
    return ErrorStats(max_a, mean_a, med_a, q_a, max_r, mean_r, med_r, q_r, not failed, tol.atol, tol.rtol, tol.stat, note, tol.quantile)


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
            raise RNNXError(f"backend_tolerances: {item!r}: expected BACKEND=ATOL,RTOL like ort=1e-4,1e-3") from None
        if not all(math.isfinite(v) and v >= 0 for v in (atol, rtol)):
            raise RNNXError(f"backend_tolerances: {item!r}: expected finite, non-negative tolerances like ort=1e-4,1e-3")
        out[backend] = Tolerance(atol, rtol)
    return out
