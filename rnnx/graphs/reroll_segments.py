"""Loops over segments: ``for i in range(0, T, S): enc(x[:, i:i + S])``, a trace unrolled.

A model that cuts a long input into segments of S steps and runs each through the same encoder
(a neural codec's ``encode()``) is traced as ceil(T/S) copies of the encoder, copy k reading
``Slice(x, [k*S], [k*S + S], [axis])`` (:func:`rnnx.graphs.time_slice.segment_slice`). The last
segment is T - (n-1)*S steps long, shorter where S does not divide T; Python's slice stops at
the end of x and so does ONNX's ``Slice``, so the segment is read the same way at any length.

What the copies are: found and matched as the steps of a loop over time are
(:mod:`rnnx.graphs.reroll_match`), with the segment's index as the step. The rewrite
(:mod:`rnnx.graphs.reroll`) keeps segment 0 in the graph as traced and loops over segments
1..n-1 (trip count ``max(ceil(T/S) - 1, 0)``), so that each output is carried, not stacked: a
shorter last segment gives a shorter value, and an ONNX ``Loop``'s scan outputs must be one
shape; ``torch.cat`` of the segments' outputs is ``Concat(carried, segment's)`` in the body.

Refused (``reroll.segment``), by what differs:

- a last segment that is shorter and computes something else than the others (a pad to S, a
  reshape to S steps): the body depends on the segment's length in a way one Loop body cannot
  say;
- where the trace's last segment is full (S divides T), a body that reads S as a constant in a
  shape (Reshape, Expand, Tile, ConstantOfShape, Range, Resize): at other lengths the last
  segment would not run as the model runs it, and no traced copy shows how it would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.graphs.index import GraphIndex
from rnnx.graphs.reroll_match import Steps, Unrolled, difference
from rnnx.graphs.time_slice import segment_slice, time_steps
from rnnx.pass_result import Declined

# Ops whose input at this position is a shape or a size, and where a segment's length written
# as a constant would fix every segment at S steps.
_SHAPE_INPUTS = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0, "Range": 1, "Resize": 3}


@dataclass
class Segments:
    """One loop over segments: ``n`` segments of ``size`` steps of each sequence in ``sources``;
    ``last``: the steps the traced last segment holds (``size`` where it is full)."""

    n: int
    size: int
    sources: set[tuple[str, int]]
    last: int | None  # None where the graph does not say the sequence's length

    def find(self) -> Callable[[GraphIndex, str], tuple[str, int, int] | None]:
        """The slice reader :func:`rnnx.graphs.reroll_match.partition` takes: (S, k, axis) for segment k."""
        def found(g: GraphIndex, name: str) -> tuple[str, int, int] | None:
            seg = segment_slice(g, name)
            if seg is None or (seg[0], seg[3]) not in self.sources or seg[1] % self.size or seg[1] // self.size >= self.n:
                return None
            return seg[0], seg[1] // self.size, seg[3]

        return found


def segment_groups(g: GraphIndex, skip: set[tuple[str, int]]) -> list[Segments]:
    """The loops over segments of the graph's inputs, but along (input, axis) in ``skip``: slices
    ``[k*S, k*S + S)`` for k = 0..n-1, n >= 2, the last one's end at or past the sequence's end."""
    seen: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for node in g.nodes:
        seg = segment_slice(g, node.output[0]) if node.output else None
        if seg is not None and (seg[0], seg[3]) not in skip:
            seen.setdefault((seg[0], seg[3]), set()).add((seg[1], seg[2]))
    groups: dict[tuple[int, int], Segments] = {}
    for (S, axis), spans in seen.items():
        size = min((e for s, e in spans if s == 0), default=None)
        if size is None:
            continue
        starts = sorted({s for s, _ in spans})
        n = len(starts)
        if n < 2 or starts != [k * size for k in range(n)]:
            continue
        ends = {s: e for s, e in spans}
        if len(ends) != len(spans) or any(ends[k * size] != (k + 1) * size for k in range(n - 1)):
            continue
        held = time_steps(g, S, axis)
        last = held - starts[-1] if held is not None else None
        if held is not None and not 0 < held - starts[-1] <= size:
            continue  # the segments cover part of the sequence, or more: not a loop over all of it
        group = groups.setdefault((n, size), Segments(n, size, set(), last))
        group.sources.add((S, axis))
    return sorted(groups.values(), key=lambda grp: -grp.n)


def check_segments(g: GraphIndex, u: Unrolled, steps: Steps, seg: Segments) -> Declined | None:
    """Whether one body computes every segment, the last one's length whatever it is."""
    template_ids = {id(n): n for n in steps.template}
    if seg.last is not None and seg.last < seg.size and steps.missing:
        tnode = next(n for n in steps.template if id(n) in steps.missing)
        what = difference(g, u, steps, tnode, u.T - 1).replace(f"step {u.T - 1} differs from step 1",
                                                               f"the last segment ({seg.last} of {seg.size} steps) differs from the others")
        return Declined("reroll.segment", f"{what}: the body depends on the segment's length, which one Loop body cannot express")
    if seg.last is None or seg.last == seg.size:
        for n in template_ids.values():
            k = _SHAPE_INPUTS.get(n.op_type)
            for value in _shape_constants(g, n.input[k]) if k is not None and len(n.input) > k else []:
                if seg.size in np.atleast_1d(value).tolist():
                    return Declined("reroll.segment", f"its {n.op_type} {n.name or n.output[0]!r} reads the segment's length {seg.size} as a "
                                    f"constant ({np.asarray(value).tolist()}): a shorter last segment would not run as the model runs it "
                                    f"(trace at a length {seg.size} does not divide to see how the model handles one)")
    return None


def _shape_constants(g: GraphIndex, name: str) -> list[Any]:
    """The constants a shape is assembled from: itself, or the parts a Concat joins (TorchScript
    builds ``reshape(b, S, -1)`` from ``Shape(x)[0]`` and the constants S and -1)."""
    found, pending, seen = [], [name], 0
    while pending and seen < 32:
        t, seen = pending.pop(), seen + 1
        if t in g.constants:
            found.append(np.asarray(g.constants[t]))
            continue
        node = g.producer.get(t)
        if node is not None and node.op_type in ("Concat", "Unsqueeze", "Cast", "Identity", "Squeeze"):
            pending += [i for i in node.input[:1 if node.op_type != "Concat" else None] if i]
    return found


def trip_count(prefix: str, S: str, axis: int, size: int) -> tuple[list[Any], str]:
    """Nodes computing ``max(ceil(len(S) / size) - 1, 0)``: the segments after the first."""
    from onnx import TensorProto, helper

    def const(name: str, value: int, dims: list[int] | None = None) -> Any:
        return helper.make_node("Constant", [], [f"{prefix}/{name}"], value=helper.make_tensor(f"{prefix}/{name}", TensorProto.INT64, dims or [], [value]))

    n = f"{prefix}/segments"
    nodes = [const("axis", axis), const("size", size), const("size_less_1", size - 1), const("one", 1), const("zero", 0),
             helper.make_node("Shape", [S], [f"{prefix}/shape"]),
             helper.make_node("Gather", [f"{prefix}/shape", f"{prefix}/axis"], [f"{prefix}/length"], axis=0),
             helper.make_node("Add", [f"{prefix}/length", f"{prefix}/size_less_1"], [f"{prefix}/length_up"]),
             helper.make_node("Div", [f"{prefix}/length_up", f"{prefix}/size"], [n]),
             helper.make_node("Sub", [n, f"{prefix}/one"], [f"{prefix}/after_first"]),
             helper.make_node("Max", [f"{prefix}/after_first", f"{prefix}/zero"], [f"{prefix}/steps"])]
    return nodes, f"{prefix}/steps"


def body_slice(prefix: str, S: str, axis: int, size: int, t_in: str, out: str) -> list[Any]:
    """Body nodes reading segment ``t + 1`` of ``S`` (segment 0 is computed before the Loop):
    ``Slice(S, [(t+1)*size], [(t+2)*size], [axis])``, which stops at S's end as Python's does."""
    from onnx import TensorProto, helper

    def const(name: str, values: list[int], dims: list[int]) -> Any:
        return helper.make_node("Constant", [], [f"{prefix}/{name}"], value=helper.make_tensor(f"{prefix}/{name}", TensorProto.INT64, dims, values))

    p = f"{prefix}/seg_{out}"  # one set of names per slice read (a template may slice S twice)
    return [const(f"seg_{out}_one", [1], []), const(f"seg_{out}_size", [size], []), const(f"seg_{out}_axes", [axis], [1]),
            const(f"seg_{out}_flat", [1], [1]),
            helper.make_node("Add", [t_in, f"{p}_one"], [f"{p}_k"]),
            helper.make_node("Mul", [f"{p}_k", f"{p}_size"], [f"{p}_start0"]),
            helper.make_node("Add", [f"{p}_start0", f"{p}_size"], [f"{p}_end0"]),
            helper.make_node("Reshape", [f"{p}_start0", f"{p}_flat"], [f"{p}_start"]),
            helper.make_node("Reshape", [f"{p}_end0", f"{p}_flat"], [f"{p}_end"]),
            helper.make_node("Slice", [S, f"{p}_start", f"{p}_end", f"{p}_axes"], [out], name=f"{p}_slice")]
