"""Which integer inputs hold ids of another input's axis, asked of the torch model (or the file).

A graph model takes node features ``x`` (N, T, F) and an ``edge_index`` (2, E) whose values are
node ids, each below N; a model may also take positions below a sequence's length. Such ids are
not token ids (no embedding table bounds them, so the file shows no vocabulary) and not free
integers: drawn from the example's range at a smaller N, they index past the nodes and the model
raises; verify then had nothing left to check. So verify keeps the relation the example shows:

- the example says which axes the ids could index: an axis of another input longer than the
  largest id (the recorded example's range, or the model's own example's values);
- the torch model says which one it is (with no model, ``rnnx verify FILE`` asks the file in ONNX
  Runtime the same question): with that axis cut to the largest id, it must refuse the example's
  ids and take the same ids folded below the new size. Only the ids differ between the two runs,
  so an axis the model refuses for any other reason (a reshape into groups) is never taken for it;
- the confirmed axis bounds the ids at every case: drawn in [0, its size there)
  (:func:`rnnx.verify.feeds.make_feed`). Where none is confirmed nothing is known, and the ids
  keep the example's range (verify falls back to the example's shapes where none of its cases
  then runs: :mod:`rnnx.verify.models`).

The torch model's runs are probes at sizes it was not given, bounded like the dimension audit's
(:mod:`rnnx.exporters.bounded`: --time-limit, --max-memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.check import Case
from rnnx.errors import RNNXError
from rnnx.exporters.bounded import STOPPED, Bounds, bounded
from rnnx.exporters.example_values import integer_summary
from rnnx.shapes.file_dims import InputSpec, label_sizes
from rnnx.verify.calls import Call, torch_outputs
from rnnx.verify.feeds import make_feed

MAX_CANDIDATES = 4  # axes asked about per id input, tightest first: each costs one or two runs of the model

Runs = Callable[[dict[str, np.ndarray], str], bool]  # whether the model (or file) runs on a feed; the str names the run


@dataclass(frozen=True)
class IdAxis:
    """``ids`` holds ids of ``input``'s dimension ``dim`` (``label`` in the file, "" where fixed)."""

    ids: str
    input: str
    dim: int
    label: str
    largest: int  # the example's largest id
    size: int  # the axis' size in the example

    def line(self, asked: str) -> str:
        where = f"{self.input} dim {self.dim}" + (f" ({self.label})" if self.label else "")
        return (f"{self.ids} holds ids of {where}: drawn in [0, its size) at each case ({asked} refuses the example's ids "
                f"with that axis cut to {self.largest}, and takes them folded below it)")


@dataclass
class IdAxes:
    """What was found: each id input's axis, and id inputs whose axis nobody could tell."""

    axes: dict[str, IdAxis] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # id inputs whose axis is not known (the example's range is all there is)
    unconfirmed: list[str] = field(default_factory=list)  # those of them that some input's axis could have bounded

    @property
    def bounds(self) -> dict[str, tuple[str, int]]:
        """For :func:`rnnx.verify.feeds.make_feed`: each id input's (input, dim) bounding it."""
        return {name: (a.input, a.dim) for name, a in self.axes.items()}

    def notes(self, asked: str = "the torch model") -> list[str]:
        """What was found, for the report; ``asked``: who answered (the torch model, or the file)."""
        lines = [a.line(asked) for a in self.axes.values()]
        if self.unconfirmed:
            lines.append(f"{', '.join(self.unconfirmed)}: integer ids no embedding table bounds, and {asked} confirmed no input axis "
                         "they index: drawn within the example's range")
        return lines


def find_id_axes(specs: list[InputSpec], shapes: dict[str, list[int]], example: dict[str, np.ndarray], seed: int, runs: Runs) -> IdAxes:
    """The axis each id input of the file indexes (see the module docstring); ``shapes``: the
    example's input shapes; ``example``: the model's own example arrays, where it has them;
    ``runs``: asks the torch model (:func:`torch_runs`) or the file whether it runs on a feed."""
    found = IdAxes()
    ranges: dict[str, tuple[int, int]] = {}
    for spec in _id_inputs(specs):
        found_range = _range(spec, example)
        if found_range is not None and found_range[1] >= 1:  # all zeros fit every size: nothing to keep
            ranges[spec.name] = found_range
    feed = _example_feed(specs, shapes, example, ranges, seed) if ranges else None
    for name, (_, largest) in ranges.items():
        candidates = _candidates(specs, name, largest, feed) if feed is not None else []
        axis = _asked(runs, feed, name, largest, candidates) if feed is not None else None
        if axis is not None:
            found.axes[name] = axis
            continue
        found.unknown.append(name)
        if candidates:
            found.unconfirmed.append(name)
    return found


def _asked(runs: Runs, feed: dict[str, np.ndarray], name: str, largest: int,
           candidates: list[tuple[str, list[tuple[str, int]]]]) -> IdAxis | None:
    """The first candidate axis the model confirms, tightest first; None where it confirms none."""
    for label, positions in candidates[:MAX_CANDIDATES]:
        if _confirmed(runs, feed, name, positions, largest):
            d_input, d = positions[0]
            return IdAxis(name, d_input, d, label, largest, int(feed[d_input].shape[d]))
    return None


def torch_runs(model: Any, call: Call) -> Runs:
    """Asks the torch model, called as ``call`` says, in a bounded probe."""
    bounds = Bounds.of(model, [])

    def runs(feed: dict[str, np.ndarray], what: str) -> bool:
        def run() -> None:
            torch_outputs(model, call, feed)

        try:
            bounded(run, f"verify's run of the model {what}", bounds)
        except STOPPED:  # a budget, or the process ended: never an answer about the ids
            raise
        except Exception:  # noqa: BLE001  the user's model may raise anything at inputs it does not take
            return False
        return True
    return runs


def _id_inputs(specs: list[InputSpec]) -> list[InputSpec]:
    """Integer inputs that are neither lengths nor token ids of an embedding table."""
    return [s for s in specs if s.dtype is not None and s.dtype.kind in "iu" and s.lengths_of is None and not s.vocabulary and s.dims]


def _range(spec: InputSpec, example: dict[str, np.ndarray]) -> tuple[int, int] | None:
    """(smallest, largest) id: the model's own example's values, else the recorded range; None
    where neither is known or an id is negative (a padding value, not an index)."""
    known = example.get(spec.name)
    summary = (integer_summary(np.asarray(known)) if known is not None else spec.values) or {}
    low, high = summary.get("min"), summary.get("max")
    if not isinstance(low, int) or not isinstance(high, int) or low < 0:
        return None
    return low, high


def _example_feed(specs: list[InputSpec], shapes: dict[str, list[int]], example: dict[str, np.ndarray],
                  ranges: dict[str, tuple[int, int]], seed: int) -> dict[str, np.ndarray] | None:
    """Inputs at the example's shapes: the model's own example where it has one, else drawn as
    verify draws (each id input holding its largest id once, so that a cut axis is passed)."""
    try:
        drawn = make_feed(specs, Case.at(specs, "the example", label_sizes(specs, shapes)), example, seed)
    except RNNXError:
        return None  # an input whose example shape nothing gives: nothing to ask from
    feed = {}
    for spec in specs:
        known = example.get(spec.name)
        value = np.asarray(known) if known is not None and list(np.shape(known)) == list(drawn[spec.name].shape) else drawn[spec.name]
        if spec.name in ranges and known is None and value.size:
            value = value.copy()
            value.flat[0] = ranges[spec.name][1]
        feed[spec.name] = value
    return feed


def _candidates(specs: list[InputSpec], name: str, largest: int, feed: dict[str, np.ndarray]) -> list[tuple[str, list[tuple[str, int]]]]:
    """Axes of the other inputs longer than the largest id, tightest first: (label, every
    (input, dim) cut with it). A dynamic label is cut wherever it occurs, as the file ties it."""
    seen: dict[str, tuple[int, list[tuple[str, int]]]] = {}
    for spec in specs:
        if spec.name == name:
            continue
        for d, dim in enumerate(spec.dims):
            size = int(feed[spec.name].shape[d])
            if size <= largest:
                continue
            if isinstance(dim, str):
                if dim not in seen:
                    seen[dim] = (size, [(s.name, k) for s in specs for k, v in enumerate(s.dims) if v == dim])
            else:
                seen[f"{spec.name}:{d}"] = (size, [(spec.name, d)])
    ranked = sorted(seen.items(), key=lambda kv: kv[1][0] - largest)
    return [(label if ":" not in label else "", positions) for label, (_, positions) in ranked]


def _confirmed(runs: Runs, feed: dict[str, np.ndarray], name: str, positions: list[tuple[str, int]], largest: int) -> bool:
    """Whether the model refuses the example's ids with ``positions`` cut to ``largest``, and
    takes the same ids folded below it."""
    cut = dict(feed)
    for input_name, d in positions:
        cut[input_name] = np.take(cut[input_name], np.arange(largest), axis=d)
    what = f"with {positions[0][0]} dim {positions[0][1]} at {largest} (which axis {name}'s ids index)"
    if runs(cut, what):
        return False  # the example's ids fit without that axis: they index something else
    folded = {**cut, name: (cut[name] % largest).astype(cut[name].dtype)}
    return runs(folded, what + ", its ids folded below it")
