"""The shapes fuse and lower check a rewrite at: the input model's dimensions and each label's
role (every verb's reading, :func:`rnnx.shapes.file_dims.read_file_dims`, with the rewritten
file's wiring too), the sizes the caller gives, those the graph pins (a constant index, an
unrolled loop), and the ladder climbed (:data:`rnnx.shapes.sizes.REWRITE_LADDER`) to find
shapes the input model runs. The seeded feeds at those shapes are
:mod:`rnnx.pipelines.rewrite_feeds`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.graphs import walk
from rnnx.shapes.file_dims import InputSpec, read_file_dims, size_of
from rnnx.shapes.roles import BATCH, LENGTH
from rnnx.shapes.sizes import GROWTH, REWRITE_FIRST, REWRITE_LADDER

MAX_ELEMENTS = 1 << 26  # a candidate's inputs, all together: larger ones are not tried
MAX_TRIES = 40  # shapes tried in search of one the input model runs
_SHAPE = re.compile(r"^(?:\[(\d+(?:,\d+)*)?\]|(\d+(?:x\d+)*))$")

# --- what the caller gives -----------------------------------------------------------------


def parse_input_shape(text: str) -> tuple[str | None, list[int]]:
    """``NAME:SHAPE`` (``x:1x16000`` or ``x:[1,16000]``, as ``rnnx export --input`` writes
    shapes), or a bare ``SHAPE`` for a model with one input: (name or None, sizes). A name may
    hold colons itself (tf2onnx's ``x:0``): the shape is what follows the last one."""
    name, sep, body = text.rpartition(":")
    match = _SHAPE.match(body.replace(" ", ""))
    if (sep and not name) or match is None:
        raise RNNXError(f"input_shapes: {text!r}: expected NAME:SHAPE with positive sizes, e.g. x:1x16000 or x:[1,16000]")
    sizes = [int(v) for v in (match.group(1) if match.group(1) is not None else match.group(2) or "").replace("x", ",").split(",") if v]
    if any(s < 1 for s in sizes) or float(np.prod(sizes, dtype=np.float64)) > MAX_ELEMENTS:
        raise RNNXError(f"input_shapes: {text!r}: expected positive sizes totalling at most {MAX_ELEMENTS} elements, found {sizes}")
    return (name or None), sizes


def parse_input_shapes(texts: list[str] | None) -> dict[str | None, list[int]]:
    """Several ``NAME:SHAPE``; one name given twice is refused."""
    shapes: dict[str | None, list[int]] = {}
    for text in texts or []:
        name, sizes = parse_input_shape(text)
        if name in shapes:
            raise RNNXError(f"input_shapes: {name or 'the unnamed input'} is given twice ({text!r}); give each input once")
        shapes[name] = sizes
    return shapes

@dataclass
class ShapePlan:
    specs: list[InputSpec]
    roles: dict[str, str]
    fixed: dict[str, int]  # set by the caller
    held: dict[str, tuple[int, str]]  # read position by position: (size, where)
    least: dict[str, int]  # a constant index needs at least this size
    example: dict[str, int]  # the recorded example's sizes

def plan_shapes(original: Any, rewritten: Any | None = None, dims: dict[str, int] | None = None,
                input_shapes: dict[str | None, list[int]] | None = None) -> ShapePlan:
    """What the check's shapes are made of: the inputs' dimensions and each label's role, the
    sizes given, those the graph pins, and the recorded example's."""
    inits = {i.name for i in original.graph.initializer}
    for vi in original.graph.input:
        if vi.name in inits:
            continue
        sizes = [d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value")]
        if any(s < 0 for s in sizes):
            raise RNNXError(f"graph input {vi.name!r}: shape {sizes} has a negative size; the model is damaged")
    read = read_file_dims(original, also=(rewritten,) if rewritten is not None else ())
    specs, roles = read.specs, read.roles
    example: dict[str, int] = {}
    for spec in specs:
        for dim, size in zip(spec.dims, read.example.get(spec.name, [])):
            if isinstance(dim, str) and dim in roles:
                example.setdefault(dim, int(size))
    fixed = _given_sizes(specs, roles, dims or {}, input_shapes or {})
    least, held = _read_positions(original, specs)
    return ShapePlan(specs, roles, fixed, {k: v for k, v in held.items() if k not in fixed}, least, example)


def _given_sizes(specs: list[InputSpec], roles: dict[str, str], dims: dict[str, int], shapes: dict[str | None, list[int]]) -> dict[str, int]:
    labels = ", ".join(roles) or "none"
    for label, size in dims.items():
        if label not in roles:
            raise RNNXError(f"dims: {label}: the file has no dynamic dimension of that name; its dynamic dimensions are {labels}")
        if not isinstance(size, int) or size < 1:
            raise RNNXError(f"dims: {label}={size}: expected a positive size")
    fixed = dict(dims)
    names = [s.name for s in specs]
    for name, shape in shapes.items():
        if name is None:
            if len(specs) != 1:
                raise RNNXError(f"input_shapes: a SHAPE without a NAME fits a model with one input; this one takes {', '.join(names) or 'none'}: "
                                "write NAME:SHAPE")
            name = specs[0].name
        spec = next((s for s in specs if s.name == name), None)
        if spec is None:
            raise RNNXError(f"input_shapes: {name}: the file has no graph input of that name; its inputs are {', '.join(names) or 'none'}")
        given = "x".join(map(str, shape))
        if len(shape) != len(spec.dims):
            raise RNNXError(f"input_shapes: {name}:{given}: {name} has {len(spec.dims)} dimensions {_dims_text(spec.dims)}, found {len(shape)}")
        for d, (dim, size) in enumerate(zip(spec.dims, shape)):
            if isinstance(dim, int):
                if dim != size:
                    raise RNNXError(f"input_shapes: {name}:{given}: dimension {d} of {name} is {dim} in the graph {_dims_text(spec.dims)}, found {size}")
            elif dim in roles:
                if fixed.setdefault(dim, size) != size:
                    raise RNNXError(f"input_shapes: {name}:{given}: dimension {d} of {name} is {dim}, which is {fixed[dim]} elsewhere; give one size")
    return fixed


def _dims_text(dims: list[int | str]) -> str:
    return "(" + ", ".join(map(str, dims)) + ")"


def _read_positions(model: Any, specs: list[InputSpec]) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
    """For each label: the size a constant index into its axis needs (index k: k + 1), and, where
    the graph reads that axis position by position at 0..n-1 (an unrolled loop), n and where."""
    graph = model.graph
    consts = _small_int_constants(graph)
    producers = walk.producers_of(graph)
    axes = {(s.name, d): dim for s in specs for d, dim in enumerate(s.dims) if isinstance(dim, str)}
    positions: dict[tuple[str, int], set[int]] = {}
    bound: dict[tuple[str, int], int] = {}

    def source(name: str, axis: int) -> tuple[str, int] | None:
        for _ in range(16):
            if (name, axis) in axes:
                return name, axis
            node = producers.get(name)
            if node is None or not node.input:
                return None
            if node.op_type == "Transpose":
                perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
                if perm is None or not 0 <= axis < len(perm):
                    return None
                axis = perm[axis]
            elif node.op_type not in ("Identity", "Cast"):
                return None
            name = node.input[0]
        return None

    def read(key: tuple[str, int] | None, at: list[int], one_by_one: bool) -> None:
        if key is None or not at:
            return
        bound[key] = max(bound.get(key, 0), max(at) + 1)
        if one_by_one:
            positions.setdefault(key, set()).update(at)

    sequences: dict[str, tuple[str, int] | None] = {}
    for node in graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in consts:
            index = consts[node.input[1]]
            rank = _rank(node.input[0], specs, producers)
            axis = attrs["axis"].i if "axis" in attrs else 0
            if rank is not None and axis < 0:
                axis += rank
            read(source(node.input[0], axis), [int(v) for v in index.flat if v >= 0], index.ndim == 0)
        elif node.op_type == "SplitToSequence" and (len(node.input) < 2 or not node.input[1]):
            axis = attrs["axis"].i if "axis" in attrs else 0
            sequences[node.output[0]] = source(node.input[0], axis) if axis >= 0 else None
        elif node.op_type == "SequenceAt" and node.input[0] in sequences and node.input[1] in consts:
            read(sequences[node.input[0]], [int(v) for v in consts[node.input[1]].flat if v >= 0], True)
        elif node.op_type == "Slice" and len(node.input) >= 3 and all(n in consts for n in node.input[1:3]):
            # Slice clamps, so only a one-element slice says anything: an unrolled loop's step
            if any(len(node.input) > k and node.input[k] and node.input[k] not in consts for k in (3, 4)):
                continue
            starts, ends = consts[node.input[1]].ravel(), consts[node.input[2]].ravel()
            slice_axes = consts[node.input[3]].ravel() if len(node.input) > 3 and node.input[3] else np.arange(len(starts))
            steps = consts[node.input[4]].ravel() if len(node.input) > 4 and node.input[4] in consts else np.ones(len(starts), np.int64)
            for start, end, axis, step in zip(starts, ends, slice_axes, steps):
                if axis >= 0 and 0 <= start and step == 1 and end == start + 1:
                    read(source(node.input[0], int(axis)), [int(start)], True)
    least: dict[str, int] = {}
    held: dict[str, tuple[int, str]] = {}
    for key, size in bound.items():
        label = axes[key]
        least[label] = max(least.get(label, 0), size)
        seen = positions.get(key, set())
        if size >= 2 and seen == set(range(size)):
            held[label] = (size, f"the graph reads axis {key[1]} of {key[0]} at each position 0 to {size - 1} by a constant index (an unrolled loop)")
    return least, held


def _rank(name: str, specs: list[InputSpec], producers: dict[str, Any]) -> int | None:
    for _ in range(16):
        spec = next((s for s in specs if s.name == name), None)
        if spec is not None:
            return len(spec.dims)
        node = producers.get(name)
        if node is None or node.op_type not in ("Identity", "Cast", "Transpose") or not node.input:
            return None
        name = node.input[0]
    return None


def _small_int_constants(graph: Any) -> dict[str, np.ndarray]:
    """Integer initializers and Constant outputs of at most 64 elements."""
    from onnx import TensorProto, numpy_helper

    ints = (TensorProto.INT64, TensorProto.INT32)
    found: dict[str, np.ndarray] = {}
    tensors = [(i.name, i) for i in graph.initializer]
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                tensors.append((node.output[0], value))
            ints_value = next((list(a.ints) for a in node.attribute if a.name == "value_ints"), None)
            one = next((a.i for a in node.attribute if a.name == "value_int"), None)
            if ints_value is not None and len(ints_value) <= 64:
                found[node.output[0]] = np.array(ints_value, np.int64)
            elif one is not None:
                found[node.output[0]] = np.array(one, np.int64)
    for name, tensor in tensors:
        if tensor.data_type in ints and int(np.prod(list(tensor.dims), dtype=np.float64)) <= 64 and tensor.data_location != TensorProto.EXTERNAL:
            try:
                found[name] = numpy_helper.to_array(tensor).astype(np.int64)
            except (ValueError, TypeError):
                continue
    return found


def _first_sizes(plan: ShapePlan) -> dict[str, int]:
    sizes = {}
    for label, role in plan.roles.items():
        if label in plan.fixed:
            sizes[label] = plan.fixed[label]
        elif label in plan.held:
            sizes[label] = plan.held[label][0]
        else:
            sizes[label] = max(plan.example.get(label, REWRITE_FIRST[role]), plan.least.get(label, 1))
    return sizes


def _ladder(plan: ShapePlan, label: str, first: int) -> list[int]:
    if label in plan.fixed or label in plan.held:
        return [first]
    least = plan.least.get(label, 1)
    values = [first] + [v for v in ([least] if least > first else []) + list(REWRITE_LADDER[plan.roles[label]]) if v >= least]
    return list(dict.fromkeys(values))


def candidates(plan: ShapePlan) -> list[tuple[str, dict[str, int]]]:
    """Shapes to look for one the input model runs at, best first: the first sizes, then every
    label one step up its ladder together, then each label up its ladder alone."""
    first = _first_sizes(plan)
    ladders = {label: _ladder(plan, label, size) for label, size in first.items()}
    found = [first]
    for k in range(1, max((len(v) for v in ladders.values()), default=1)):
        found.append({label: values[min(k, len(values) - 1)] for label, values in ladders.items()})
    for label, values in ladders.items():
        for value in values[1:]:
            found.append({**first, label: value})
    seen, unique = set(), []
    for sizes in found:
        key = tuple(sorted(sizes.items()))
        if key not in seen:
            seen.add(key)
            unique.append((_name_first(plan, sizes), sizes))
    return unique[:MAX_TRIES]


def _name_first(plan: ShapePlan, sizes: dict[str, int]) -> str:
    if not sizes:
        return "the graph's shapes"
    if plan.example and all(plan.example.get(k) == v for k, v in sizes.items() if k not in plan.held):
        return "the recorded example"
    if plan.fixed and all(k in plan.fixed or k in plan.held for k in sizes):
        return "the sizes given"
    return "first shape"


def variants(plan: ShapePlan, base: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """Near the first shape: batch 1, then every batch and length larger (as ``rnnx export``'s
    self-check grows them, :data:`rnnx.shapes.sizes.GROWTH`: the cost stays the first shape's);
    sizes given, held, or neither a batch nor a length keep theirs."""
    free = {label: role for label, role in plan.roles.items() if label not in plan.fixed and label not in plan.held}
    batches = [label for label, role in free.items() if role == BATCH]
    lengths = [label for label, role in free.items() if role == LENGTH]
    out = []
    if batches:
        out.append(("batch=1", {**base, **{label: 1 for label in batches}}))
    if batches or lengths:
        larger = {**base, **{label: base[label] + GROWTH[plan.roles[label]] for label in batches + lengths}}
        out.append(("larger: " + ", ".join(f"{label}={larger[label]}" for label in batches + lengths), larger))
    return out


def shapes_at(plan: ShapePlan, sizes: dict[str, int]) -> dict[str, list[int]]:
    shapes = {}
    for spec in plan.specs:
        shape = []
        for dim in spec.dims:
            if isinstance(dim, int):
                shape.append(dim)
            elif dim in sizes:
                shape.append(sizes[dim])
            else:  # a derived size, such as 2*seq; one below 1 (seq//16 at a short seq) is fed as 1
                value = size_of(dim, sizes)
                shape.append(value if value is not None and value > 0 else 1)
        shapes[spec.name] = shape
    return shapes
