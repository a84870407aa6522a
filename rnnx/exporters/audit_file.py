"""What the dimension audit asks of the file rather than of the model.

The audit (:mod:`rnnx.exporters.audit`) runs the torch model to learn which sizes it takes and
what each dimension is. Its module hooks see ``nn.LSTM``/``GRU``/``RNN`` calls and cell modules
called once per step; a cell written by hand (its gates from ``Linear``s or ``@``, ``chunk``,
``sigmoid``, ``tanh``) is no module, so the model alone does not say that a Python loop over its
steps follows a dimension. The trace does: the loop is unrolled into the file, one slice of the
sequence per step. :func:`unrolled_steps` reads those slices back to the graph input they cut,
so a length the file fixes at the example's step count is called a length, whoever wrote the cell.

Also here: which graph inputs the file reads the values of (:func:`values_read`), which it reads
at all, shape included (:func:`shape_read`), and making the dimensions of inputs it never reads
dynamic (:func:`free_dims`).
"""

from __future__ import annotations

import collections
from typing import Any

from rnnx.exporters.record import update_record
from rnnx.exporters.shapes import Naming
from rnnx.graphs import walk
from rnnx.graphs.index import all_graphs
from rnnx.graphs.reroll import left_unrolled
from rnnx.shapes.roles import LENGTH, OTHER
from rnnx.shapes.wiring import rank_of, small_constants, trace

# Graph ops that read a tensor's shape, not its values.
_SHAPE_ONLY = {"Shape", "Size"}


def values_read(proto: Any) -> set[str]:
    """Graph inputs whose values some node reads (not only their shape)."""
    readers: dict[str, list[str]] = collections.defaultdict(list)
    for g in all_graphs(proto.graph):
        for node in g.node:
            for name in node.input:
                readers[name].append(node.op_type)
    outputs = {o.name for o in proto.graph.output}
    return {i.name for i in proto.graph.input if i.name in outputs or any(op not in _SHAPE_ONLY for op in readers.get(i.name, []))}


def shape_read(proto: Any) -> set[str]:
    """Graph inputs some node reads at all, their values or only their shape: an input read by
    ``Shape`` alone (``zeros_like(x)`` feeding a recurrence) still has its sizes bound by what that
    shape reaches, so only an input no node reads takes any size."""
    read = {name for g in all_graphs(proto.graph) for node in g.node for name in node.input}
    outputs = {o.name for o in proto.graph.output}
    return {i.name for i in proto.graph.input if i.name in read or i.name in outputs}


def unrolled_steps(proto: Any) -> dict[tuple[str, int], int]:
    """(graph input, axis) -> the number of steps of a loop the file still holds unrolled that
    slices that axis (through the ops the wiring tracer follows: a Linear, a Transpose, an
    activation), one slice (or segment) per step. An axis several loops cut keeps the most steps."""
    found: dict[tuple[str, int], int] = {}
    unrolled = left_unrolled(proto)
    if not unrolled:
        return found
    graph = proto.graph
    producers, constants, rank = walk.producers_of(graph), small_constants(graph), rank_of(proto)
    inputs = {i.name for i in graph.input if i.name not in constants}
    for source, axis, steps, _segment in unrolled:
        n = rank(source) if source not in inputs else len(next(i for i in graph.input if i.name == source).type.tensor_type.shape.dim)
        if n is None or not 0 <= axis < n:
            continue
        roles: list[str | None] = [None] * n
        roles[axis] = LENGTH
        traced = trace(source, roles, producers, constants, inputs, rank)
        if traced is None or LENGTH not in traced[1]:
            continue
        key = (traced[0], traced[1].index(LENGTH))
        found[key] = max(found.get(key, 0), steps)
    return found


def free_dims(proto: Any, naming: Naming, freed: dict[str, dict[int, str]]) -> None:
    """Make the dimensions in ``freed`` dynamic in the graph's declared input shapes, in
    ``naming`` and in the file's record."""
    for inp in proto.graph.input:
        for d, label in freed.get(inp.name, {}).items():
            dim = inp.type.tensor_type.shape.dim[d]
            dim.ClearField("dim_value")
            dim.dim_param = label
    for name, dims in freed.items():
        shape = list(naming.input_dims.get(name, []))
        for d, label in dims.items():
            shape[d] = label
            naming.roles.setdefault(label, OTHER)
        naming.input_dims[name] = shape
    update_record(proto, inputs=naming.input_dims, roles=naming.roles)
