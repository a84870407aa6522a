"""What verify feeds a whole model: each graph input's dimensions, what each dynamic one is
(a batch, a length or something else), the cases (lengths x batches) and seeded values.

Roles come from ``rnnx export``'s record, else from the label's name (``batch``, ``N``;
``seq``, ``time``, ``frames``, ...), else from the graph's wiring: a label whose axis reaches a
recurrence's batch or time axis (:func:`rnnx.graphs.axis_trace.axis_roles`; tf2onnx's ``unk__NNN``). Floats are standard normal; integer inputs that hold
sequence lengths get sorted lengths whose longest fills the sequence; token ids stay
below the vocabulary of the embedding table the input indexes (else within the example's
range).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.shapes.roles import BATCH, LENGTH, OTHER, role_of_name
from rnnx.shapes.sizes import VERIFY_BATCHES, VERIFY_LENGTH
from rnnx.exporters.example_values import draw_floats, draw_integers, integer_summary, value_summary
from rnnx.graphs.axis_trace import axis_roles



@dataclass
class InputSpec:
    name: str
    dtype: np.dtype
    dims: list[int | str]  # a size, or a label (an expression of labels for derived sizes)
    lengths_of: str | None = None  # holds per-sequence lengths bounded by this label
    vocabulary: int | None = None  # token ids: indexes a table of this many rows
    values: dict[str, Any] | None = None  # the recorded example's range and padding, or sign (rnnx.exporters.example_values)


@dataclass
class Case:
    name: str
    sizes: dict[str, int]
    shapes: dict[str, list[int]] = field(default_factory=dict)
    skipped: str = ""  # the torch model itself raised at these shapes
    error: str = ""  # ONNX Runtime failed where torch ran: a failure


def input_specs(proto: Any, export: dict[str, Any] | None) -> tuple[list[InputSpec], dict[str, str]]:
    """Each graph input with its dims, and each label's role."""
    from onnx import helper

    inits = {i.name: i for i in proto.graph.initializer}
    roles = dict((export or {}).get("roles") or {}) if isinstance((export or {}).get("roles"), dict) else {}
    lengths = (export or {}).get("lengths_inputs") if isinstance((export or {}).get("lengths_inputs"), dict) else {}
    recorded = (export or {}).get("values") if isinstance((export or {}).get("values"), dict) else {}
    specs = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        except (KeyError, TypeError):
            raise RNNXError(f"graph input {vi.name!r}: element type {t.elem_type} is not a tensor type rnnx can feed") from None
        dims: list[int | str] = []
        for d, dim in enumerate(t.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or f"{vi.name}_dim{d}")
        specs.append(InputSpec(vi.name, dtype, dims, lengths_of=lengths.get(vi.name), values=_summary(recorded.get(vi.name))))
    wired = wired_roles(proto, specs)
    for spec in specs:
        for dim in spec.dims:
            if isinstance(dim, str) and dim.isidentifier():
                by_name = role_of_name(dim)
                roles.setdefault(dim, wired.get(dim, OTHER) if by_name == OTHER else by_name)
    lengths_labels = [k for k, v in roles.items() if v == LENGTH]
    for spec in specs:
        if spec.dtype.kind in "iu" and len(spec.dims) == 1 and spec.lengths_of is None and re.search(r"len", spec.name, re.IGNORECASE) and lengths_labels:
            spec.lengths_of = lengths_labels[0]  # a foreign file's "lengths" input
        if spec.dtype.kind in "iu" and spec.lengths_of is None:
            spec.vocabulary = _vocabulary(proto, spec.name)
    return specs, roles


def _summary(entry: Any) -> dict[str, Any] | None:
    """A recorded integer summary, where it is one (the file may be anyone's)."""
    if not isinstance(entry, dict):
        return None
    if "nonnegative" in entry:  # a float input's sign (rnnx.exporters.example_values.value_summary)
        return {"nonnegative": entry.get("nonnegative") is True, "unit": entry.get("unit") is True}
    low, high, pad = entry.get("min"), entry.get("max"), entry.get("padding")
    if not all(isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 62 for v in (low, high)) or low > high:
        return None
    return {"min": low, "max": high, "padding": pad if isinstance(pad, int) and not isinstance(pad, bool) else None}


def wired_roles(proto: Any, specs: list[InputSpec]) -> dict[str, str]:
    """Each label the graph's wiring says is a batch or a length (one that reaches both is neither)."""
    axes = axis_roles(proto)
    found: dict[str, set[str]] = {}
    for spec in specs:
        for d, dim in enumerate(spec.dims):
            if isinstance(dim, str) and (spec.name, d) in axes:
                found.setdefault(dim, set()).add(axes[(spec.name, d)])
    return {label: next(iter(r)) for label, r in found.items() if len(r) == 1}


def wiring_note(proto: Any, specs: list[InputSpec], roles: dict[str, str]) -> str:
    """Which labels were read as a batch or a length by the wiring, not by their names."""
    wired = {k: v for k, v in wired_roles(proto, specs).items() if roles.get(k) == v and role_of_name(k) == OTHER}
    if not wired:
        return ""
    return ("dimensions read by the graph's wiring to the recurrence (their names do not say): "
            + ", ".join(f"{k} is a {v}" for k, v in wired.items()))


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


def _size(dim: int | str, sizes: dict[str, int]) -> int | None:
    if isinstance(dim, int):
        return dim
    if dim in sizes:
        return sizes[dim]
    try:  # a derived dimension such as 2*seq or (seq//4)
        import sympy

        value = sympy.sympify(dim, locals={k: sympy.Symbol(k) for k in sizes}).subs(sizes)
        return int(value) if value.is_number else None
    except Exception:  # noqa: BLE001  sympy raises many types for text it cannot read
        return None


def plan_cases(specs: list[InputSpec], roles: dict[str, str], example: dict[str, list[int]], seq_lens: list[int] | None,
               batches: list[int] | None, dims: dict[str, int]) -> list[Case]:
    """Lengths x batches; other dynamic sizes fixed from ``dims`` or the example."""
    base: dict[str, int] = {}
    for spec in specs:
        for d, dim in enumerate(spec.dims):
            if isinstance(dim, str) and spec.name in example and d < len(example[spec.name]):
                base.setdefault(dim, int(example[spec.name][d]))
    unknown = sorted(set(dims) - set(roles))
    if unknown:
        raise RNNXError(f"dims: {unknown[0]}: the file has no dynamic dimension of that name; its dynamic dimensions are {', '.join(roles) or 'none'}")
    given = [label for label in dims if roles.get(label) in (BATCH, LENGTH)]
    if given and (seq_lens if roles[given[0]] == LENGTH else batches):
        varied = "seq_lens=" if roles[given[0]] == LENGTH else "batches="
        raise RNNXError(f"dims: {given[0]}={dims[given[0]]} fixes a {roles[given[0]]} that {varied} varies; give one or the other")
    for flag, wanted, role in (("seq_lens", seq_lens, LENGTH), ("batches", batches, BATCH)):
        if wanted and not any(r == role for r in roles.values()):
            others = [k for k, v in roles.items() if v == OTHER]
            raise RNNXError(f"{flag}: no dynamic dimension of the file reads as a {role} by its name ({', '.join(others) or 'none is dynamic'}); "
                            f"size them with dims=LABEL=SIZE")
    fixed: dict[str, int] = {}
    for label, role in roles.items():
        if label in dims:
            fixed[label] = dims[label]
        elif role == OTHER:
            holders = [s.name for s in specs if any(isinstance(d, str) and re.search(rf"\b{re.escape(label)}\b", d) for d in s.dims)]
            if not holders:
                continue  # a role for a label no input carries: nothing to size
            if label not in base:
                who = holders[0]
                raise RNNXError(f"dimension {label!r} of input {who!r} is dynamic and neither a batch nor a length by its name; "
                                f"give its size with --dim {label}=SIZE (or define example_inputs in the model file)")
            fixed[label] = base[label]
    length_labels = [k for k, v in roles.items() if v == LENGTH and k not in fixed]
    batch_labels = [k for k, v in roles.items() if v == BATCH and k not in fixed]
    if seq_lens:
        length_options = [{label: t for label in length_labels} for t in seq_lens]
    else:
        length_options = [{label: base.get(label, VERIFY_LENGTH) for label in length_labels},
                          {label: 2 * base.get(label, VERIFY_LENGTH) + 3 for label in length_labels}]
    batch_options = list(batches or VERIFY_BATCHES)
    cases = []
    seen = set()
    for lens, b in product(length_options, batch_options if batch_labels else [None]):
        sizes = {**fixed, **lens, **({label: b for label in batch_labels} if b is not None else {})}
        key = tuple(sorted(sizes.items()))
        if key in seen:
            continue
        seen.add(key)
        name = ", ".join([f"{k}={v}" for k, v in lens.items()] + ([f"batch={b}"] if b is not None else [])
                         + [f"{k}={v}" for k, v in dims.items()]) or "fixed shapes"
        case = Case(name, sizes)
        for spec in specs:
            shape = [_size(dim, sizes) for dim in spec.dims]
            if any(s is None for s in shape):
                bad = next(dim for dim, s in zip(spec.dims, shape) if s is None)
                raise RNNXError(f"dimension {bad!r} of input {spec.name!r}: rnnx cannot work out its size; give it with dims=LABEL=SIZE")
            case.shapes[spec.name] = [int(s) for s in shape]  # type: ignore[arg-type]
        cases.append(case)
    return cases


def make_feed(specs: list[InputSpec], case: Case, example: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in specs:
        shape = case.shapes[spec.name]
        if spec.dtype.kind == "f":  # the recorded example's sign, else the model's own example's
            known = example.get(spec.name)
            summary = spec.values or (value_summary(np.asarray(known, dtype=np.float64)) if known is not None else None)
            feed[spec.name] = draw_floats(rng, shape, summary, spec.dtype)
        elif spec.dtype.kind == "b":
            feed[spec.name] = rng.random(shape) < 0.5
        elif spec.lengths_of is not None:
            longest = case.sizes.get(spec.lengths_of, 1)
            lens = np.sort(rng.integers(1, longest + 1, size=shape))[::-1].copy()
            if lens.size:
                lens.flat[0] = longest
            feed[spec.name] = lens.astype(spec.dtype)
        else:  # the recorded example's ids, else the model's own example's, else the embedding table's rows
            known = example.get(spec.name)
            summary = spec.values or (integer_summary(np.asarray(known)) if known is not None else None)
            if summary is not None and spec.vocabulary:
                summary = {**summary, "max": min(summary["max"], spec.vocabulary - 1)}
            feed[spec.name] = draw_integers(rng, shape, summary, spec.dtype, spec.vocabulary)
    return feed


def shape_note(roles: dict[str, str]) -> str:
    """A warning when nothing will be varied: no dynamic dimension reads as a batch or a length."""
    if any(r in (BATCH, LENGTH) for r in roles.values()):
        return ""
    others = ", ".join(roles) or "none of its dimensions is dynamic"
    return (f"no dynamic dimension reads as a batch or a length by its name ({others}): it ran at one shape only; "
            "name its axes batch/seq when exporting, or size each with --dim LABEL=SIZE")
