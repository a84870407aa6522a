"""Parity's inputs and truths: fresh seeded inputs for a stack, and the float64 reference's outputs on
them (and its arithmetic in a lower dtype, the calibrated rule's honest run). Running a backend on
them and judging it is :mod:`rnnx.check.stack`'s."""

from __future__ import annotations

import numpy as np

from rnnx import reference
from rnnx.tolerance import BY_DTYPE, CALIBRATED_DTYPES
from rnnx.weights import RNNWeights

#: (atol, rtol) per dtype, read from :data:`rnnx.tolerance.BY_DTYPE` (the one table; kept
#: for callers of the older form). Changing it changes nothing: pass ``tolerances``.
TOLERANCES = {name: (t.atol, t.rtol) for name, t in BY_DTYPE.items()}


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
