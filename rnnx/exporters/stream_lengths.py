"""The chunk multiple, asked of the model: the least number of frames whose chunks give whole
frames at every stage.

The strides of the convolutions and pools along time give a first multiple; what the code does
between modules (a reshape that stacks frames, a pool then a reshape, a slice every other frame)
is found by running the model at lengths of a candidate multiple ``m`` (``m``, ``2m``, ... ,
``CHUNKS_ASKED x m``): a multiple streams where the model runs at each, and every tensor the
probe saw along time (each module's inputs and outputs, each pool's output) has ``k d + c``
frames at ``k m`` frames, the same ``d >= 1`` frames more per chunk and ``c >= 0`` (padding a
convolution adds; fewer, and the first chunk would give fewer frames than later ones). The
candidates are the strides' multiple times 1 to ``CANDIDATES``, the least that passes wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rnnx.exporters.stream_probe import Recorder
from rnnx.exporters.stream_running import time_axis

CANDIDATES = 8  # multiples tried: the strides' multiple times 1..8
CHUNKS_ASKED = 4  # each tried at 1..4 chunks of it (4 sees a pattern a stride of up to 4 hides in 3)

Key = tuple[str, str, int, int]  # (module, "in"/"out"/"pool", occurrence, tensor)


def _sizes(recorder: Recorder) -> dict[Key, Any]:
    """Each recorded tensor by its key: module events by module, kind and occurrence; pools by order."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[Key, Any] = {}
    for e in recorder.events:
        k = seen[(e.module, e.kind)] = seen.get((e.module, e.kind), -1) + 1
        out.update({(e.module, e.kind, k, i): t for i, t in enumerate(e.tensors)})
    out.update({("", "pool", i, 0): p.out for i, p in enumerate(recorder.pools)})
    return out


def timed(first: Recorder, second: Recorder) -> dict[Key, int]:
    """The tensors with a time axis (the one axis that grows from the example's length to twice
    it), by key, with that axis."""
    longer = _sizes(second)
    axes = {}
    for key, a in _sizes(first).items():
        b = longer.get(key)
        axis = time_axis(a, b) if b is not None and hasattr(b, "dim") and hasattr(a, "dim") else None
        if axis is not None:
            axes[key] = axis
    return axes


def chunk_multiple(run: Callable[[int], Recorder | None], axes: dict[Key, int], strides: int) -> int | None:
    """The least multiple of ``strides`` (times 1 to :data:`CANDIDATES`) that gives whole
    frames at every stage, asking ``run(frames)`` (a recorded run at that length, None where the
    model refuses it); None where none does."""
    asked: dict[int, dict[Key, Any] | None] = {}

    def frames(n: int) -> dict[Key, Any] | None:
        if n not in asked:
            recorder = run(n)
            asked[n] = None if recorder is None else _sizes(recorder)
        return asked[n]

    for m in (strides * j for j in range(1, CANDIDATES + 1)):
        runs = []
        for k in range(1, CHUNKS_ASKED + 1):
            sizes = frames(k * m)
            if sizes is None:
                break
            runs.append(sizes)
        if len(runs) == CHUNKS_ASKED and all(_steady(key, axis, runs) for key, axis in axes.items()):
            return m
    return None


def _steady(key: Key, axis: int, runs: list[dict[Key, Any]]) -> bool:
    """Whether the tensor ``key`` has ``k d + c`` frames in the run at ``k`` chunks, ``d >= 1``, ``c >= 0``."""
    found = [r.get(key) for r in runs]
    counts = [int(t.shape[axis]) for t in found if t is not None and t.dim() > axis]
    if len(counts) != len(runs):
        return False
    step = counts[1] - counts[0]
    return step >= 1 and counts[0] - step >= 0 and all(n == counts[0] + k * step for k, n in enumerate(counts))
