"""verify's cases' sizes: the lengths x batches a whole model is checked at, the other dynamic
sizes held at the example's (or the sizes given), and every input's shape worked out at them
(the cases themselves are :class:`rnnx.check.Case`, made by :mod:`rnnx.verify.cases`).

The roles come from :func:`rnnx.shapes.file_dims.read_file_dims`; the sizes from
:mod:`rnnx.shapes.sizes` (``VERIFY_BATCHES``, ``VERIFY_LENGTH``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import product

from rnnx.errors import RNNXError
from rnnx.shapes.file_dims import InputSpec, size_of
from rnnx.shapes.roles import BATCH, LENGTH, OTHER
from rnnx.shapes.sizes import VERIFY_BATCHES, VERIFY_LENGTH


def plan_sizes(specs: list[InputSpec], roles: dict[str, str], example: dict[str, list[int]], seq_lens: list[int] | None,
               batches: list[int] | None, dims: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """Each case's name and sizes: lengths x batches; other dynamic sizes fixed from ``dims`` or the example."""
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
            raise RNNXError(f"{flag}: no dynamic dimension of the file reads as a {role} by the record, its name or its wiring ({', '.join(others) or 'none is dynamic'}); "
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
                raise RNNXError(f"dimension {label!r} of input {who!r} is dynamic and neither a batch nor a length by the record, its name or its wiring; "
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
    cases: list[tuple[str, dict[str, int]]] = []
    seen = set()
    for lens, b in product(length_options, batch_options if batch_labels else [None]):
        sizes = {**fixed, **lens, **({label: b for label in batch_labels} if b is not None else {})}
        key = tuple(sorted(sizes.items()))
        if key in seen:
            continue
        seen.add(key)
        name = ", ".join([f"{k}={v}" for k, v in lens.items()] + ([f"batch={b}"] if b is not None else [])
                         + [f"{k}={v}" for k, v in dims.items()]) or "fixed shapes"
        cases.append((name, sizes))
    return cases


def input_shapes(specs: Sequence[InputSpec], sizes: Mapping[str, int]) -> dict[str, list[int]]:
    """Each input's shape with every label at ``sizes``."""
    shapes = {}
    for spec in specs:
        shape = [size_of(dim, dict(sizes)) for dim in spec.dims]
        if any(s is None for s in shape):
            bad = next(dim for dim, s in zip(spec.dims, shape) if s is None)
            raise RNNXError(f"dimension {bad!r} of input {spec.name!r}: rnnx cannot work out its size; give it with dims=LABEL=SIZE")
        shapes[spec.name] = [int(s) for s in shape]  # type: ignore[arg-type]
    return shapes


def shape_note(roles: dict[str, str]) -> str:
    """A warning when nothing will be varied: no dynamic dimension reads as a batch or a length."""
    if any(r in (BATCH, LENGTH) for r in roles.values()):
        return ""
    others = ", ".join(roles) or "none of its dimensions is dynamic"
    return (f"no dynamic dimension reads as a batch or a length by the record, its name or its wiring ({others}): it ran at one shape only; "
            "name its axes batch/seq when exporting, or size each with --dim LABEL=SIZE")
