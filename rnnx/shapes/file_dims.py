"""What an ONNX file says about its inputs' shapes: one reading for every verb.

Each graph input's dimensions (a size, or the label of a dynamic dimension; ``NAME_dimK`` for
an unnamed one), what each label is and where that was read, and the recorded example's shapes.
A label's role is read, first to last:

1. ``rnnx export``'s record (``rnnx.export``'s ``roles``), which the exporter wrote from the
   model itself;
2. the label's name (:func:`rnnx.shapes.roles.role_of_name`: ``batch``, ``N``; ``seq``, ``time``);
3. the graph's wiring: a label whose axis reaches a recurrence's batch or time axis
   (:func:`rnnx.shapes.wiring.axis_roles`; tf2onnx's ``unk__NNN``), in the file and then in
   any further models given (fuse and lower also read the rewritten file's);
4. else neither a batch nor a length ("other").

verify's cases, fuse and lower's check shapes, the TensorRT profile and the bundle's cases all
start from this reading (tests/test_shapes_agree.py holds them to it on the same files).
Integer inputs that hold sequence lengths, and token ids with the embedding table they index,
are read here too: they bound the values any verb feeds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.errors import RNNXError, shown
from rnnx.formats.onnx_metadata import EXPORT_KEY, read_metadata
from rnnx.formats.onnx_read import INVENTED, value_dims
from rnnx.shapes.roles import LENGTH, OTHER, ROLES, role_of_name
from rnnx.shapes.sizes import MAX_DIMENSION
from rnnx.shapes.wiring import axis_roles, lengths_inputs

FROM_RECORD = "rnnx export's record"
FROM_NAME = "its name"
FROM_WIRING = "the graph's wiring to the recurrence"
FROM_NOTHING = "nothing names it a batch or a length"


@dataclass
class InputSpec:
    name: str
    dtype: np.dtype | None  # None: not a tensor type rnnx can feed (read with feeding=False)
    dims: list[int | str]  # a size, or a label (an expression of labels for derived sizes)
    lengths_of: str | None = None  # holds per-sequence lengths bounded by this label
    vocabulary: int | None = None  # token ids: indexes a table of this many rows
    values: dict[str, Any] | None = None  # the recorded example's range and padding, or sign (rnnx.exporters.example_values)


@dataclass
class FileDims:
    """The file's inputs, each label's role and where it was read, and the recorded example."""

    specs: list[InputSpec]
    roles: dict[str, str] = field(default_factory=dict)
    role_from: dict[str, str] = field(default_factory=dict)
    example: dict[str, list[int]] = field(default_factory=dict)  # input name -> the recorded example's shape

    @property
    def dims(self) -> dict[str, list[int | str]]:
        return {s.name: s.dims for s in self.specs}

    def labels(self) -> dict[str, tuple[str, int]]:
        """Each dynamic label and where it first occurs (input, dimension)."""
        found: dict[str, tuple[str, int]] = {}
        for spec in self.specs:
            for d, dim in enumerate(spec.dims):
                if isinstance(dim, str):
                    found.setdefault(dim, (spec.name, d))
        return found

    def example_size(self, label: str) -> int | None:
        """The label's size in the recorded example, where an input that has it was recorded."""
        for spec in self.specs:
            shape = self.example.get(spec.name)
            if shape is not None and label in spec.dims:
                return shape[spec.dims.index(label)]
        return None

    def to_json(self) -> dict[str, dict[str, Any]]:
        """Each dynamic label's role, where it was read, and the input and axis it first stands at
        (``rnnx inspect --json``'s ``dimensions``)."""
        where = self.labels()
        return {label: {"role": self.roles[label], "from": self.role_from[label], "input": where[label][0], "axis": where[label][1]}
                for label in self.roles}

    def describe(self) -> list[str]:
        """Lines for ``rnnx inspect``: each input's dims, and each dynamic label's role and why."""
        if not self.specs:
            return []
        lines = ["inputs, as every rnnx verb reads them:"]
        lines += [f"  {shown(s.name, quoted=False)}: {dims_text(s.dims)}" for s in self.specs]
        lines += [f"  {shown(label, quoted=False)}: {'a ' + role if role != OTHER else 'neither a batch nor a length'} ({self.role_from[label]})"
                  for label, role in self.roles.items()]
        return lines

    def wiring_note(self) -> str:
        """Which labels were read as a batch or a length by the wiring, not by their names."""
        wired = [f"{shown(k, quoted=False)} is a {self.roles[k]}" for k, why in self.role_from.items() if why == FROM_WIRING]
        return f"dimensions read by the graph's wiring to the recurrence (their names do not say): {', '.join(wired)}" if wired else ""


def read_file_dims(proto: Any, export: dict[str, Any] | None = None, also: tuple[Any, ...] = (), feeding: bool = True) -> FileDims:
    """The reading described in the module docstring. ``export``: the file's record, where the
    caller holds it (else it is read from ``proto``); ``also``: further models whose wiring may
    say what a label is (a rewrite of ``proto`` with the same inputs); ``feeding``: refuse an
    input whose element type rnnx cannot feed (a profile needs only the shapes)."""
    if export is None:
        export, _ = read_metadata(proto)
    record = export if isinstance(export, dict) else {}
    lengths = _entry(record, "lengths_inputs")
    values = _entry(record, "values")
    specs = [InputSpec(vi.name, _dtype(vi, feeding), value_dims(vi, unnamed=INVENTED), lengths_of=_text(lengths.get(vi.name)), values=_summary(values.get(vi.name)))
             for vi in proto.graph.input if vi.name not in {i.name for i in proto.graph.initializer}]
    if feeding:
        for spec in specs:
            _refuse_unfeedable_size(spec)
    found = FileDims(specs, example=_recorded_example(record, specs))
    recorded = {k: v for k, v in _entry(record, "roles").items() if v in ROLES}
    wired: list[dict[str, str]] = [_wired_roles(model, specs) for model in (proto, *also)]
    labels = found.labels()
    for label in labels:
        if not label.isidentifier() and size_of(label, dict.fromkeys(filter(str.isidentifier, labels), 1)) is not None:
            continue  # a derived size (2*seq) follows the labels it is made of; one that names none is sized as a label
        by_name = role_of_name(label)
        by_wiring = next((w[label] for w in wired if label in w), None)
        if label in recorded:
            found.roles[label], found.role_from[label] = recorded[label], FROM_RECORD
        elif by_name != OTHER:
            found.roles[label], found.role_from[label] = by_name, FROM_NAME
        elif by_wiring is not None:
            found.roles[label], found.role_from[label] = by_wiring, FROM_WIRING
        else:
            found.roles[label], found.role_from[label] = OTHER, FROM_NOTHING
    lengths_labels = [k for k, v in found.roles.items() if v == LENGTH]
    wired_lengths = lengths_inputs(proto)
    for spec in specs:
        if spec.dtype is None or spec.dtype.kind not in "iu":
            continue
        if len(spec.dims) == 1 and spec.lengths_of is None and lengths_labels and (
                spec.name in wired_lengths or re.search(r"len", spec.name, re.IGNORECASE)):
            spec.lengths_of = lengths_labels[0]  # a foreign file's lengths input: it reaches sequence_lens, or its name says so
        if spec.lengths_of is None:
            spec.vocabulary = _vocabulary(proto, spec.name)
        if feeding:
            _refuse_recorded_range(spec)
    return found


def dims_text(dims: list[int | str]) -> str:
    """``(seq, batch, 3)``: an input's dimensions, each label as :func:`rnnx.errors.shown` shows a name."""
    return "(" + ", ".join(shown(d, quoted=False) if isinstance(d, str) else str(d) for d in dims) + ")"


def _refuse_unfeedable_size(spec: InputSpec) -> None:
    """An input whose fixed dimensions no run can feed: a size past int32, or more elements than
    one tensor holds (a product of such sizes would overflow numpy's int64 before any budget saw it)."""
    fixed = [d for d in spec.dims if isinstance(d, int)]
    elements = math.prod(fixed)
    if max(fixed, default=0) > MAX_DIMENSION or elements > MAX_DIMENSION:
        raise RNNXError(f"input {shown(spec.name)} is fixed at {dims_text(spec.dims)} in the file ({elements} elements): expected sizes and "
                        f"elements of at most {MAX_DIMENSION} (2^31 - 1, the most TensorRT and trtexec take, and far past any budget); "
                        "the file is damaged or was edited: export the model with the sizes it runs at")


def _refuse_recorded_range(spec: InputSpec) -> None:
    """A recorded value range (``rnnx export``'s record, ``values``) the input cannot be fed:
    token ids below 0 or past the rows of the table they index (the exporter recorded the
    example's own ids, which torch's embedding held to its table), or values the input's integer
    type cannot hold. Drawn from, it would make the file fail at every shape, and the failure
    would be blamed on the shapes."""
    values = spec.values or {}
    if "min" not in values or spec.dtype is None or spec.dtype.kind not in "iu":
        return
    low, high = values["min"], values["max"]
    where = f"{EXPORT_KEY} record, values[{shown(spec.name)}]: min {low}, max {high}"
    info = np.iinfo(spec.dtype)
    if spec.vocabulary is not None and not 0 <= low < spec.vocabulary:  # (a max past the table is cut to it where fed)
        expected = f"token ids from 0 to {spec.vocabulary - 1} (the rows of the embedding table the input indexes)"
    elif not info.min <= low <= high <= info.max:
        expected = f"values a {spec.dtype} input holds ({info.min} to {info.max})"
    else:
        return
    raise RNNXError(f"the file's {where}: expected {expected}; the record is damaged or was edited: export the model again, or delete "
                    f"the {EXPORT_KEY!r} entry of its metadata_props")


def size_of(dim: int | str, sizes: dict[str, int]) -> int | None:
    """A dimension's size from the labels' sizes: a size, a label, or a derived dimension such as
    ``2*seq`` or ``((seq - 3)//2) + 1``; None where it names a label not sized or cannot be read."""
    if isinstance(dim, int):
        return dim
    if dim in sizes:
        return sizes[dim]
    if dim.isidentifier():
        return None
    try:
        import sympy

        symbols = {k: sympy.Symbol(k) for k in sizes}
        value = sympy.sympify(dim, locals=symbols)
        if value.free_symbols - set(symbols.values()):
            return None
        value = value.subs({symbols[k]: v for k, v in sizes.items()})
        return int(value) if value.is_number else None
    except Exception:  # noqa: BLE001  sympy raises many types for text it cannot read
        return None


# --- the record's shape entries (files are untrusted: a damaged entry reads as absent) --------------


def _entry(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _recorded_example(record: dict[str, Any], specs: list[InputSpec]) -> dict[str, list[int]]:
    """Each input's shape in the example it was exported from, where it fits the input's dims."""
    example = _entry(record, "example")
    found = {}
    for spec in specs:
        shape = example.get(spec.name)
        if isinstance(shape, list) and len(shape) == len(spec.dims) and all(
                isinstance(s, int) and not isinstance(s, bool) and 0 < s < 2**31 for s in shape):
            found[spec.name] = list(shape)
    return found


def _summary(entry: Any) -> dict[str, Any] | None:
    """A recorded value summary, where it is one."""
    if not isinstance(entry, dict):
        return None
    if "nonnegative" in entry:  # a float input's sign (rnnx.exporters.example_values.value_summary)
        return {"nonnegative": entry.get("nonnegative") is True, "unit": entry.get("unit") is True}
    low, high, pad = entry.get("min"), entry.get("max"), entry.get("padding")
    ends = [v for v in (low, high) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 62]
    if len(ends) != 2 or ends[0] > ends[1]:
        return None
    return {"min": low, "max": high, "padding": pad if isinstance(pad, int) and not isinstance(pad, bool) else None}


# --- the graph ------------------------------------------------------------------------------------------


def _dtype(vi: Any, feeding: bool) -> np.dtype | None:
    from onnx import helper

    elem_type = vi.type.tensor_type.elem_type
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        if feeding:
            raise RNNXError(f"graph input {vi.name!r}: element type {elem_type} is not a tensor type rnnx can feed") from None
        return None


def _wired_roles(model: Any, specs: list[InputSpec]) -> dict[str, str]:
    """Each label the model's wiring says is a batch or a length (one that reaches both is neither)."""
    dims = {s.name: s.dims for s in specs}
    found: dict[str, set[str]] = {}
    for (name, axis), role in axis_roles(model).items():
        label = dims[name][axis] if name in dims and axis < len(dims[name]) else None
        if isinstance(label, str):
            found.setdefault(label, set()).add(role)
    return {label: next(iter(r)) for label, r in found.items() if len(r) == 1}


def _vocabulary(proto: Any, name: str) -> int | None:
    """Rows of the embedding table the input indexes (through Casts), if it indexes one."""
    inits = {i.name: i for i in proto.graph.initializer}
    frontier, seen = [name], set()
    while frontier:
        value = frontier.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in proto.graph.node:
            if value not in node.input:
                continue
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == value and node.input[0] in inits:
                dims = list(inits[node.input[0]].dims)
                return int(dims[0]) if dims else None
            if node.op_type in ("Cast", "Identity", "Unsqueeze", "Reshape", "Transpose", "Squeeze"):
                frontier.extend(node.output)
    return None


def label_sizes(specs: list[InputSpec], shapes: dict[str, Any]) -> dict[str, int]:
    """Each dynamic label's size in ``shapes`` (input name -> shape)."""
    return {dim: int(shapes[s.name][d]) for s in specs if s.name in shapes for d, dim in enumerate(s.dims) if isinstance(dim, str)}


def probe_feed(specs: list[InputSpec], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Inputs at ``shapes`` for asking a model whether it runs there (not for checking values):
    floats and token ids zero, booleans false, and each input of sequence lengths its
    sequence's full length (a length of 0 runs no step, which says nothing)."""
    sizes = label_sizes(specs, shapes)
    feed = {}
    for spec in specs:
        dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
        value = np.zeros(shapes[spec.name], dtype)
        if spec.lengths_of is not None:
            value[...] = sizes.get(spec.lengths_of, 1)
        feed[spec.name] = value
    return feed
