"""Which values an input takes, read from an example, and fresh ones drawn like them.

Token ids are not arbitrary integers: a vocabulary reserves ids (padding, start, end), and a
model that derives its lengths from ``ids != pad`` or masks attention with them computes NaN
on ids it would never be given (a row that is all padding leaves softmax nothing). So fresh
inputs stay within the example's range, and a value the example uses only as padding (every
occurrence trailing its row) is not drawn. Floats keep the example's sign: a magnitude
fed to ``log1p`` is NaN on a standard normal draw. Used by the export's self-check and audit and by
``rnnx verify``, and recorded in the file's metadata (``values``) for verify to read later.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def value_summary(values: np.ndarray) -> dict[str, Any] | None:
    """What fresh inputs like ``values`` may hold: for integers their range and padding
    (:func:`integer_summary`); for floats their sign, where the example says it
    (``{"nonnegative": true}``, ``{"unit": true}`` for values within [0, 1]: magnitudes,
    probabilities and masks that a model feeds to log or sqrt); None where anything goes."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return integer_summary(values)
    if values.dtype.kind != "f" or values.size == 0 or not np.isfinite(values).all():
        return None
    low, high = float(values.min()), float(values.max())
    if low < 0:
        return None
    return {"nonnegative": True, "unit": high <= 1.0}


def draw_floats(rng: np.random.Generator, shape: list[int], summary: dict[str, Any] | None, dtype: Any) -> np.ndarray:
    """Standard normal floats, folded to [0, inf) or drawn in [0, 1] where the example's were."""
    if summary and summary.get("unit"):
        return rng.random(shape).astype(dtype)
    out = rng.standard_normal(shape)
    return (np.abs(out) if summary and summary.get("nonnegative") else out).astype(dtype)


def integer_summary(values: np.ndarray) -> dict[str, int | None] | None:
    """{"min", "max", "padding"} of an integer array (padding: a value found only at the end
    of rows, along the last axis, and not everywhere); None for other arrays or empty ones."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" or values.size == 0:
        return None
    low, high = int(values.min()), int(values.max())
    return {"min": low, "max": high, "padding": _trailing_value(values) if values.ndim >= 2 and low != high else None}


def _trailing_value(values: np.ndarray) -> int | None:
    rows = values.reshape(-1, values.shape[-1])
    last = rows[:, -1]
    for candidate in np.unique(last):
        hit = rows == candidate
        # every row's occurrences are a suffix: once it starts, it runs to the end
        suffix = np.flip(np.cumprod(np.flip(hit, axis=1), axis=1), axis=1).astype(bool)
        if np.array_equal(hit, suffix) and not hit.all():
            return int(candidate)
    return None


def draw_integers(rng: np.random.Generator, shape: list[int], summary: dict[str, Any] | None, dtype: Any,
                  vocabulary: int | None = None) -> np.ndarray:
    """Fresh integers shaped ``shape``: within the summary's range without its padding value;
    without a summary, below ``vocabulary`` (an embedding table's rows) or in {0, 1}."""
    if summary is not None:
        low, high, pad = int(summary["min"]), int(summary["max"]), summary.get("padding")
    else:
        low, high, pad = 0, (vocabulary - 1 if vocabulary else 1), None
    high = max(high, low)
    pool = np.arange(low, high + 1)
    if pad is not None and pool.size > 1:
        pool = pool[pool != pad]
    if pool.size > 1 << 20:  # a huge range: draw directly; one value in a million is padding at worst
        out = rng.integers(low, high + 1, size=shape)
    else:
        out = rng.choice(pool, size=shape)
    return np.asarray(out).astype(dtype)
