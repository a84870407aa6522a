"""One step of a sequence: the forms exporters write ``x[t]`` (and ``x[:, t]``) in.

An unrolled loop reads step t of one sequence S along axis 0 (time-major) or 1
(batch-first) as:
- ``Gather(S, t, axis)`` with a constant scalar t (``x[t]``);
- ``Squeeze(Slice(S, [t], [t + 1], [axis]), [axis])`` (torch.onnx's dynamo exporter's ``unbind``);
- ``Squeeze(Split(S, axis)[t], [axis])``, the parts of size 1: sizes all ones (an input at
  opset 13+, an attribute before), or none given (``num_outputs`` at opset 18, the outputs'
  count before), where the Squeeze proves each part is one step (torch.onnx's TorchScript
  exporter's ``unbind``);
- ``SequenceAt(SplitToSequence(S, axis, keepdims=0), t)`` with no split sizes (the
  sequence form of ``unbind``), or a ``Squeeze`` of it with keepdims=1.

A loop over segments (``for i in range(0, T, S): enc(x[:, i:i + S])``) reads segment k as
``Slice(x, [k*S], [k*S + S], [axis])``; :func:`segment_slice` reads that form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx.formats.onnx_read import value_dims
from rnnx.graphs.index import GraphIndex

Step = tuple[str, int, int]  # (S, t, axis)


def _const_ints(g: GraphIndex, node: Any, k: int) -> list[int] | None:
    if len(node.input) <= k or not node.input[k]:
        return None
    value = g.constants.get(node.input[k])
    return [int(v) for v in np.atleast_1d(value)] if value is not None and np.asarray(value).ndim <= 1 else None


def _scalar(g: GraphIndex, name: str) -> int | None:
    value = g.constants.get(name)
    return int(value) if value is not None and np.asarray(value).size == 1 and np.asarray(value).ndim <= 1 else None


def _split_part(g: GraphIndex, name: str, node: Any, axis: int) -> Step | None:
    """Part t of a Split of S into parts of size 1 along ``axis``."""
    if g.attr(node, "axis", 0) != axis:
        return None
    sizes = _const_ints(g, node, 1) if len(node.input) > 1 and node.input[1] else g.attr(node, "split")
    if len(node.input) > 1 and node.input[1] and sizes is None:
        return None  # sizes computed at run time
    if sizes is not None and (len(sizes) != len(node.output) or any(s != 1 for s in sizes)):
        return None
    num = g.attr(node, "num_outputs")
    if num is not None and num != len(node.output):
        return None
    return node.input[0], list(node.output).index(name), axis


def _split_to_sequence(g: GraphIndex, node: Any, keepdims: int) -> Step | None:
    """``SequenceAt(SplitToSequence(S, axis, keepdims), t)``, the sequence's parts of size 1."""
    seq = g.prod(node.input[0], "SplitToSequence")
    t = _scalar(g, node.input[1]) if len(node.input) > 1 else None
    if seq is None or t is None or t < 0 or (len(seq.input) > 1 and seq.input[1]) or g.attr(seq, "keepdims", 1) != keepdims:
        return None
    axis = g.attr(seq, "axis", 0)
    return (seq.input[0], t, axis) if axis in (0, 1) else None


def time_slice(g: GraphIndex, name: str) -> Step | None:
    """(S, t, axis) when tensor ``name`` is step t of sequence S along axis 0 or 1, else None."""
    node = g.producer.get(name)
    if node is None:
        return None
    if node.op_type == "Gather":
        axis, t = g.attr(node, "axis", 0), g.constants.get(node.input[1])
        if axis in (0, 1) and t is not None and np.asarray(t).ndim == 0 and int(t) >= 0:
            return node.input[0], int(t), axis
        return None
    if node.op_type == "SequenceAt":
        return _split_to_sequence(g, node, keepdims=0)
    if node.op_type != "Squeeze":
        return None
    axes = g.axes(node)
    if axes is None or axes not in ([0], [1]):
        return None
    (axis,) = axes
    part = g.producer.get(node.input[0])
    if part is None:
        return None
    if part.op_type == "Split":
        return _split_part(g, node.input[0], part, axis)
    if part.op_type == "SequenceAt":
        found = _split_to_sequence(g, part, keepdims=1)
        return found if found is not None and found[2] == axis else None
    if part.op_type == "Slice":
        starts, ends, axes, steps = (_const_ints(g, part, k) for k in (1, 2, 3, 4))
        if axes is None and len(part.input) > 3 and part.input[3]:
            return None
        if starts is None or ends is None or len(starts) != 1 or (axes or [0]) != [axis] or steps not in (None, [1]):
            return None
        if starts[0] >= 0 and ends[0] == starts[0] + 1:
            return part.input[0], starts[0], axis
    return None


Segment = tuple[str, int, int, int]  # (S, start, end, axis)


def segment_slice(g: GraphIndex, name: str) -> Segment | None:
    """(S, start, end, axis) when tensor ``name`` is ``S[start:end]`` along one axis, all
    constant, step 1, S a graph input (``x[:, i:i + S]`` in a loop over segments; the axis made
    non-negative by S's rank). A segment of a value computed in the graph is not one: a chunk
    of gates is sliced so too."""
    node = g.producer.get(name)
    if node is None or node.op_type != "Slice" or node.input[0] not in g.input_order:
        return None
    starts, ends, axes, steps = (_const_ints(g, node, k) for k in (1, 2, 3, 4))
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1 or steps not in (None, [1]) or axes is None or len(axes) != 1:
        return None
    rank = next((len(vi.type.tensor_type.shape.dim) for vi in g.graph.input if vi.name == node.input[0]), None)
    axis = axes[0] + rank if axes[0] < 0 and rank is not None else axes[0]
    if axis < 0 or starts[0] < 0 or ends[0] <= starts[0]:
        return None
    return node.input[0], starts[0], ends[0], axis


def describe_source(g: GraphIndex, name: str) -> str:
    """What ``name`` is computed from, for a refusal: its producer's op and that op's inputs."""
    node = g.producer.get(name)
    if node is None:
        return f"{name!r}, a graph input" if name in g.input_order else f"{name!r}"
    inputs = ", ".join(repr(i) for i in node.input if i and i not in g.constants)
    return f"{node.op_type} {node.name or node.output[0]!r} of {inputs or 'constants'}"


def time_steps(g: GraphIndex, S: str, axis: int) -> int | None:
    """How many steps S holds along ``axis`` where the graph says so: its declared shape, or a
    Split of it into parts along that axis; None when only the run will tell."""
    for vi in (*g.graph.input, *g.graph.value_info, *g.graph.output):
        if vi.name == S:
            size = (value_dims(vi, unnamed=None)[axis:] or [None])[0]
            if isinstance(size, int):
                return size
    if S in g.constants:
        shape = np.shape(g.constants[S])
        return int(shape[axis]) if len(shape) > axis else None
    for user in g.consumers.get(S, []):
        if user.op_type == "Split" and user.input[0] == S and g.attr(user, "axis", 0) == axis:
            return len(user.output)
    return None
