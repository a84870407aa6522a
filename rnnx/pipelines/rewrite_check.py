"""Hold a rewritten ONNX model against the model it came from, in ONNX Runtime.

The check runs at shapes the input model itself takes, chosen as ``rnnx verify`` chooses them
(:mod:`rnnx.verify.inputs`): each graph input's dimensions as the graph names them, what each
dynamic one is (a batch, a length or something else: by ``rnnx export``'s record, by its name,
or by the graph's wiring to a recurrence, in the input model or else in the rewrite), and
their sizes from the example ``rnnx export`` recorded, where there is one.

The cases: a first shape (the recorded example; else batch 3, lengths 16, other sizes 3),
batch 1, and every batch and length larger (batch + 2, lengths + 3). A dimension the graph
reads position by position at constant indices 0..n-1 (an unrolled loop: ``Gather``,
``SequenceAt``, one-element ``Slice``) means what it traced only at n, so it is held there;
a constant index k anywhere needs a size above k. The input model runs first at each case.
Where it refuses the first shape, other sizes are tried (lengths 16, 32, 64, ... 4096; batch
1 and 2; other sizes 1, 16, 32, ...); a later case it refuses is skipped, saying why: that is
a fact about the model, not about the rewrite. Where the input model runs, the rewrite must
run and match: each output within a multiple of the rounding floor (:mod:`rnnx.tolerance`'s
calibrated rule), the floor being how far the input model's own outputs move when every
floating input moves one unit in the last place; or within the tolerance the caller set. The
caller may set sizes (``dims``: a label's size; ``input_shapes``: an
input's whole shape); if no shape tried runs the input model, the one-line refusal names the
shapes tried and how to give one.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits, parity
from rnnx.engines.isolated import IsolatedOnnxRuntime, TimeBudget
from rnnx.errors import ParityError, RNNXError
from rnnx.formats.onnx_metadata import read_metadata
from rnnx.graphs.precision import computes_in_float16
from rnnx.graphs import walk
from rnnx.graphs.index import all_graphs
from rnnx.tolerance import Tolerances
from rnnx.graphs.axis_trace import axis_roles
from rnnx.shapes.roles import BATCH, LENGTH, OTHER
from rnnx.shapes.sizes import REWRITE_LADDER
from rnnx.verify.inputs import InputSpec, input_specs

# What a rewrite holds per node, measured: the input and its copy as Python protobuf objects
# (about 4 KiB a node), and for each lowered recurrence its Scan body and hoisted product.
NODE_BYTES = 4 << 10
LOWERED_BYTES = 256 << 10

# First sizes, where no recorded example gives one, and what is tried after a refusal.
FIRST = {BATCH: 3, LENGTH: 16, OTHER: 3}
MAX_TRIES = 40  # shapes tried in search of one the input model runs
MAX_ELEMENTS = 1 << 26  # a candidate's inputs, all together: larger ones are not tried
_REFUSED = "ONNX Runtime could not run "  # IsolatedOnnxRuntime's prefix for a run that raised (its process lives on)
_SHAPE = re.compile(r"^(?:\[(\d+(?:,\d+)*)?\]|(\d+(?:x\d+)*))$")


def check_rewrite_size(model: Any, source: Any, lowered: int = 0) -> None:
    """Refuse, before copying it, a graph whose rewrite would pass the memory budget
    (300,000 Identity nodes fit in 9 MB of protobuf and take a gigabyte as objects)."""
    nodes = sum(len(g.node) for g in all_graphs(model.graph))
    limits.check_claim(f"{source}: rewriting its {nodes} nodes", nodes * NODE_BYTES + lowered * LOWERED_BYTES, Path(source).stat().st_size)


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


# --- the shapes -----------------------------------------------------------------------------


@dataclass
class CheckCase:
    """One shape of the check, and what happened there."""

    name: str
    sizes: dict[str, int]  # each dynamic dimension's label -> its size
    shapes: dict[str, list[int]]  # each graph input's shape
    rows: list[parity.Comparison] = field(default_factory=list)
    skipped: str = ""  # the input model refuses this shape: not the rewrite's doing
    error: str = ""  # the rewrite failed where the input model ran: a failure

    @property
    def passed(self) -> bool:
        return bool(self.skipped) or (not self.error and bool(self.rows) and all(r.passed for r in self.rows))


@dataclass
class RewriteCheck:
    """A rewrite against its input in ONNX Runtime, case by case; truthy when at least one
    case ran and none failed. ``dims`` holds each graph input's dimensions as the graph names
    them (a size, or a dynamic dimension's label), ``roles`` what each label is."""

    label: str
    dims: dict[str, list[int | str]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    cases: list[CheckCase] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # shapes the input model refused while rnnx looked for one it runs
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[parity.Comparison]:
        return [r for c in self.cases for r in c.rows]

    def worst(self) -> parity.Comparison | None:
        """The row with the largest absolute error."""
        return max(self.rows, key=lambda r: r.max_abs, default=None)

    def __bool__(self) -> bool:
        ran = [c for c in self.cases if not c.skipped]
        return bool(ran) and all(c.passed for c in ran)

    def where(self, case: CheckCase) -> str:
        """``x[batch=1, 80, seq=16], h[batch=1, 16]``: each input's shape, each dynamic size by its label."""
        return ", ".join(f"{name}[{', '.join(_dim_text(d, s) for d, s in zip(self.dims.get(name, shape), shape))}]"
                         for name, shape in case.shapes.items())

    def failure(self) -> str:
        """One line: the first case that failed, where, and what."""
        for case in self.cases:
            if case.skipped or case.passed:
                continue
            if case.error:
                return f"at {case.name} ({self.where(case)}): {case.error}"
            row = max((r for r in case.rows if not r.passed), key=lambda r: (np.isnan(r.max_abs), r.max_abs))
            return f"at {case.name} ({self.where(case)}): {row.describe()}"
        return "" if self else "nothing was compared"

    def to_json(self, tolerances: dict[str, Any] | None = None) -> dict[str, Any]:
        rows = []
        for case in self.cases:
            for r in case.rows:
                row = {k: v for k, v in asdict(r).items() if k not in ("seq_len", "batch")}
                rows.append({"case": case.name, "shapes": case.shapes, **row})
        return {
            "passed": bool(self), "tolerances": tolerances or {}, "dims": self.dims, "roles": self.roles,
            "cases": [{"name": c.name, "sizes": c.sizes, "shapes": c.shapes, "where": self.where(c), "passed": c.passed,
                       "skipped": c.skipped or None, "error": c.error or None} for c in self.cases],
            "rows": rows, "refused": self.refused, "notes": self.notes,
        }

    def __str__(self) -> str:
        ran = [c for c in self.cases if not c.skipped]
        lines = [f"checked against {self.label} in ONNX Runtime at {len(ran)} shape(s) it runs:"]
        width = max((len(c.name) for c in self.cases), default=4)
        for c in self.cases:
            lines.append(f"  {c.name:<{width}}  {self.where(c)}" + (f"  skipped: {c.skipped}" if c.skipped else "")
                         + (f"  FAIL: {c.error}" if c.error else ""))
        rows = [(c, r) for c in ran for r in c.rows]
        if rows:
            out = max(6, *(len(r.output) for _, r in rows))
            lines.append(f"  {'case':<{width}}  {'output':<{out}} {'max abs':>10} {'mean abs':>10} {'p99 abs':>10} {'max rel':>10}  "
                         f"{'multiple x floor: ratio | atol, rtol, stat':<30} result")
            for c, r in rows:
                verdict = "ok" if r.passed else "FAIL" + (f" ({r.note})" if r.note else "")
                held = f"{r.multiple:g} x {r.floor:.2e}: {r.ratio:.3g}" if r.floor is not None else f"{r.atol:g}, {r.rtol:g}, {r.stat}"
                lines.append(f"  {c.name:<{width}}  {r.output:<{out}} {r.max_abs:>10.3e} {r.mean_abs:>10.3e} {r.p99_abs:>10.3e} {r.max_rel:>10.3e}  "
                             f"{held:<30} {verdict}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _dim_text(dim: int | str, size: int) -> str:
    return str(size) if isinstance(dim, int) else f"{dim}={size}"


@dataclass
class _Plan:
    specs: list[InputSpec]
    roles: dict[str, str]
    fixed: dict[str, int]  # set by the caller
    held: dict[str, tuple[int, str]]  # read position by position: (size, where)
    least: dict[str, int]  # a constant index needs at least this size
    example: dict[str, int]  # the recorded example's sizes


class RewriteDiffers(ParityError):
    """A rewrite (fuse, lower) differs from its input: one line, and ``check``, the case-by-case
    comparison the command line prints (its table, or its JSON with every case's numbers)."""

    def __init__(self, line: str, check: RewriteCheck) -> None:
        super().__init__(line)
        self.check = check


def plan_shapes(original: Any, rewritten: Any | None = None, dims: dict[str, int] | None = None,
                input_shapes: dict[str | None, list[int]] | None = None) -> _Plan:
    """What the check's shapes are made of: the inputs' dimensions and each label's role, the
    sizes given, those the graph pins, and the recorded example's."""
    inits = {i.name for i in original.graph.initializer}
    for vi in original.graph.input:
        if vi.name in inits:
            continue
        sizes = [d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value")]
        if any(s < 0 for s in sizes):
            raise RNNXError(f"graph input {vi.name!r}: shape {sizes} has a negative size; the model is damaged")
    export, _ = read_metadata(original)
    specs, roles = input_specs(original, export)
    for spec in specs:  # a derived size (2*seq) that names no label of its own is sized as one
        for dim in spec.dims:
            if isinstance(dim, str) and dim not in roles and _derived(dim, dict.fromkeys(roles, 1)) is None:
                roles[dim] = OTHER
    recorded_roles = (export or {}).get("roles")
    recorded_roles = recorded_roles if isinstance(recorded_roles, dict) else {}
    # A recurrence says what an axis is where names and verify's wiring could not: through an
    # Unsqueeze whose axes a Constant holds (tf2onnx's initial states), or one the rewrite made.
    for model in [original] + ([rewritten] if rewritten is not None else []):
        for label, role in _traced_roles(model, specs).items():
            if roles.get(label) == OTHER and label not in recorded_roles:
                roles[label] = role
    example: dict[str, int] = {}
    recorded = (export or {}).get("example")
    for spec in specs:
        shape = recorded.get(spec.name) if isinstance(recorded, dict) else None
        if isinstance(shape, list) and len(shape) == len(spec.dims) and all(isinstance(s, int) and 0 < s < 2**31 for s in shape):
            for dim, size in zip(spec.dims, shape):
                if isinstance(dim, str) and dim in roles:
                    example.setdefault(dim, int(size))
    fixed = _given_sizes(specs, roles, dims or {}, input_shapes or {})
    least, held = _read_positions(original, specs)
    return _Plan(specs, roles, fixed, {k: v for k, v in held.items() if k not in fixed}, least, example)


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


def _derived(dim: str, sizes: dict[str, Any]) -> int | None:
    """A dimension such as ``2*seq`` or ``((seq//16)) + 1``, from the labels' sizes; None when it
    cannot be worked out (or names labels that are not known)."""
    if dim.isidentifier():
        return None
    try:
        import sympy

        value = sympy.sympify(dim, locals={k: sympy.Symbol(k) for k in sizes})
        if value.free_symbols - {sympy.Symbol(k) for k in sizes}:
            return None
        value = value.subs({sympy.Symbol(k): v for k, v in sizes.items() if isinstance(v, int)})
        return int(value) if value.is_number else None
    except Exception:  # noqa: BLE001  sympy raises many types for text it cannot read
        return None


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


# The role of each axis of a native node's X and initial states, by its layout attribute.
def _traced_roles(model: Any, specs: list[InputSpec]) -> dict[str, str]:
    """Each label that reaches an LSTM/GRU/RNN node's batch or time axis (by
    :func:`rnnx.graphs.axis_trace.axis_roles`, verify's wiring rule); one that reaches both is neither."""
    dims = {s.name: s.dims for s in specs}
    found: dict[str, set[str]] = {}
    for (name, axis), role in axis_roles(model).items():
        label = dims.get(name, [])[axis] if axis < len(dims.get(name, [])) else None
        if isinstance(label, str):
            found.setdefault(label, set()).add(role)
    return {label: next(iter(r)) for label, r in found.items() if len(r) == 1}


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


def _first_sizes(plan: _Plan) -> dict[str, int]:
    sizes = {}
    for label, role in plan.roles.items():
        if label in plan.fixed:
            sizes[label] = plan.fixed[label]
        elif label in plan.held:
            sizes[label] = plan.held[label][0]
        else:
            sizes[label] = max(plan.example.get(label, FIRST[role]), plan.least.get(label, 1))
    return sizes


def _ladder(plan: _Plan, label: str, first: int) -> list[int]:
    if label in plan.fixed or label in plan.held:
        return [first]
    least = plan.least.get(label, 1)
    values = [first] + [v for v in ([least] if least > first else []) + list(REWRITE_LADDER[plan.roles[label]]) if v >= least]
    return list(dict.fromkeys(values))


def candidates(plan: _Plan) -> list[tuple[str, dict[str, int]]]:
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


def _name_first(plan: _Plan, sizes: dict[str, int]) -> str:
    if not sizes:
        return "the graph's shapes"
    if plan.example and all(plan.example.get(k) == v for k, v in sizes.items() if k not in plan.held):
        return "the recorded example"
    if plan.fixed and all(k in plan.fixed or k in plan.held for k in sizes):
        return "the sizes given"
    return "first shape"


def variants(plan: _Plan, base: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """Near the first shape: batch 1, then every batch and length larger (by 2 and 3, as
    ``rnnx export``'s self-check grows them: the cost stays the first shape's); sizes given,
    held, or neither a batch nor a length keep theirs."""
    free = {label: role for label, role in plan.roles.items() if label not in plan.fixed and label not in plan.held}
    batches = [label for label, role in free.items() if role == BATCH]
    lengths = [label for label, role in free.items() if role == LENGTH]
    out = []
    if batches:
        out.append(("batch=1", {**base, **{label: 1 for label in batches}}))
    if batches or lengths:
        larger = {**base, **{label: base[label] + 2 for label in batches}, **{label: base[label] + 3 for label in lengths}}
        out.append(("larger: " + ", ".join(f"{label}={larger[label]}" for label in batches + lengths), larger))
    return out


def shapes_at(plan: _Plan, sizes: dict[str, int]) -> dict[str, list[int]]:
    shapes = {}
    for spec in plan.specs:
        shape = []
        for dim in spec.dims:
            if isinstance(dim, int):
                shape.append(dim)
            elif dim in sizes:
                shape.append(sizes[dim])
            else:  # a derived size, such as 2*seq; one below 1 (seq//16 at a short seq) is fed as 1
                value = _derived(dim, sizes)
                shape.append(value if value is not None and value > 0 else 1)
        shapes[spec.name] = shape
    return shapes


def make_feeds(model: Any, plan: _Plan, sizes: dict[str, int], shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs at ``shapes``: floats standard normal; booleans true; integers that hold
    sequence lengths between 1 and the sequence's length, token ids below their table's rows,
    other integers zero."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in plan.specs:
        shape = shapes[spec.name]
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


def random_feeds(model: Any, seed: int, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs at the model's first check shape (no run: the sizes as planned)."""
    plan = plan_shapes(model, dims=dims)
    sizes = _first_sizes(plan)
    return make_feeds(model, plan, sizes, shapes_at(plan, sizes), seed)


_LENGTH_PATH = ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze")  # what may lie between a graph input and sequence_lens
_X_PATH = _LENGTH_PATH + ("Transpose",)


def _fill_sequence_lengths(model: Any, feeds: dict[str, np.ndarray], rng: np.random.Generator, done: set[str]) -> None:
    """An integer graph input that reaches an LSTM/GRU/RNN node's sequence_lens gets seeded lengths
    between 1 and the sequence's length (zeros, the default for integers, would run no step at all)."""
    producers = walk.producers_of(model.graph)
    for node in model.graph.node:
        if node.op_type not in ("LSTM", "GRU", "RNN") or len(node.input) < 5 or not node.input[4]:
            continue
        lengths, _ = walk.back(node.input[4], producers, _LENGTH_PATH)
        if lengths not in feeds or lengths in done or feeds[lengths].dtype.kind not in "iu":
            continue
        x, swaps = walk.back(node.input[0], producers, _X_PATH)
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        steps = feeds[x].shape[(layout + swaps) % 2] if x in feeds and feeds[x].ndim == 3 else 1
        feeds[lengths] = rng.integers(1, max(int(steps), 1) + 1, size=feeds[lengths].shape).astype(feeds[lengths].dtype)


# --- the check --------------------------------------------------------------------------------


def compare_models(original: Any, rewritten: Any, seed: int = 0, label: str = "the input model",
                   tolerances: Tolerances | None = None, dims: dict[str, int] | None = None,
                   input_shapes: dict[str | None, list[int]] | None = None) -> RewriteCheck:
    """Every output of ``rewritten`` against ``original``'s on the same seeded inputs, at the
    shapes the module docstring describes; with boolean inputs (an If's condition, say) once with
    all of them true and once false. Each output is held to ``tolerances`` by its graph name
    (default: the tolerance of its dtype, :data:`rnnx.tolerance.BY_DTYPE`; integer and boolean
    outputs get float32's). Refuses (:class:`~rnnx.errors.RNNXError`) when the input model runs
    at none of the shapes tried."""
    plan = plan_shapes(original, rewritten, dims, input_shapes)
    check = RewriteCheck(label, {s.name: list(s.dims) for s in plan.specs}, dict(plan.roles))
    for name, (size, why) in plan.held.items():
        check.notes.append(f"{name} is held at {size}: {why}; at another size the input model computes something else")
    free = [k for k in plan.roles if k not in plan.fixed and k not in plan.held]
    if free and not any(plan.roles[k] in (BATCH, LENGTH) for k in free):
        check.notes.append(f"no dynamic dimension reads as a batch or a length ({', '.join(free)}): checked at one shape; "
                           "give other sizes with dims=LABEL=SIZE")
    # Both run in child processes under rnnx's time and memory limits: the input is a graph from
    # elsewhere, and the rewrite keeps whatever else it holds.
    first, second = original.SerializeToString(), rewritten.SerializeToString()
    shared = TimeBudget(limits.time_limit(len(first)))  # one limit for both sessions and all their runs
    budget = limits.memory_budget(len(first))
    before = IsolatedOnnxRuntime(first, label, shared)
    try:
        found = _first_case(original, plan, check, before, seed, budget)
        cases = [found] + [_run_original(original, plan, before, name, sizes, seed + k + 1, budget)
                           for k, (name, sizes) in enumerate(variants(plan, found[0].sizes))]
    finally:
        before.close()
    after = IsolatedOnnxRuntime(second, f"the rewritten {label}", shared)
    try:
        for case, runs, want, honest in cases:
            _compare(check, case, runs, want, honest, after, tolerances, computes_in_float16(original))
    finally:
        after.close()
    return check


# a case, its feeds, the input model's outputs (or refusal) for each, and its outputs on the feeds
# nudged by one ulp (the rounding floor of the calibrated rule; None where that run failed)
_Run = tuple[CheckCase, list[dict[str, np.ndarray]], list[Any], list[Any]]


def _too_large(plan: _Plan, shapes: dict[str, list[int]], budget: int) -> bool:
    elements = {s.name: float(np.prod(shapes[s.name], dtype=np.float64)) for s in plan.specs}
    nbytes = sum(elements[s.name] * s.dtype.itemsize for s in plan.specs)
    return sum(elements.values()) > MAX_ELEMENTS or nbytes * limits.WORKING_COPIES > budget


def _run_original(model: Any, plan: _Plan, runner: Any, name: str, sizes: dict[str, int], seed: int, budget: int) -> _Run:
    """The input model at ``sizes``: with boolean inputs twice (all true, all false). A run it
    refuses is the case's ``skipped``."""
    shapes = shapes_at(plan, sizes)
    case = CheckCase(name, sizes, shapes)
    if _too_large(plan, shapes, budget):
        case.skipped = "its inputs would pass the memory budget"
        return case, [], [], []
    feeds = make_feeds(model, plan, sizes, shapes, seed)
    flags = [k for k, v in feeds.items() if v.dtype == np.bool_]
    runs = [feeds] + ([{k: (np.zeros_like(v) if k in flags else v) for k, v in feeds.items()}] if flags else [])
    want = [_run(runner, feed) for feed in runs]
    refusal = next((w for w in want if isinstance(w, str)), None)
    if refusal is not None:
        case.skipped = f"the input model refuses it (ONNX Runtime: {refusal})"
        return case, runs, want, []
    rng = np.random.default_rng(seed + 7919)
    # a float16 graph fed float32 (--keep-io-types) rounds a float32 ulp away at its first Cast:
    # its honest run moves its inputs by one float16 ulp
    half = computes_in_float16(model)
    honest = [_run(runner, nudged(feed, rng, np.float16 if half else None)) for feed in runs]
    return case, runs, want, [h if isinstance(h, dict) else None for h in honest]


def nudged(feeds: dict[str, np.ndarray], rng: np.random.Generator, computes_in: Any = None) -> dict[str, np.ndarray]:
    """The feeds with every floating value moved one unit in the last place, up or down at
    random: the input model on them is an honest run as far from its run on ``feeds`` as
    rounding carries (there is no float64 model to measure a rewrite's floor against). The
    unit is ``computes_in``'s (float16 for a graph that computes in it) where given."""
    out = {}
    for name, value in feeds.items():
        if value.dtype.kind == "f" and value.size:
            unit = np.dtype(computes_in) if computes_in is not None else value.dtype
            toward = np.where(rng.random(value.shape) < 0.5, -np.inf, np.inf).astype(unit)
            value = np.nextafter(value.astype(unit), toward).astype(value.dtype)
        out[name] = value
    return out


def _run(runner: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | str:
    """The outputs, or why the model refused these inputs (a run that raised; the process lives on)."""
    try:
        return runner(feeds)
    except RNNXError as exc:
        text = str(exc)
        if not text.startswith(_REFUSED):
            raise  # past the time or memory limit, or the process is gone: nothing more can run
        return _ort_message(text.split(": ", 1)[1] if ": " in text else text)


_ORT_CODE = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_ORT_NODE = re.compile(r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ")


def _ort_message(text: str) -> str:
    """ONNX Runtime's message without its boilerplate: ``Pad node 'node_pad': Pad reflect: ...``."""
    text = _ORT_NODE.sub(lambda m: f"{m.group(1)} node '{m.group(2)}': ", _ORT_CODE.sub("", text))
    return text[:200]


def _first_case(model: Any, plan: _Plan, check: RewriteCheck, runner: Any, seed: int, budget: int) -> _Run:
    """The first candidate shape the input model runs at; none: the one-line refusal."""
    tried: list[str] = []
    first_error = ""
    for name, sizes in candidates(plan):
        found = _run_original(model, plan, runner, name, sizes, seed, budget)
        case = found[0]
        if not case.skipped:
            if tried:
                case.name = "first shape it runs" if case.name == "first shape" else case.name
                check.refused = tried
                listed = "; ".join(tried[:3]) + (f"; and {len(tried) - 3} more" if len(tried) > 3 else "")
                check.notes.append(f"the input model itself refuses {'the first shape' if len(tried) == 1 else f'the first {len(tried)} shapes'} "
                                   f"tried ({listed}; ONNX Runtime: {first_error}): checked at shapes it runs")
            return found
        if not found[1]:  # too large to try
            continue
        tried.append(check.where(case))
        first_error = first_error or case.skipped.partition("(ONNX Runtime: ")[2].rstrip(")")
    if not tried:
        raise RNNXError(f"{check.label}: every shape rnnx would try needs more input than the memory budget or {MAX_ELEMENTS} elements allow; "
                        "give smaller sizes with dims=LABEL=SIZE or input_shapes=NAME:SHAPE")
    shown = "; ".join(tried[:6]) + (f"; and {len(tried) - 6} more" if len(tried) > 6 else "")
    given = " (with the sizes given)" if plan.fixed else ""
    raise RNNXError(f"{check.label}: the input model itself refuses every shape tried{given}: {shown} "
                    f"(ONNX Runtime: {first_error}); give shapes it takes with dims=LABEL=SIZE or input_shapes=NAME:SHAPE")


def _compare(check: RewriteCheck, case: CheckCase, runs: list[dict[str, np.ndarray]], want: list[Any], honest: list[Any], after: Any,
             tolerances: Tolerances | None, half: bool = False) -> None:
    """``half``: the graph computes in float16 (float32 at its edges or not): its floating
    outputs are held at float16's floor, the precision they were computed in."""
    check.cases.append(case)
    if case.skipped:
        return
    flags = [k for k, v in runs[0].items() if v.dtype == np.bool_]
    for k, (feeds, expected, nudged_run) in enumerate(zip(runs, want, honest)):
        got = _run(after, feeds)
        which = f"boolean inputs {'true' if k == 0 else 'false'}" if flags else ""
        if isinstance(got, str):
            case.error = f"the rewritten model failed where the input model ran{f' ({which})' if which else ''}: {got}"
            return
        dtypes = {name: "float16" if half and np.asarray(v).dtype.kind == "f" else np.asarray(v).dtype.name for name, v in expected.items()}
        rows = parity.compare("ort", got, expected, 0, 0, dtypes, tolerances, nudged_run)
        for row in rows if which else []:
            row.note = f"{row.note}; {which}" if row.note else which
        case.rows += rows
