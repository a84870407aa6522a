"""The self-check's truth must not move: the torch model, run twice on the same inputs, must agree
with itself before a file is held to it.

The calibrated rule measures a rounding floor as the distance between torch's own output and its
float64 copy's, two separate calls of the model. A forward that multiplies by
``1 + 0.05 * random.random()`` or reads a counter that changes per call moves between those calls,
and the floor would absorb the move: a file 5% off would pass "within its floor". So, before any
route, the float64 copy runs twice on the example (the model itself, in its own dtype, where no
float64 copy runs). Outputs that differ by more than arithmetic noise refuse the export (exit 2),
unless the caller states a tolerance for them (``nondeterministic_atol=`` / ``--nondeterministic-atol``):
those outputs are then held to it, never to a floor, and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rnnx import progress
from rnnx.check.truths import TorchTruth, as_float64
from rnnx.errors import RNNXError
from rnnx.exporters.selfcheck import run_eager

# What two runs of a deterministic model may differ by, in units of float64's epsilon at the
# output's scale (its largest magnitude, or 1 if larger), whatever dtype ran. On the CPU torch runs
# the same kernels in the same order on the same inputs, so an honest model agrees with itself bit
# for bit (measured: a 2-layer float64 LSTM, hidden 128, 200 steps, 20 runs between other
# allocations: 0). The 64 units leave room for a kernel whose blocking follows a buffer's memory
# alignment (MKL without its reproducibility mode), and are still 2^23 (8 million) times below one
# float32 epsilon at the same scale, the smallest floor the calibrated rule takes: a difference this small
# cannot move a float32 verdict. Run in float32 (no float64 copy), the bound is below one float32
# unit: the two runs must give the same bits.
NOISE_ULPS = 64
_EPSILON64 = 2.0 ** -52


@dataclass
class Variation:
    """What moved between two runs of the model on the same inputs, by flat output index."""

    outputs: dict[int, float] = field(default_factory=dict)  # index -> max abs difference between the runs
    names: dict[int, str] = field(default_factory=dict)  # index -> the output as the user knows it
    dtype: str = "float64"  # what the two runs computed in
    tolerance: float | None = None  # the caller's, for the outputs that moved

    def given(self) -> dict[int, float]:
        """The self-check's ``given``: each output that moved -> the caller's max abs error."""
        return {i: self.tolerance for i in self.outputs} if self.tolerance is not None else {}

    def note(self) -> str:
        """The report's line: what moved, by how much, and what it was held to."""
        moved = ", ".join(f"{self.names[i]} by up to {d:.3g}" for i, d in self.outputs.items())
        return (f"the model is not deterministic: two runs on the example ({self.dtype}) differ in {moved}; "
                f"held to max abs error {self.tolerance:g}, the tolerance you gave (nondeterministic_atol), never to a rounding floor")

    def to_json(self, graph_names: Sequence[str] = ()) -> dict[str, Any]:
        named = {(graph_names[i] if i < len(graph_names) else self.names[i]): d for i, d in self.outputs.items()}
        return {"outputs": named, "dtype": self.dtype, "tolerance": self.tolerance, "tolerance_from": "user"}


def noise_bound(scale: float) -> float:
    """How far two runs of a deterministic model may differ at an output of this largest magnitude."""
    return NOISE_ULPS * _EPSILON64 * max(scale, 1.0)


def check_determinism(model: Any, leaves: Sequence[Any], structure: Any, tolerance: float | None = None,
                      output_names: Sequence[str] | None = None) -> Variation | None:
    """Run ``model`` (its float64 copy where one runs) twice on the example; None where every output
    agrees within :func:`noise_bound`. Where some do not: a :class:`Variation` if ``tolerance``
    (the caller's max abs error for them) covers the move, else an :class:`RNNXError` naming each
    output, the difference and what to do."""
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        raise RNNXError(f"nondeterministic_atol: expected a finite, non-negative number, found {tolerance!r}")
    progress.step("running the model twice on the example (is it deterministic?)")
    values = [leaf.value for leaf in leaves]
    truth = TorchTruth(model, [])  # the report's dtype says which ran: no note
    runs, dtype = truth.float64(lambda model64: [_tensors(run_eager(model64, as_float64(values), structure)) for _ in range(2)]), "float64"
    if runs is None:  # no copy, or a forward that makes float32 tensors of its own: in the model's own dtype
        runs = [_tensors(run_eager(model, values, structure)) for _ in range(2)]
        dtype = _dtype_of(runs[0])
    names = _output_names(runs[0][1], output_names)
    moved = {i: d for i, d in enumerate(_differences(runs[0][0], runs[1][0])) if d > 0}
    if not moved:
        return None
    variation = Variation(moved, {i: names[i] for i in moved}, dtype, tolerance)
    worst = max(moved.values())
    said = "; ".join(f"{names[i]} by up to {d:.3g}" for i, d in moved.items())
    if tolerance is None:
        raise RNNXError(f"the model is not deterministic: two runs on the example as given ({dtype}, eval mode) differ in {said}, "
                        "so no file can be checked against it; remove what changes between calls (random.random(), torch.rand, dropout "
                        "called with training=True, a counter or cache the forward updates), or give nondeterministic_atol=VALUE to hold "
                        "those outputs to a max abs error of your own")
    if worst > tolerance:
        raise RNNXError(f"the model is not deterministic: two runs on the example as given ({dtype}) differ in {said}, more than the "
                        f"nondeterministic_atol={tolerance:g} given; give a tolerance above {worst:.3g}, or remove what changes between calls")
    return variation


def _tensors(out: Any) -> tuple[list[Any], list[Any]]:
    """(the output tensors, their pytree paths) of one run, in the order the file's outputs take."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    pairs = [(path, v) for path, v in tree_flatten_with_path(out)[0] if isinstance(v, torch.Tensor)]
    return [v.detach().cpu() for _, v in pairs], [path for path, _ in pairs]


def _dtype_of(run: tuple[list[Any], list[Any]]) -> str:
    floats = [str(t.dtype).removeprefix("torch.") for t in run[0] if t.is_floating_point()]
    return floats[0] if floats else "its own dtype"


def _output_names(paths: list[Any], given: Sequence[str] | None) -> list[str]:
    """Each output as the user knows it: the name given, else where forward returns it."""
    from torch.utils._pytree import keystr

    if given and len(given) == len(paths):
        return [f"output {n!r}" for n in given]
    if len(paths) == 1:
        return ["the output"]
    return [f"output {i} ({keystr(path)})" if keystr(path) else f"output {i}" for i, path in enumerate(paths)]


def _differences(first: list[Any], second: list[Any]) -> list[float]:
    """Per output, how far the second run lies from the first beyond :func:`noise_bound` (0 within
    it); a shape or count that changed, or NaN where the other run is finite, is infinitely far."""
    import torch

    if len(first) != len(second):
        return [math.inf] * max(len(first), len(second))
    out = []
    for a, b in zip(first, second):
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(math.inf)
            continue
        if not a.is_floating_point():
            out.append(0.0 if torch.equal(a, b) else math.inf)
            continue
        a64, b64 = a.double(), b.double()
        same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
        if bool(same.all()):
            out.append(0.0)
            continue
        diff = torch.where(same, torch.zeros_like(a64), (a64 - b64).abs())
        finite = a64[torch.isfinite(a64)]
        worst = float(diff.max()) if not torch.isnan(diff).any() else math.inf
        out.append(worst if worst > noise_bound(float(finite.abs().max()) if finite.numel() else 1.0) else 0.0)
    return out
