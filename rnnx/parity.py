"""Parity: run a backend on fresh seeded inputs and hold it against the float64 reference."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from rnnx import reference
from rnnx.tolerance import BY_DTYPE, CALIBRATED_DTYPES, ErrorStats, Tolerances, compare_arrays, compare_calibrated, quantile_label
from rnnx.weights import RNNWeights

#: (atol, rtol) per dtype, read from :data:`rnnx.tolerance.BY_DTYPE` (the one table; kept
#: for callers of the older form). Changing it changes nothing: pass ``tolerances``.
TOLERANCES = {name: (t.atol, t.rtol) for name, t in BY_DTYPE.items()}
DEFAULT_SHAPES = ((1, 1), (5, 3), (11, 7))  # (seq_len, batch): batch 1, and two more shapes so that nothing baked in passes


def random_inputs(
    weights: RNNWeights, seq_len: int, batch: int, seed: int = 0, ragged: bool = False, dtype: str = "float32", states: bool = True
) -> dict[str, np.ndarray]:
    """X, h0 and c0 (LSTM; unless ``states`` is False) and, with ``ragged``, seq_lens, from a seeded generator."""
    spec = weights.spec
    rng = np.random.default_rng(seed)
    n = spec.num_layers * spec.num_directions
    inputs = {
        "X": rng.standard_normal((seq_len, batch, spec.input_size)).astype(dtype),
        "h0": rng.standard_normal((n, batch, spec.output_size)).astype(dtype) * 0.5,
    }
    if spec.cell == "lstm":
        inputs["c0"] = rng.standard_normal((n, batch, spec.hidden_size)).astype(dtype) * 0.5
    if not states:
        inputs = {"X": inputs["X"]}
    if ragged:
        inputs["seq_lens"] = rng.integers(1, seq_len + 1, size=batch).astype(np.int32)
    return inputs


def reference_outputs(weights: RNNWeights, inputs: dict[str, np.ndarray], batch_first: bool = False,
                      dtype: type = np.float64) -> dict[str, np.ndarray]:
    """The reference's outputs; ``dtype=np.float32`` runs its arithmetic in float32 (the honest
    run of :func:`honest_outputs`)."""
    out = reference.forward(
        weights, inputs["X"], inputs.get("h0"), inputs.get("c0"), inputs.get("seq_lens"), batch_first=batch_first, dtype=dtype
    )
    result = {"Y": out.y, "h_n": out.h_n}
    if out.c_n is not None:
        result["c_n"] = out.c_n
    return result


def honest_outputs(weights: RNNWeights, inputs: dict[str, np.ndarray], dtype: str, batch_first: bool = False) -> dict[str, np.ndarray] | None:
    """The reference's arithmetic run in ``dtype`` (float32, float16) on the same weights and
    inputs: an honest computation in the candidate's dtype, whose distance from the float64
    reference is the rounding floor the calibrated rule measures (None for a dtype with none)."""
    if dtype not in CALIBRATED_DTYPES or dtype == "bfloat16":  # numpy computes no bfloat16 of its own
        return None
    return reference_outputs(weights, inputs, batch_first, dtype=np.dtype(dtype).type)


@dataclass
class Comparison:
    """One output of one run against what it should be (see :func:`rnnx.tolerance.compare_arrays`)."""

    backend: str
    output: str
    seq_len: int
    batch: int
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    passed: bool
    ran: bool = True  # False: the file was only read back and the reference run on it, not run by its owner
    mean_abs: float = 0.0
    p99_abs: float = 0.0  # the error statistic's quantile (0.99 unless the tolerance says otherwise)
    mean_rel: float = 0.0
    p99_rel: float = 0.0
    stat: str = "elemwise"  # the statistic the tolerance was applied to (Polygraphy's --check-error-stat)
    dtype: str = "float32"  # what ran, and so whose tolerance applied
    note: str = ""  # why it failed where the numbers do not say (a shape, NaN, a missing output)
    floor: float | None = None  # the calibrated rule's rounding floor; None where a fixed tolerance held
    multiple: float | None = None
    ratio: float | None = None  # max abs over the floor: how far from honest arithmetic

    @classmethod
    def from_stats(cls, backend: str, output: str, seq_len: int, batch: int, stats: ErrorStats, dtype: str = "float32", ran: bool = True) -> Comparison:
        stat = quantile_label(stats.quantile) if stats.stat == "quantile" else stats.stat
        return cls(backend, output, seq_len, batch, stats.max_abs, stats.max_rel, stats.atol, stats.rtol, stats.passed, ran,
                   stats.mean_abs, stats.quantile_abs, stats.mean_rel, stats.quantile_rel, stat, dtype, stats.note,
                   stats.floor, stats.multiple, stats.ratio)

    @property
    def tolerance(self) -> str:
        if self.floor is not None:
            return f"max abs <= {self.multiple:g} x floor {self.floor:.2e} (ratio {self.ratio:.3g})"
        return f"atol {self.atol:g}, rtol {self.rtol:g}, {self.stat}"

    def describe(self) -> str:
        """One line: which output, where, how far off, and the tolerance it was held to."""
        where = f"{self.backend} {self.output}" + (f" at T={self.seq_len}, B={self.batch}" if self.seq_len or self.batch else "")
        if self.note and not np.isfinite(self.max_abs):
            return f"{where}: {self.note} ({self.tolerance})"
        return (f"{where}: max abs error {self.max_abs:.3e} (mean {self.mean_abs:.3e}, p99 {self.p99_abs:.3e}), max rel {self.max_rel:.3e}, "
                f"beyond {self.tolerance}" + (f"; {self.note}" if self.note else ""))


@dataclass
class ParityReport:
    """Rows of comparisons; truthy when every row passed."""

    rows: list[Comparison] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def worst(self) -> Comparison | None:
        return max(self.rows, key=lambda r: r.max_abs, default=None)

    def first_failure(self) -> Comparison | None:
        """The failing row with the largest absolute error (a NaN counts as the largest)."""
        failed = [r for r in self.rows if not r.passed]
        return max(failed, key=lambda r: (np.isnan(r.max_abs), r.max_abs), default=None)

    def failure(self) -> str:
        """One line naming the worst failing row and its tolerance ("" when everything passed)."""
        row = self.first_failure()
        if row is None:
            return "" if self.rows else "nothing was compared"
        return row.describe()

    def to_json(self) -> list[dict[str, object]]:
        return [asdict(r) for r in self.rows]

    def __str__(self) -> str:
        lines = [f"{'backend':<14} {'output':<6} {'T':>4} {'B':>3} {'max abs':>10} {'mean abs':>10} {'p99 abs':>10} {'max rel':>10}  "
                 f"{'tolerance (atol, rtol, stat | floor)':<30} result"]
        for r in self.rows:
            verdict = ("ok" if r.ran else "read back only") if r.passed else "FAIL" + (f" ({r.note})" if r.note else "")
            tol = f"{r.multiple:g} x {r.floor:.2e}: {r.ratio:.3g}" if r.floor is not None else f"{r.atol:g}, {r.rtol:g}, {r.stat}"
            lines.append(f"{r.backend:<14} {r.output:<6} {r.seq_len:>4} {r.batch:>3} {r.max_abs:>10.3e} {r.mean_abs:>10.3e} {r.p99_abs:>10.3e} "
                         f"{r.max_rel:>10.3e}  {tol:<30} {verdict}")
        return "\n".join(lines)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def compare(backend: str, got: dict[str, np.ndarray], want: dict[str, np.ndarray], seq_len: int, batch: int,
            dtype: str | Mapping[str, str] = "float32", tolerances: Tolerances | None = None,
            honest: Mapping[str, np.ndarray] | None = None) -> list[Comparison]:
    """Each output in ``want`` against ``got``'s of that name, with :func:`rnnx.tolerance.compare_arrays`
    under ``tolerances`` where the caller set one for it; else under the calibrated rule with
    ``honest``'s outputs as the rounding floor (:func:`rnnx.tolerance.compare_calibrated`),
    or :data:`rnnx.tolerance.BY_DTYPE`'s tolerance for the dtype that ran (``dtype``, or a
    dtype per output) where there is no honest run."""
    tolerances = tolerances or Tolerances()
    rows = []
    for name, ref in want.items():
        kind = dtype if isinstance(dtype, str) else dtype.get(name, "float32")
        tol = tolerances.get(name, kind)
        if name not in got:
            stats = compare_arrays(np.zeros(0), np.asarray(ref), tol)
            stats.passed, stats.note = False, "the run did not return this output"
        elif honest is not None and name in honest and tolerances.calibrates(name):
            stats = compare_calibrated(got[name], ref, honest[name], kind, tol)
        else:
            stats = compare_arrays(got[name], ref, tol)
        rows.append(Comparison.from_stats(backend, name, seq_len, batch, stats, kind))
    return rows


def check(
    backend: str,
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
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
) -> ParityReport:
    """Run ``run`` at each (seq_len, batch) on fresh seeded inputs against the reference;
    ``dtype`` is what the backend takes (a float16 ONNX file takes float16 inputs), and the
    reference runs on those same rounded inputs. Each output is held to ``tolerances`` where
    set, else to the calibrated rule, its floor the reference's arithmetic run in ``dtype``
    (:func:`honest_outputs`; :data:`rnnx.tolerance.BY_DTYPE`'s entry for a dtype with none).
    ``feed_dtype``: what the backend is fed where it differs from the dtype it computes in."""
    report = ParityReport()
    for k, (seq_len, batch) in enumerate(shapes):
        inputs = random_inputs(weights, seq_len, batch, seed=seed + k, ragged=ragged, states=states, dtype=dtype)
        if feed_dtype is not None:  # a float16 file that takes float32 (Casts at its edges): values float16 holds exactly
            inputs = {key: (v.astype(feed_dtype) if v.dtype.kind == "f" else v) for key, v in inputs.items()}
        feed = dict(inputs)
        if batch_first:
            feed["X"] = inputs["X"].transpose(1, 0, 2).copy()
        want = reference_outputs(weights, feed, batch_first=batch_first)
        honest = honest_outputs(weights, feed, dtype, batch_first) if (tolerances or Tolerances()).calibrates() else None
        rows = compare(backend, run(feed), want, seq_len, batch, dtype, tolerances, honest)
        for row in rows:
            row.ran = ran
        report.rows += rows
    return report
