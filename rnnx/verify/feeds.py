"""The seeded values verify feeds a whole model at one case: floats standard normal (or the
recorded example's sign), sequence lengths sorted with the longest filling the sequence, token
ids below the vocabulary of the embedding table the input indexes, ids of another input's axis
(a graph's node ids: :mod:`rnnx.verify.id_axes`) below that axis' size at the case, else within
the example's range. What each input is comes from :func:`rnnx.shapes.file_dims.read_file_dims`.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from rnnx.check import Case
from rnnx.exporters.example_values import draw_floats, draw_integers, integer_summary, value_summary
from rnnx.shapes.file_dims import InputSpec


def make_feed(specs: list[InputSpec], case: Case, example: dict[str, Any], seed: int,
              ids: dict[str, tuple[str, int]] | None = None) -> dict[str, np.ndarray]:
    """Seeded values for every input at ``case``'s shapes (``example``: the model's own example, whose
    sign and range they keep; ``ids``: id inputs and the (input, dim) whose size bounds them)."""
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in specs:
        shape, dtype = case.shapes[spec.name], spec.dtype
        assert dtype is not None  # specs read with feeding=True, which refuses an input rnnx cannot feed
        if dtype.kind == "f":  # the recorded example's sign, else the model's own example's
            known = example.get(spec.name)
            summary = spec.values or (value_summary(np.asarray(known, dtype=np.float64)) if known is not None else None)
            feed[spec.name] = draw_floats(rng, shape, summary, dtype)
        elif dtype.kind == "b":
            feed[spec.name] = np.asarray(rng.random(shape) < 0.5)  # a scalar flag (shape []) compares to a numpy bool, which ONNX Runtime refuses
        elif spec.lengths_of is not None:
            longest = case.sizes.get(spec.lengths_of, 1)
            lens = np.sort(rng.integers(1, longest + 1, size=shape))[::-1].copy()
            if lens.size:
                lens.flat[0] = longest
            feed[spec.name] = lens.astype(dtype)
        else:  # the recorded example's ids, else the model's own example's, else the embedding table's rows
            known = example.get(spec.name)
            # integer_summary types its values int | None for the padding alone: its min and max are ints
            summary = spec.values or cast("dict[str, Any] | None", integer_summary(np.asarray(known)) if known is not None else None)
            if summary is not None and spec.vocabulary:
                summary = {**summary, "max": min(summary["max"], spec.vocabulary - 1)}
            axis = (ids or {}).get(spec.name)
            if axis is not None:  # ids of an axis: every row of it at this case's size, and none past it
                size = case.shapes[axis[0]][axis[1]]
                low = int(summary["min"]) if summary is not None and 0 <= int(summary["min"]) < size else 0
                summary = {"min": low, "max": size - 1, "padding": None}
            feed[spec.name] = draw_integers(rng, shape, summary, dtype, spec.vocabulary)
    return feed
