"""Which axis of a graph input reaches a recurrence's batch or time axis: one tracer for every verb.

A file from another exporter may name its dynamic axes ``unk__612`` (tf2onnx) or ``d0``: the
names say nothing, but the wiring does. From each LSTM/GRU/RNN node's X and initial states,
whose axes ONNX defines (time, batch, features; batch-major with ``layout=1``), the tracer
walks back to a graph input through the ops whose axes it can follow:

- Identity, Cast, Dropout and the elementwise ops that keep their input's shape (activations);
- Transpose (its perm), Squeeze and Unsqueeze (their axes, an attribute or a constant input);
- Add, Sub, Mul and Div with one side a constant (a bias, a scale): the other side's axes;
- MatMul with a constant right side (a Linear layer's weights): every axis but the last;
- Conv and the pools (N, C, spatial...): the batch and the spatial axes (a length stays a
  length through a convolution, at another size), not the channels; Pad: every axis;
- Gather from a constant table along its first axis (an embedding): the indices' axes; and a
  Gather of computed values by one-dimensional indices (torch.onnx's reordering of a batch by
  sorted lengths): every axis.

It also finds the graph inputs that hold a recurrence's ``sequence_lens`` (through Casts,
reshapes and the TopK torch.onnx writes to sort packed lengths): :func:`lengths_inputs`.

Every verb reads roles through it, by way of :func:`rnnx.shapes.file_dims.read_file_dims`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rnnx.formats.onnx_quantized import is_quantized
from rnnx.graphs import walk
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.shapes.roles import BATCH, LENGTH

# Per layout (0: ONNX's time-major; 1: batch-major), per input position of an LSTM/GRU/RNN node
# (X, sequence_lens, initial_h, initial_c): each axis's role.
NODE_AXES = {
    0: {0: (LENGTH, BATCH, None), 4: (BATCH,), 5: (None, BATCH, None), 6: (None, BATCH, None)},
    1: {0: (BATCH, LENGTH, None), 4: (BATCH,), 5: (BATCH, None, None), 6: (BATCH, None, None)},
}
_SAME_SHAPE = frozenset({"Identity", "Cast", "Dropout", "Relu", "Tanh", "Sigmoid", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign",
                         "HardSigmoid", "HardSwish", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf", "Clip", "Softmax", "LogSoftmax",
                         "Gelu", "Mish", "Reciprocal", "Sign", "Floor", "Ceil", "Round", "BatchNormalization",
                         "InstanceNormalization", "LayerNormalization", "Pad",
                         "TopK"})  # torch.onnx sorts packed lengths with a TopK of all of them: the same axes
_WINDOWED = frozenset({"Conv", "MaxPool", "AveragePool", "LpPool"})  # (N, C, spatial...) in, the same axes out
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div"})
MAX_STEPS = 64  # a longer chain is not a path worth following


def axis_roles(model: Any) -> dict[tuple[str, int], str]:
    """(graph input, axis) -> "batch" or "length", for each axis of a graph input that reaches
    a recurrent node's batch or time axis in the main graph; an axis that reaches both is neither."""
    graph = model.graph
    producers = walk.producers_of(graph)
    constants = small_constants(graph)
    inputs = {i.name for i in graph.input if i.name not in constants}
    ranks = rank_of(model)
    found: dict[tuple[str, int], str] = {}
    clashes: set[tuple[str, int]] = set()
    for node in _recurrent_nodes(model):
        layout = 1 if next((a.i for a in node.attribute if a.name == "layout"), 0) == 1 else 0
        for pos, roles in NODE_AXES[layout].items():
            if pos >= len(node.input) or not node.input[pos]:
                continue
            traced = trace(node.input[pos], list(roles), producers, constants, inputs, ranks)
            if traced is None:
                continue
            name, axis_list = traced
            for axis, role in enumerate(axis_list):
                if role is not None and found.setdefault((name, axis), role) != role:
                    clashes.add((name, axis))
    return {k: v for k, v in found.items() if k not in clashes}


LENGTHS_PATH = ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "TopK")  # what may lie between a graph input and sequence_lens


def lengths_inputs(model: Any) -> dict[str, Any]:
    """Each graph input that reaches a recurrence's ``sequence_lens`` (input 4) in the main graph,
    and the (last) recurrent node it reaches."""
    producers = walk.producers_of(model.graph)
    found = {}
    for node in _recurrent_nodes(model):
        if len(node.input) > 4 and node.input[4]:
            source, _ = walk.back(node.input[4], producers, LENGTHS_PATH)
            if source is not None:
                found[source] = node
    return found


def _recurrent_nodes(model: Any) -> list[Any]:
    """The main graph's recurrent nodes (LSTM, GRU, RNN, and ONNX Runtime's DynamicQuantizeLSTM,
    whose inputs sit where LSTM's do); not the Scans rnnx lowered. Found by their op types:
    the tracer needs their wiring, not their weights (which reading them as groups would load)."""
    return [node for node in model.graph.node if node.op_type in NATIVE_OPS or is_quantized(node)]


def trace(name: str, roles: list[str | None], producers: dict[str, Any], constants: dict[str, np.ndarray],
          inputs: set[str], ranks: Callable[[str], int | None] = lambda name: None) -> tuple[str, list[str | None]] | None:
    """The graph input ``name`` comes from, and the role of each of its axes (None where an op
    loses track of an axis); None where the path leaves the ops this module follows."""
    for _ in range(MAX_STEPS):
        if name in inputs:
            return name, roles
        node = producers.get(name)
        if node is None or not node.input:
            return None
        op = node.op_type
        if op in _SAME_SHAPE:
            name = node.input[0]
        elif op == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), list(range(len(roles)))[::-1])
            if sorted(perm) != list(range(len(roles))):
                return None
            before: list[str | None] = [None] * len(roles)
            for out_axis, in_axis in enumerate(perm):
                before[in_axis] = roles[out_axis]
            roles, name = before, node.input[0]
        elif op in ("Unsqueeze", "Squeeze"):
            axes = _axes_of(node, constants)
            if axes is None:
                return None
            if op == "Unsqueeze":  # the inserted axes (counted on the output) are dropped
                inserted = {a % len(roles) for a in axes}
                roles = [r for k, r in enumerate(roles) if k not in inserted]
            else:  # the removed axes (size 1, counted on the input) come back with no role
                rank = len(roles) + len(axes)
                removed = {a % rank for a in axes}
                rest = iter(roles)
                roles = [None if k in removed else next(rest) for k in range(rank)]
            name = node.input[0]
        elif op in _BROADCAST and len(node.input) == 2:
            varying = [i for i in node.input if i not in constants]
            if len(varying) != 1:
                return None  # two computed sides: which one carries the axes is not told
            name = varying[0]
        elif op in _WINDOWED:
            if len(roles) < 3:
                return None
            roles, name = [roles[0], None, *roles[2:]], node.input[0]
        elif op == "Gather" and len(node.input) == 2 and node.input[0] in constants and node.input[1] not in constants \
                and next((a.i for a in node.attribute if a.name == "axis"), 0) == 0:
            table_rank = constants[node.input[0]].ndim  # an embedding: indices (..., ) -> (..., rows of the table)
            if table_rank < 1 or len(roles) < table_rank - 1:
                return None
            roles, name = roles[:len(roles) - (table_rank - 1)], node.input[1]
        elif op == "Gather" and len(node.input) == 2 and node.input[0] not in constants and ranks(node.input[1]) == 1:
            name = node.input[0]  # rows picked by a list of indices: the same axes, reordered along one
        elif op == "MatMul" and len(node.input) == 2 and node.input[1] in constants and constants[node.input[1]].ndim == 2:
            roles, name = roles[:-1] + [None], node.input[0]  # x @ W keeps x's leading axes
        else:
            return None
    return None


def rank_of(model: Any) -> Callable[[str], int | None]:
    """A value's rank, by ONNX's shape inference (run at the first question: most graphs never ask)."""
    known: dict[str, int] = {}

    def rank(name: str) -> int | None:
        if not known:
            import onnx

            try:
                inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
            except Exception:  # noqa: BLE001  a graph onnx cannot infer says nothing about ranks
                inferred = model.graph
            for vi in (*inferred.input, *inferred.value_info, *inferred.output):
                if vi.type.tensor_type.HasField("shape"):
                    known[vi.name] = len(vi.type.tensor_type.shape.dim)
            known.setdefault("", -1)
        return known.get(name)

    return rank


def _axes_of(node: Any, constants: dict[str, np.ndarray]) -> list[int] | None:
    """A Squeeze's or Unsqueeze's axes: its attribute (opset < 13) or its constant second input."""
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(node.input) > 1 and node.input[1] in constants:
        return [int(v) for v in constants[node.input[1]].reshape(-1)]
    return None


def small_constants(graph: Any) -> dict[str, np.ndarray]:
    """Initializers and Constant outputs, as arrays only where small (axes, shapes); a large one
    stands as an empty array of its rank (no memory): the tracer needs only to know it is constant."""
    from onnx import numpy_helper

    found: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
        size = int(np.prod(tensor.dims)) if tensor.dims else 1
        found[tensor.name] = numpy_helper.to_array(tensor) if size <= 64 and not tensor.external_data else np.empty((0,) * len(tensor.dims), np.uint8)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                size = int(np.prod(value.dims)) if value.dims else 1
                found[node.output[0]] = numpy_helper.to_array(value) if size <= 64 else np.empty((0,) * len(value.dims), np.uint8)
    return found
