"""TensorRT optimization profiles decided from the ONNX file: pure Python, no TensorRT needed
(:mod:`rnnx.engines.tensorrt` hands them to Polygraphy; ``rnnx bundle`` writes them as trtexec's flags).

An engine runs only at the shapes its profile covers: for every input with a dynamic dimension,
the smallest (min), the one its kernels are tuned for (opt) and the largest (max). Polygraphy,
told nothing, sets each dynamic dimension to 1 for all three (``Profile.fill_defaults``), and
an engine built so refuses every batch and length but 1. rnnx decides per dynamic dimension
(a label, shared by every input that has it), from what the file says about it:

- what the dimension is, as every verb reads it (:func:`rnnx.shapes.file_dims.read_file_dims`:
  ``rnnx export``'s record, else the label's name, else the graph's wiring, else "other");
- a batch: min 1, opt 8, max 32;
- a length: min 1, opt the example's length, max 4 x the example's length; a file without an
  example (not exported by rnnx): min 1, opt 64, max 256, chosen to cover typical utterance
  and sentence lengths, and written into ENGINE.json as chosen. Where the file does not run at
  length 1 (a Conv's kernel, a pool, a reflect pad, a sinc filter bank), the min is the least
  length it runs at, and where it does not run at the max (a table of positions), the max is
  the greatest: found by asking (``probe``; :mod:`rnnx.engines.shape_probe`), so that an
  engine's profile claims no length the model refuses;
- any other dynamic dimension: the example's size for min, opt and max (a size the model was
  traced at); without an example it is refused, by name, before anything is built.

Shapes given by the caller win over these for the inputs they name: ``--profile`` (whole
profiles, one per flag) or trtexec's ``--min-shapes``/``--opt-shapes``/``--max-shapes`` (each
one end of the one profile). A size given for a label in one input carries to the other inputs
that share the label, so that a given batch of 64 in ``x`` makes ``h0``'s batch 64 as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from rnnx.errors import RNNXError, shown
from rnnx.shapes.file_dims import FileDims, dims_text
from rnnx.shapes.roles import LENGTH, OTHER
from rnnx.shapes.sizes import MAX_DIMENSION, profile_range

ENDS = ("min", "opt", "max")
SHAPE_FLAGS = ("--min-shapes", "--opt-shapes", "--max-shapes")
_PARAMETERS = ("min_shapes=", "opt_shapes=", "max_shapes=")

Shape = tuple[int, ...]
Triple = tuple[Shape, Shape, Shape]
Probe = Callable[[dict[str, Shape]], "str | None"]  # runs the file at these input shapes: None, or why it failed


def _shape_text(shape: Any) -> str:
    return "x".join("?" if s is None else str(s) for s in shape)


def shapes_text(shapes: dict[str, Any]) -> str:
    """``x: 1x6x20, h0: 1x1x32``: input shapes as messages show them, names escaped (a name from a file may hold a newline)."""
    return ", ".join(f"{shown(n, quoted=False)}: {_shape_text(s)}" for n, s in shapes.items())


@dataclass
class Profile:
    """min/opt/max shapes per input name, e.g. {"X": ((1, 1, 8), (50, 8, 8), (200, 32, 8))}."""

    shapes: dict[str, Triple]

    @classmethod
    def parse(cls, text: str) -> Profile:
        """``X:1x1x8,50x8x8,200x32x8;h0:...`` (min, opt, max per input). A name is split from its
        shapes at its last colon, as trtexec and ``--min-shapes`` split it (``input:0:1x3,...``),
        or given in single quotes (``'a;b':1x3,...``)."""
        usage = "expected NAME:MIN,OPT,MAX with shapes like 1x1x8"
        shapes = {}
        for part in _split_outside_quotes(text, ";"):
            if not part:
                continue
            name, dims = _name_and_shape(part)
            try:
                if not name:
                    raise ValueError
                triple = tuple(_sizes(s, f"profiles: {part!r}") for s in dims.split(","))
            except ValueError:
                raise RNNXError(f"profiles: {part!r}: {usage}") from None
            if len(triple) != 3 or len({len(s) for s in triple}) != 1:
                raise RNNXError(f"profiles: {part!r}: expected three shapes of one rank (min, opt, max), found {len(triple)}")
            lo, opt, hi = triple
            if any(not (a <= b <= c) for a, b, c in zip(lo, opt, hi)):
                raise RNNXError(f"profiles: {part!r}: expected min <= opt <= max in every dimension")
            if name in shapes:
                raise RNNXError(f"profiles: {text!r}: {shown(name)} is given twice")
            shapes[name] = (lo, opt, hi)
        if not shapes:
            raise RNNXError("profiles: expected at least one NAME:MIN,OPT,MAX")
        return cls(shapes)

    def as_json(self) -> dict[str, list[list[int]]]:
        return {name: [list(s) for s in triple] for name, triple in self.shapes.items()}


def parse_shapes(text: str, flag: str) -> dict[str, Shape]:
    """trtexec's ``--minShapes`` syntax: ``x:1x16x80,h0:1x1x32``; a name holding ``:`` is split
    at its last colon (``input:0:1x3``), one holding ``,`` is given in single quotes
    (``'a,b':1x3``). ``flag`` names the option in a refusal."""
    usage = "expected NAME:AxBxC[,NAME:AxBxC...] as trtexec takes them, e.g. x:1x16x80,h0:1x1x32"
    shapes: dict[str, Shape] = {}
    items = _split_outside_quotes(text, ",")
    if not all(items):
        raise RNNXError(f"{flag} {text!r}: {usage}")
    for item in items:
        name, dims = _name_and_shape(item)
        try:
            if not name:
                raise ValueError
            shape = _sizes(dims, f"{flag} {text!r}")
        except ValueError:
            raise RNNXError(f"{flag} {text!r}: {usage}" if item == text.strip() else f"{flag} {text!r}: {item!r}: {usage}") from None
        if name in shapes:
            raise RNNXError(f"{flag} {text!r}: {shown(name)} is given twice")
        shapes[name] = shape
    return shapes


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside single quotes, each piece stripped; an unclosed
    quote is refused by the name it leaves unparsed."""
    items, current, quoted = [], "", False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == sep and not quoted:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    items.append(current.strip())
    return items


def _name_and_shape(item: str) -> tuple[str, str]:
    """``NAME:SHAPE`` split as trtexec splits it: at the last colon, or after a name in single
    quotes (``'a,b':1x3``). A quote left open gives no name (refused by the caller)."""
    if item.startswith("'"):
        name, quote, rest = item[1:].partition("'")
        return (name, rest[1:]) if quote and rest.startswith(":") else ("", rest)
    name, _, dims = item.rpartition(":")
    return name.strip(), dims


def _sizes(text: str, where: str) -> Shape:
    """``1x16x80``: sizes of 0 to :data:`rnnx.shapes.sizes.MAX_DIMENSION`; ValueError where the
    text is not a shape, the refusal (starting with ``where``) where a size is past that."""
    if not re.fullmatch(r"\d+(x\d+)*", text.strip()):
        raise ValueError(text)
    sizes = tuple(int(d) for d in text.strip().split("x"))
    if max(sizes) > MAX_DIMENSION:
        raise RNNXError(f"{where}: expected sizes of at most {MAX_DIMENSION} (2^31 - 1, the most trtexec and TensorRT take), found {max(sizes)}")
    return sizes


def merge_shapes(given: list[dict[str, Shape]] | None, flag: str) -> dict[str, Shape]:
    """The shapes of a repeated flag as one table; an input named twice is refused."""
    merged: dict[str, Shape] = {}
    for shapes in given or []:
        for name, shape in shapes.items():
            if name in merged:
                raise RNNXError(f"{flag}: {shown(name)} is given twice")
            merged[name] = shape
    return merged


def _ends_from(why: list[str]) -> str:
    """``min and opt from A; max from B``: each basis once, with the ends it decided."""
    grouped: dict[str, list[str]] = {}
    for end, basis in zip(ENDS, why):
        grouped.setdefault(basis, []).append(end)
    if len(grouped) == 1:
        return why[0]
    return "; ".join(f"{' and '.join(ends)} from {basis}" for basis, ends in grouped.items())


@dataclass
class ProfileChoice:
    """One profile rnnx will build with, and, per dynamic dimension, its sizes and their basis."""

    profile: Profile
    dimensions: dict[str, dict[str, Any]]
    asked: list[str] = field(default_factory=list)  # the labels whose ends the file itself moved (through the probe)

    def summary(self) -> str:
        return describe_dimensions(self.dimensions)


def describe_dimensions(dimensions: dict[str, dict[str, Any]]) -> str:
    """``batch 1..32 (opt 8), seq 1..40 (opt 10)``: one profile's dynamic dimensions."""
    parts = [f"{shown(label, quoted=False)} {d['min']}..{d['max']} (opt {d['opt']})" if d["min"] != d["max"] else f"{shown(label, quoted=False)} {d['min']}"
             for label, d in dimensions.items()]
    return ", ".join(parts) or "static shapes"


def plan_profiles(inputs: FileDims, profiles: list[Profile] | None = None, min_shapes: dict[str, Shape] | None = None,
                  opt_shapes: dict[str, Shape] | None = None, max_shapes: dict[str, Shape] | None = None,
                  base: Profile | None = None, probe: Probe | None = None) -> list[ProfileChoice]:
    """The profiles to build with, every dynamic dimension of every input covered, or a refusal
    naming the first dimension nothing covers (see the module docstring for the defaults).

    ``profiles``: whole profiles given (one each); the inputs one leaves out take the sizes it
    gives their labels, else the defaults. ``min_shapes``/``opt_shapes``/``max_shapes``: one end
    of the one profile for the inputs they name. ``base``: a profile to start from instead of
    the defaults (``--from-weights`` has its own). ``probe``: runs the file at given input
    shapes (None, or why it failed), to move a length's default ends in to where the file runs
    (a Conv's kernel or a pool needs more than 1 frame; a table of positions caps the length). A
    file with no dynamic dimension needs none (an empty list)."""
    overrides = [dict(min_shapes or {}), dict(opt_shapes or {}), dict(max_shapes or {})]
    if profiles and any(overrides):
        raise RNNXError("profiles= and min_shapes=, opt_shapes= or max_shapes= were both given: give whole profiles or the "
                        "trtexec-style ends of one, not both")
    if profiles:
        return [_complete(inputs, [{n: t[i] for n, t in p.shapes.items()} for i in range(3)], ("profiles=",) * 3, base, probe) for p in profiles]
    if not inputs.labels() and not any(overrides):
        return []
    return [_complete(inputs, overrides, _PARAMETERS, base, probe)]


def _complete(inputs: FileDims, given: list[dict[str, Shape]], given_from: tuple[str, ...], base: Profile | None,
              probe: Probe | None) -> ProfileChoice:
    names = ", ".join(shown(n, quoted=False) for n in inputs.dims) or "none"
    for end, shapes in enumerate(given):
        for name, shape in shapes.items():
            where = f"{given_from[end]} {shown(name, quoted=False)}:{_shape_text(shape)}"
            if name not in inputs.dims:
                raise RNNXError(f"{where}: the file has no input {shown(name)}; its inputs are {names}")
            dims = inputs.dims[name]
            if len(shape) != len(dims):
                raise RNNXError(f"{where}: {shown(name)} has {len(dims)} dimensions {dims_text(dims)}, not {len(shape)}")
            for d, (size, dim) in enumerate(zip(shape, dims)):
                if isinstance(dim, int) and size != dim:
                    raise RNNXError(f"{where}: dimension {d} of {shown(name)} is fixed at {dim} in the file, not {size}")
    labels = inputs.labels()
    sizes: dict[str, list[int | None]] = {}
    basis: dict[str, list[str]] = {}
    for label in labels:
        found, why = profile_range(inputs.roles.get(label, OTHER), inputs.example_size(label))
        sizes[label] = list(found) if found else [None, None, None]
        basis[label] = [why] * 3
    defaults = {label: basis[label][0] for label in labels}  # the same at every end
    layers: list[tuple[list[dict[str, Shape]], tuple[str, ...]]] = (
        [([{n: t[i] for n, t in base.shapes.items()} for i in range(3)], ("the default profile for weights",) * 3)] if base else [])
    layers.append((given, tuple(_given_basis(g) for g in given_from)))
    for shapes_by_end, sources in layers:
        taken: set[tuple[str, int]] = set()  # a label's end set once per layer: the first input that gives it wins
        for end, shapes in enumerate(shapes_by_end):
            for name, shape in shapes.items():
                for dim, size in zip(inputs.dims.get(name, []), shape):
                    if isinstance(dim, str) and (dim, end) not in taken:
                        taken.add((dim, end))
                        sizes[dim][end], basis[dim][end] = size, sources[end]
    asked = _ask_lengths(inputs, sizes, basis, defaults, probe) if probe is not None else []
    chosen: dict[str, Triple] = {}
    for name, dims in inputs.dims.items():
        if not any(isinstance(d, str) for d in dims) and not any(name in g for g in given):
            continue  # a static input needs no profile entry: TensorRT takes its one shape
        ends: list[tuple[int | None, ...]] = []
        for end in range(3):
            if name in given[end]:
                ends.append(tuple(given[end][name]))
                continue
            ends.append(tuple(dim if isinstance(dim, int) else sizes[dim][end] for dim in dims))
        for d, dim in enumerate(dims):
            lo, opt, hi = (ends[e][d] for e in range(3))
            if lo is None or opt is None or hi is None:
                raise RNNXError(_uncovered(inputs, name, d, str(dim), [ENDS[e] for e in range(3) if ends[e][d] is None]))
            if not (0 <= lo <= opt <= hi):
                label = f" ({shown(dim)})" if isinstance(dim, str) else ""
                said = _ends_from([basis[dim][e] if isinstance(dim, str) and name not in given[e] else _given_basis(given_from[e])
                                   for e in range(3)])
                raise RNNXError(f"input {shown(name)} dimension {d}{label}: min {lo}, opt {opt}, max {hi} ({said}): expected 0 <= min <= opt "
                                f"<= max; give the other ends too (min_shapes=, opt_shapes=, max_shapes=)")
        chosen[name] = cast(Triple, (ends[0], ends[1], ends[2]))  # every end of every dimension is set: a None was refused above
    dimensions = {}
    for label in labels:
        dimensions[label] = {"role": inputs.roles.get(label, OTHER), "role_from": inputs.role_from.get(label, ""),
                             "min": sizes[label][0], "opt": sizes[label][1], "max": sizes[label][2],
                             "from": _ends_from(basis[label])}
    return ProfileChoice(Profile(chosen), dimensions, asked)


def _ask_lengths(inputs: FileDims, sizes: dict[str, list[int | None]], basis: dict[str, list[str]], defaults: dict[str, str],
                 probe: Probe) -> list[str]:
    """Ask the file (through ``probe``, batch and other dimensions at their min) whether it runs
    at the default ends of its lengths, one length at a time, the others at their opt: where
    not, raise the min to the least length it runs at (each length from 1 to 64 in turn, then
    doubling and halving the gap) and lower the max to the greatest (halving the gap down from
    the max). Above 64 frames the search takes a length that runs to keep running above it.
    Where the file does not run at the opt, a given opt is refused by name; a default one (the
    example's) leaves the defaults: the probe then says nothing about lengths. Returns the
    labels whose ends moved."""
    lengths = [k for k in inputs.labels() if inputs.roles.get(k) == LENGTH and None not in sizes[k]]
    lows = [k for k in lengths if basis[k][0] == defaults[k]]
    highs = [k for k in lengths if basis[k][2] == defaults[k]]
    if not (lows or highs):
        return []

    def runs(at: dict[str, int]) -> str | None:
        shapes = {name: tuple(d if isinstance(d, int) else at.get(d, sizes[d][1] if d in lengths else sizes[d][0]) for d in dims)
                  for name, dims in inputs.dims.items()}
        return probe(shapes) if all(None not in shape for shape in shapes.values()) else None  # type: ignore[arg-type]

    why = runs({})
    if why is not None:
        if any(basis[k][1] != defaults[k] for k in lengths):
            at = ", ".join(f"{shown(k, quoted=False)} {sizes[k][1]}" for k in lengths)
            raise RNNXError(f"expected the model to run at the profile's opt ({at}), found it does not ({why}); give opt_shapes= "
                            "(or profiles=) at lengths the model takes")
        return []
    asked = "asked of ONNX Runtime and ONNX's reference"
    moved: list[str] = []
    for k in lows:
        least, opt = int(sizes[k][0]), int(sizes[k][1])  # type: ignore[arg-type]
        why = runs({k: least})
        if why is not None:
            sizes[k][0] = _least(lambda n: runs({k: n}) is None, least, opt)
            basis[k][0] = f"the least length the file runs at, {sizes[k][0]} ({asked}; at {least}: {why})"
            moved.append(k)
    together = {k: int(sizes[k][0]) for k in lows}  # type: ignore[arg-type]
    if len(lows) > 1 and runs(together) is not None:  # each runs alone at its min, not all at theirs: raise them together
        start = max(together.values())
        n = _least(lambda m: runs({k: max(m, together[k]) for k in lows}) is None, start - 1, max(int(sizes[k][1]) for k in lows))  # type: ignore[arg-type]
        for k in lows:
            sizes[k][0] = min(max(n, together[k]), int(sizes[k][1]))  # type: ignore[arg-type]
            basis[k][0] = f"the least length the file runs at with the other lengths at theirs, {sizes[k][0]} ({asked})"
            moved.append(k)
    for k in highs:
        opt, most = int(sizes[k][1]), int(sizes[k][2])  # type: ignore[arg-type]
        why = runs({k: most})
        if why is not None:
            sizes[k][2] = _bisect(lambda n: runs({k: n}) is not None, opt, most) - 1  # the first that fails, less one
            basis[k][2] = f"the greatest length the file runs at, {sizes[k][2]} ({asked}; at {most}: {why})"
            moved.append(k)
    return list(dict.fromkeys(moved))


def _least(holds: Callable[[int], bool], failed: int, ran: int) -> int:
    """The least n above ``failed`` (where ``holds`` is false) up to ``ran`` (where it is true):
    each of the first 64 in turn, then doubling and halving the gap."""
    for n in range(failed + 1, min(ran, failed + 64)):
        if holds(n):
            return n
    failed = max(failed, min(ran, failed + 64) - 1)
    n = failed
    while 2 * n < ran:
        n *= 2
        if holds(n):
            ran = n
            break
        failed = n
    return _bisect(holds, failed, ran)


def _bisect(holds: Callable[[int], bool], low: int, high: int) -> int:
    """The least n in (low, high] for which ``holds`` is true, given it is false at ``low`` and
    true at ``high`` (and stays true above where it first holds)."""
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle
    return high


def _given_basis(parameter: str) -> str:
    """``max_shapes=`` as ENGINE.json and refusals say it: the parameter and its flag."""
    flag = {"profiles=": "--profile", **dict(zip(_PARAMETERS, SHAPE_FLAGS))}[parameter]
    return f"given ({parameter.rstrip('=')}, {flag})"


def _uncovered(inputs: FileDims, name: str, d: int, label: str, missing: list[str]) -> str:
    role = inputs.roles.get(label, OTHER)
    what = (f"a {role} ({inputs.role_from.get(label, '')})" if role != OTHER
            else f"neither a batch nor a length ({inputs.role_from.get(label, 'nothing names it')})")
    hint = _shape_text([s if isinstance(s, int) else None for s in inputs.dims[name]])
    ends = " and ".join(missing)
    return (f"input {shown(name)} dimension {d} ({shown(label)}) is dynamic and no profile covers it: it is {what} and the file records no "
            f"example size for it, so no {ends} can be chosen; give its sizes with min_shapes=, opt_shapes= and max_shapes= "
            f"({shown(name, quoted=False)}:{hint} with ? filled in) or profiles=")
