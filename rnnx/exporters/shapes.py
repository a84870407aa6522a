"""Which dimensions of an export's inputs are dynamic, and what they are called.

torch decides, not rnnx. Every dimension of every tensor input is offered to torch.export
as ``Dim.AUTO``; torch's shape analysis keeps it dynamic, makes it static (channels,
feature sizes) or ties it to another (one length in two inputs). rnnx then names each
dynamic dimension by where it flows in the exported program:

- into the time axis of a recurrence (also through arithmetic, as a CRNN's image width
  reaches its LSTM as ``width // 4``): a length, ``seq`` (``<input>_seq`` when a model
  has several independent lengths);
- into the batch axis of a recurrence or a cell: ``batch``;
- anywhere else: ``<input>_dim<k>``;

and a name the user gave (``torch.export.Dim("frames")`` or ``--dynamic x:1=frames``)
wins. torch specialises dimensions of size 0 and 1 in an example; :func:`grow_size_one`
finds which size-1 dimensions the model also accepts at size 2, so that the trace sees
them as the variables they are (a batch of 1, a one-frame chunk) and leaves real
size-1 dimensions (an image's single channel) alone.
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rnnx.errors import RNNXError
from rnnx.formats.onnx_read import invented_label
from rnnx.shapes.roles import BATCH, LENGTH, OTHER

_SYMBOL = re.compile(r"\b[su]\d+\b")


@dataclass
class Leaf:
    """One tensor (or other value) of the flattened example inputs."""

    index: int
    name: str
    value: Any

    @property
    def is_tensor(self) -> bool:
        import torch

        return isinstance(self.value, torch.Tensor)


def leaves_of(model: Any, example: Sequence[Any]) -> tuple[list[Leaf], Any]:
    """The flattened example inputs, each named as torch.onnx names graph inputs: the
    forward's parameter name, with ``_<k>`` per level of nesting (``hx_0``, ``hx_1``)."""
    from torch.utils._pytree import tree_flatten_with_path

    paths, structure = tree_flatten_with_path(tuple(example))
    params, star = _forward_parameters(model)
    leaves = []
    for i, (path, value) in enumerate(paths):
        top = path[0].idx if hasattr(path[0], "idx") else i
        if star is not None and top >= star:  # forward(self, *tensors): tensors_0, tensors_1, ...
            base = f"{params[star]}_{top - star}"
        else:
            base = params[top] if top < len(params) else f"input_{top}"
        leaves.append(Leaf(i, base + "".join(f"_{getattr(k, 'idx', getattr(k, 'key', k))}" for k in path[1:]), value))
    return leaves, structure


def rename_leaves(leaves: Sequence[Leaf], names: Sequence[str] | None) -> None:
    """Give the tensor inputs the graph names the user chose."""
    if names is None:
        return
    tensors = [leaf for leaf in leaves if leaf.is_tensor]
    if len(names) != len(tensors) or len(set(names)) != len(names) or not all(names):
        raise RNNXError(f"input names: expected {len(tensors)} distinct names, one per tensor input ({', '.join(t.name for t in tensors)}), found {list(names)}")
    for leaf, name in zip(tensors, names):
        leaf.name = name


def bind_dynamic_shapes(model: Any, per_argument: Any) -> Any:
    """The dynamic-shapes tree bound as torch.export binds forward's parameters: one entry per
    parameter, so the arguments that ``*args`` collects share one entry, a tuple of theirs."""
    star = _forward_parameters(model)[1]
    if star is None or not isinstance(per_argument, tuple):
        return per_argument
    return tuple(per_argument[:star]) + (tuple(per_argument[star:]),)


def _forward_parameters(model: Any) -> tuple[list[str], int | None]:
    """The names of forward's positional parameters, and the position of its ``*args`` (None without)."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):  # builtins and some C-implemented forwards have no signature
        return [], None
    return [p.name for p in params], next((k for k, p in enumerate(params) if p.kind == p.VAR_POSITIONAL), None)


@dataclass
class Overrides:
    """What the user said about dimensions, by input name: ``dynamic[name][dim]`` is a
    label, a label with a range (``("frames", 6, None)``: at least 6, ``("frames", 6, 512)``),
    a ``torch.export.Dim`` (its name and range), or None (dynamic, and rnnx names it);
    ``static[name]`` a set of dims."""

    dynamic: dict[str, dict[int, Any]] = field(default_factory=dict)
    static: dict[str, set[int]] = field(default_factory=dict)

    def check_names(self, leaves: Sequence[Leaf]) -> None:
        known = {leaf.name: leaf for leaf in leaves if leaf.is_tensor}
        for name, dims in itertools.chain(self.dynamic.items(), self.static.items()):
            if name not in known:
                raise RNNXError(f"dynamic/static axes: expected an input name among {', '.join(known) or '(none)'}, found {name!r}")
            rank = known[name].value.dim()
            bad = [d for d in dims if not -rank <= d < rank]
            if bad:
                raise RNNXError(f"dynamic/static axes {name}:{bad[0]}: input {name} has {rank} dimensions (0..{rank - 1})")
        for name, dims in self.dynamic.items():
            rank = known[name].value.dim()
            both = {d % rank for d in dims} & {d % rank for d in self.static.get(name, set())}
            if both:
                raise RNNXError(f"dynamic/static axes {name}:{min(both)}: asked to be both dynamic and static; say one")

    @staticmethod
    def label_range(value: Any, where: str) -> tuple[str | None, int | None, int | None]:
        """(label, min, max) of one ``dynamic`` entry; a missing bound is None."""
        if value is None or isinstance(value, str):
            return value or None, None, None
        if isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
            label, lo, hi = (tuple(value) + (None, None))[:3]
        elif isinstance(getattr(value, "__name__", None), str) and hasattr(value, "min"):  # a torch.export.Dim
            label, lo, hi = value.__name__, value.min, value.max
            lo = None if lo in (0, None) else lo
            hi = hi if isinstance(hi, int) and not isinstance(hi, bool) and hi < 1 << 62 else None
        else:
            raise RNNXError(f"dynamic axis {where}: expected a label, (label, min, max) or a torch.export.Dim, found {value!r}")
        for bound in (lo, hi):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
                raise RNNXError(f"dynamic axis {where}={label}: expected a range of non-negative integers, found min={lo}, max={hi}")
        if lo is not None and hi is not None and hi <= lo:
            fix = "to fix its size, make it static (--static / static=)" if hi == lo else "give min below max"
            raise RNNXError(f"dynamic axis {where}={label}: expected min < max (a dynamic size takes more than one value), "
                            f"found min={lo}, max={hi}; {fix}")
        if not isinstance(label, str) or not label:
            raise RNNXError(f"dynamic axis {where}: a range needs a label (NAME:DIM=LABEL:MIN[:MAX]), found {value!r}")
        return label, lo, hi


def offered_shapes(leaves: Sequence[Leaf], overrides: Overrides) -> tuple[list[Any], dict[tuple[int, int], str]]:
    """Per leaf, the dynamic-shapes entry offered to torch.export: AUTO on every dimension
    except those the user made static or named (a named one is a ``Dim`` of that name, with
    the range given, shared by every dimension given that name). Also the user's labels by
    (leaf, dim)."""
    from torch.export import Dim

    overrides.check_names(leaves)
    dims: dict[str, Any] = {}
    ranges: dict[str, tuple[int | None, int | None]] = {}
    specs: list[Any] = []
    labels: dict[tuple[int, int], str] = {}
    for leaf in leaves:
        if not leaf.is_tensor:
            specs.append(None)
            continue
        rank = leaf.value.dim()
        static = {d % rank for d in overrides.static.get(leaf.name, set())}
        named = {d % rank: given for d, given in overrides.dynamic.get(leaf.name, {}).items()}
        entry: dict[int, Any] = {}
        for d in range(rank):
            if d in static:
                continue
            label, lo, hi = Overrides.label_range(named.get(d), f"{leaf.name}:{d}")
            if label:
                if not label.isidentifier():
                    raise RNNXError(f"dynamic axis {leaf.name}:{d}={label}: a label must be an identifier (letters, digits, _)")
                if (lo, hi) != (None, None):
                    if ranges.get(label, (lo, hi)) != (lo, hi):
                        def span(lo: int | None, hi: int | None) -> str:
                            return f"{lo or 0}..{'inf' if hi is None else hi}"

                        raise RNNXError(f"dynamic axis {leaf.name}:{d}={label}: {label} is given two ranges ({span(*ranges[label])} "
                                        f"and {span(lo, hi)}); give it one")
                    ranges[label] = (lo, hi)
                    dims[label] = Dim(label, min=lo, max=hi)
                entry[d] = dims.setdefault(label, Dim(label))
                labels[(leaf.index, d)] = label
            elif d in named:  # asked dynamic without a name: torch must keep it dynamic or say why not
                entry[d] = Dim.DYNAMIC
            else:
                entry[d] = Dim.AUTO
        specs.append(entry or None)
    # A range given on a later mention of a label applies to its earlier mentions too.
    for entry in specs:
        for d, dim in (entry or {}).items():
            name = getattr(dim, "__name__", None)
            if name in dims:
                entry[d] = dims[name]
    return specs, labels


def user_labels(leaves: Sequence[Leaf], specs: Sequence[Any]) -> dict[tuple[int, int], str]:
    """Labels from a dynamic_shapes tree given in torch.export's own format (named Dims)."""
    labels = {}
    for leaf, entry in zip(leaves, specs):
        items = entry.items() if isinstance(entry, dict) else enumerate(entry) if isinstance(entry, (list, tuple)) else ()
        for d, dim in items:
            name = getattr(dim, "__name__", None)
            if name and leaf.is_tensor:
                labels[(leaf.index, int(d) % max(leaf.value.dim(), 1))] = name
    return labels


def grow_size_one(runs: Callable[[list[Any]], bool], leaves: Sequence[Leaf], specs: Sequence[Any]) -> tuple[list[Any], list[tuple[str, int]]]:
    """The example with every size-1 dimension offered as dynamic (AUTO or a named Dim)
    grown to 2, where the model still runs eagerly on it; returns the values and which
    (input, dim) were grown.

    All candidates together first (a batch of 1 is in x and in h0 at once), then all but
    one (an image's single channel among them), then those that run alone.
    """
    values = [leaf.value for leaf in leaves]
    candidates = [
        (leaf.index, d) for leaf, entry in zip(leaves, specs)
        if leaf.is_tensor and isinstance(entry, dict) for d, dim in entry.items() if dim is not None and leaf.value.shape[d] == 1
    ]
    if not candidates:
        return values, []

    def grown(chosen: Sequence[tuple[int, int]]) -> list[Any]:
        import torch

        out = list(values)
        for i, d in chosen:
            out[i] = torch.cat([out[i], out[i]], dim=d)  # repeats the single slice: ids, lengths and flags stay valid
        return out

    tries = [candidates] + [[c for c in candidates if c != skip] for skip in candidates] if len(candidates) > 1 else [candidates]
    for chosen in tries:
        if chosen and runs(grown(chosen)):
            return grown(chosen), [(leaves[i].name, d) for i, d in chosen]
    alone = [c for c in candidates if runs(grown([c]))]
    if alone and runs(grown(alone)):
        return grown(alone), [(leaves[i].name, d) for i, d in alone]
    return values, []


@dataclass
class Naming:
    """What each dynamic dimension is called, and what it is."""

    symbol_labels: dict[str, str]  # torch's symbol (s77) -> label
    roles: dict[str, str]  # label -> batch / length / other
    input_dims: dict[str, list[int | str]]  # graph input -> per dim, its size or its label
    lengths_inputs: dict[str, str]  # a graph input holding per-sequence lengths -> the length it bounds

    def rename(self, text: str) -> str:
        """A dim_param written by torch.onnx (``s77``, ``(s0//4)``) in rnnx's labels."""
        return _SYMBOL.sub(lambda m: self.symbol_labels.get(m.group(0), m.group(0)), text)

    def axes(self) -> dict[str, dict[int, str]]:
        return {name: {d: v for d, v in enumerate(dims) if isinstance(v, str)} for name, dims in self.input_dims.items()}


def name_dimensions(program: Any, leaves: Sequence[Leaf], given: dict[tuple[int, int], str], recurrent_ops: dict[Any, str]) -> Naming:
    """Label the symbols of ``program`` (an ExportedProgram) by where they flow.

    ``recurrent_ops`` maps each rnnx op overload to ``"sequence"`` (x is (T, B, F), its
    sequence lengths the 5th argument) or ``"cell"`` (x is (B, F)).
    """
    tensors = [leaf for leaf in leaves if leaf.is_tensor]
    placeholders = _user_placeholders(program)
    if len(placeholders) != len(tensors):
        raise RuntimeError(f"{len(placeholders)} traced inputs for {len(tensors)} tensor inputs")  # a bug in rnnx: exit 3
    roles: dict[str, str] = {}
    lengths_of: dict[str, str] = {}  # placeholder name -> its length symbol
    for node in program.graph.nodes:
        kind = recurrent_ops.get(node.target) if node.op == "call_function" else None
        if kind is None:
            continue
        shape = node.args[0].meta["val"].shape
        batch_dim = 1 if kind == "sequence" else 0
        for sym in _free_symbols(shape[batch_dim]):
            roles.setdefault(sym, BATCH)
        if kind == "sequence":
            time_syms = _free_symbols(shape[0])
            for sym in time_syms:
                roles[sym] = LENGTH
            lens = node.args[4] if len(node.args) > 4 else None
            if lens is not None and len(time_syms) == 1:
                for ph in _placeholder_ancestors(lens):
                    lengths_of[ph] = next(iter(time_syms))
    labels: dict[str, str] = {}
    used: set[str] = set()
    dims_by_input: dict[str, list[int | str]] = {}
    length_count = len({s for s, r in roles.items() if r == LENGTH})

    def label_for(sym: str, leaf: Leaf, d: int) -> str:
        role = roles.get(sym, OTHER)
        wanted = {BATCH: "batch", LENGTH: "seq" if length_count == 1 else f"{leaf.name}_seq"}.get(role, invented_label(leaf.name, d))
        label, k = wanted, 2
        while label in used:
            label, k = f"{wanted}_{k}", k + 1
        used.add(label)
        return label

    for leaf, ph in zip(tensors, placeholders):  # the user's names first, wherever the symbol shows first
        for d, size in enumerate(ph.meta["val"].shape):
            syms = _free_symbols(size)
            if (leaf.index, d) in given and len(syms) == 1:
                labels.setdefault(next(iter(syms)), given[(leaf.index, d)])
                used.add(given[(leaf.index, d)])
    for leaf, ph in zip(tensors, placeholders):
        out: list[int | str] = []
        for d, size in enumerate(ph.meta["val"].shape):
            syms = _free_symbols(size)
            if not syms:
                out.append(int(size))
                continue
            for sym in sorted(syms):
                if sym not in labels:
                    labels[sym] = label_for(sym, leaf, d)
            out.append(_SYMBOL.sub(lambda m: labels.get(m.group(0), m.group(0)), str(_expr(size))))
        dims_by_input[leaf.name] = out
    naming_roles = {labels[s]: roles.get(s, OTHER) for s in labels}
    lengths_inputs = {leaf.name: labels[lengths_of[ph.name]] for leaf, ph in zip(tensors, placeholders) if ph.name in lengths_of and lengths_of[ph.name] in labels}
    return Naming(labels, naming_roles, dims_by_input, lengths_inputs)


def _user_placeholders(program: Any) -> list[Any]:
    from torch.export.graph_signature import InputKind

    names = [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    import torch

    return [nodes[n] for n in names if n in nodes and isinstance(nodes[n].meta.get("val"), torch.Tensor)]


def _expr(size: Any) -> Any:
    return size.node.expr if hasattr(size, "node") else size


def _free_symbols(size: Any) -> set[str]:
    expr = _expr(size)
    return {str(s) for s in getattr(expr, "free_symbols", ())}


def _placeholder_ancestors(node: Any) -> set[str]:
    seen, stack, found = set(), [node], set()
    while stack:
        n = stack.pop()
        if not hasattr(n, "op") or n.name in seen:
            continue
        seen.add(n.name)
        if n.op == "placeholder":
            found.add(n.name)
        stack.extend(n.all_input_nodes)
    return found


def guess_naming(leaves: Sequence[Leaf], reach: dict[int, tuple[str, Any]]) -> Naming:
    """Where torch.export could not trace the model at all, the axes the second route offers
    come from the recurrent modules that example tensors reach unchanged (``reach``: leaf
    index -> ("input" or "state", module)): an input is (seq, batch, ...) or, batch-first,
    (batch, seq, ...); a state is (layers*directions, batch, size). Every other dimension
    stays static: a guess about a tensor no recurrence reads would be only a guess."""
    roles: dict[str, str] = {}
    dims: dict[str, list[int | str]] = {}
    for leaf in leaves:
        if not leaf.is_tensor:
            continue
        shape: list[int | str] = list(leaf.value.shape)
        role, module = reach.get(leaf.index, ("", None))
        if role == "input" and leaf.value.dim() == 3:
            shape[0], shape[1] = ("batch", "seq") if getattr(module, "batch_first", False) else ("seq", "batch")
        elif role == "state" and leaf.value.dim() == 3:
            shape[1] = "batch"
        dims[leaf.name] = shape
        roles.update({v: BATCH if v == "batch" else LENGTH for v in shape if isinstance(v, str)})
    return Naming({}, roles, dims, {})
