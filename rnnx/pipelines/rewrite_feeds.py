"""Seeded feeds for fuse and lower's check, at the shapes :mod:`rnnx.shapes.rewrite_plan` plans:
floats standard normal, booleans true, sequence lengths between 1 and the sequence's length,
token ids below their table's rows, other integers zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx.graphs import walk
from rnnx.shapes.rewrite_plan import ShapePlan
from rnnx.shapes.wiring import lengths_inputs


def make_feeds(model: Any, plan: ShapePlan, sizes: dict[str, int], shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs at ``shapes``: floats standard normal; booleans true; integers that hold
    sequence lengths between 1 and the sequence's length, token ids below their table's rows,
    other integers zero."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in plan.specs:
        shape = shapes[spec.name]
        assert spec.dtype is not None  # plan_shapes reads the inputs with feeding=True, which refuses a type rnnx cannot feed
        if spec.dtype.kind in "fc":
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        elif spec.dtype.kind == "b":
            feeds[spec.name] = np.ones(shape, np.bool_)
        elif spec.lengths_of is not None and spec.lengths_of in sizes:
            longest = sizes[spec.lengths_of]
            lens = np.sort(rng.integers(1, longest + 1, size=shape))[::-1].copy()
            if lens.size:
                lens.flat[0] = longest
            feeds[spec.name] = lens.astype(spec.dtype)
        elif spec.vocabulary:
            feeds[spec.name] = rng.integers(0, spec.vocabulary, size=shape).astype(spec.dtype)
        else:
            feeds[spec.name] = np.zeros(shape, spec.dtype)
    _fill_sequence_lengths(model, feeds, rng, {s.name for s in plan.specs if s.lengths_of is not None})
    return feeds


_X_PATH = ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Transpose")


def _fill_sequence_lengths(model: Any, feeds: dict[str, np.ndarray], rng: np.random.Generator, done: set[str]) -> None:
    """An integer graph input that reaches an LSTM/GRU/RNN node's sequence_lens gets seeded lengths
    between 1 and the sequence's length (zeros, the default for integers, would run no step at all)."""
    producers = walk.producers_of(model.graph)
    for lengths, node in lengths_inputs(model).items():
        if lengths not in feeds or lengths in done or feeds[lengths].dtype.kind not in "iu":
            continue
        x, swaps = walk.back(node.input[0], producers, _X_PATH)
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        steps = feeds[x].shape[(layout + swaps) % 2] if x in feeds and feeds[x].ndim == 3 else 1
        feeds[lengths] = rng.integers(1, max(int(steps), 1) + 1, size=feeds[lengths].shape).astype(feeds[lengths].dtype)
