"""Parity: run a backend on fresh seeded inputs and hold it against the float64 reference."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from rnnx import reference
from rnnx.weights import RNNWeights

#: Default (atol, rtol) per dtype for a float32 backend held against float64.
TOLERANCES = {"float32": (1e-4, 1e-3), "float64": (1e-10, 1e-8), "float16": (1e-2, 1e-2)}
DEFAULT_SHAPES = ((5, 3), (11, 7))  # (seq_len, batch): two shapes, so nothing baked in passes


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


def reference_outputs(weights: RNNWeights, inputs: dict[str, np.ndarray], batch_first: bool = False) -> dict[str, np.ndarray]:
    out = reference.forward(
        weights, inputs["X"], inputs.get("h0"), inputs.get("c0"), inputs.get("seq_lens"), batch_first=batch_first
    )
    result = {"Y": out.y, "h_n": out.h_n}
    if out.c_n is not None:
        result["c_n"] = out.c_n
    return result


@dataclass
class Comparison:
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


@dataclass
class ParityReport:
    """Rows of comparisons; truthy when every row passed."""

    rows: list[Comparison] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def worst(self) -> Comparison | None:
        return max(self.rows, key=lambda r: r.max_abs, default=None)

    def to_json(self) -> list[dict[str, object]]:
        return [asdict(r) for r in self.rows]

    def __str__(self) -> str:
        lines = [f"{'backend':<14} {'output':<6} {'T':>4} {'B':>3} {'max abs err':>12} {'max rel err':>12}  result"]
        for r in self.rows:
            verdict = ("ok" if r.ran else "read back only") if r.passed else f"FAIL (atol {r.atol:g}, rtol {r.rtol:g})"
            lines.append(f"{r.backend:<14} {r.output:<6} {r.seq_len:>4} {r.batch:>3} {r.max_abs:>12.3e} {r.max_rel:>12.3e}  {verdict}")
        return "\n".join(lines)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def compare(backend: str, got: dict[str, np.ndarray], want: dict[str, np.ndarray], seq_len: int, batch: int, dtype: str = "float32") -> list[Comparison]:
    atol, rtol = TOLERANCES[dtype]
    rows = []
    for name, ref in want.items():
        value = np.asarray(got[name], dtype=np.float64)
        if value.shape != ref.shape:
            rows.append(Comparison(backend, name, seq_len, batch, float("inf"), float("inf"), atol, rtol, False))
            continue
        diff = np.abs(value - ref)
        max_abs = float(diff.max(initial=0.0))
        max_rel = float((diff / np.maximum(np.abs(ref), 1e-12)).max(initial=0.0))
        passed = bool(np.all(np.isfinite(value)) and np.all(diff <= atol + rtol * np.abs(ref)))
        rows.append(Comparison(backend, name, seq_len, batch, max_abs, max_rel, atol, rtol, passed))
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
) -> ParityReport:
    """Run ``run`` at each (seq_len, batch) on fresh seeded inputs against the reference;
    ``dtype`` is what the backend takes (a float16 ONNX file takes float16 inputs), and the
    reference runs on those same rounded inputs."""
    report = ParityReport()
    for k, (seq_len, batch) in enumerate(shapes):
        inputs = random_inputs(weights, seq_len, batch, seed=seed + k, ragged=ragged, states=states, dtype=dtype)
        feed = dict(inputs)
        if batch_first:
            feed["X"] = inputs["X"].transpose(1, 0, 2).copy()
        want = reference_outputs(weights, feed, batch_first=batch_first)
        rows = compare(backend, run(feed), want, seq_len, batch, dtype)
        for row in rows:
            row.ran = ran
        report.rows += rows
    return report
