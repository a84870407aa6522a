"""Flax's recurrent cells as parameter trees: names, gates, biases, pack and unpack (pure numpy).

Every cell of ``flax.linen`` and ``flax.nnx`` is a set of dense layers, each a ``kernel``
(in, gates*hidden) applied as ``x @ kernel`` (the transpose of our W) and maybe a ``bias``.
:data:`CELLS` lists them per class: which side each dense reads (``i`` the input, ``h``
the state), which canonical gates its columns hold, and whether it has a bias. Flax 0.12
runs these cells exactly as rnnx's reference does on the canonical weights read here, which
tests/formats/test_flax.py pins by running each class:

- LSTMs: the gates are i, f, g, o with ``c' = f*c + i*g`` and ``h' = o*tanh(c')``; the carry
  is ``(c, h)``. Biases sit on the state side only, so a gate's two canonical biases are
  written as their sum and read back as a recurrent bias with a zero input bias.
  linen's ``OptimizedLSTMCell`` keeps ``LSTMCell``'s tree (it fuses the kernels only when it
  runs), so a linen LSTM tree serves both classes.
- GRUs: ``n = tanh(W_n x + b_in + r * (R_n h + b_hn))`` and ``h' = (1-z)*n + z*h``, i.e.
  ``reset_after``. r and z carry one bias (the sum of ours); n's recurrent bias cannot leave
  the reset product, so nnx's GRUCell, whose state side has no bias, holds only a zero one.
- SimpleCell: ``h' = act(W x + b + R h)``, tanh unless ``activation_fn`` says otherwise;
  the tree does not say which, so the spec must. ``residual=True`` adds ``h`` inside the
  activation, which no spec holds; the tree does not record it either, so a user who set it
  must not convert the cell.

Wrappers add levels: ``RNN`` puts its cell under ``cell``; ``Bidirectional`` puts two RNNs
under ``forward_rnn`` and ``backward_rnn`` and concatenates their outputs (forward first),
the backward one run with ``reverse=True, keep_order=True``: our ``bidirectional``. One RNN
with ``reverse=True`` is our ``reverse``; the tree does not record it. linen's
``Module.init`` wraps everything in ``{"params": ...}``; nnx's ``nnx.state(m, nnx.Param)
.to_pure_dict()`` does not. Flax has no multi-layer recurrent module: each layer of a stack
is its own RNN or Bidirectional somewhere in a user's tree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.errors import RNNXError, refuse_spec
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights, split_gates, tensor_name

FLAVORS = ("linen", "nnx")


@dataclass(frozen=True)
class Dense:
    """One dense layer of a cell: its name, the side it reads, the gates of its columns."""

    name: str
    side: str  # "i": applied to the input (our W, bW); "h": applied to the state (our R, bR)
    gates: tuple[str, ...]
    bias: bool


@dataclass(frozen=True)
class CellLayout:
    flavor: str
    classes: tuple[str, ...]  # the Flax classes whose parameter tree this is
    cell: str  # "lstm", "gru" or "rnn" (tanh or relu: the activation_fn, which the tree does not hold)
    denses: tuple[Dense, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(d.name for d in self.denses)


def _per_gate(input_names: Mapping[str, str], state_names: Mapping[str, str], input_bias: tuple[str, ...],
              state_bias: tuple[str, ...]) -> tuple[Dense, ...]:
    """One Dense per gate and side, named by ``input_names`` and ``state_names``."""
    return tuple(Dense(name, "i", (g,), g in input_bias) for g, name in input_names.items()) + tuple(
        Dense(name, "h", (g,), g in state_bias) for g, name in state_names.items()
    )


_LSTM_GATES = ("i", "f", "g", "o")
_GRU_GATES = ("r", "z", "n")

CELLS: tuple[CellLayout, ...] = (
    # linen: one Dense per gate and side, named side letter + gate letter.
    CellLayout("linen", ("LSTMCell", "OptimizedLSTMCell"), "lstm",
               _per_gate({g: "i" + g for g in _LSTM_GATES}, {g: "h" + g for g in _LSTM_GATES}, (), _LSTM_GATES)),
    CellLayout("linen", ("GRUCell",), "gru",
               _per_gate({g: "i" + g for g in _GRU_GATES}, {g: "h" + g for g in _GRU_GATES}, _GRU_GATES, ("n",))),
    CellLayout("linen", ("SimpleCell",), "rnn", (Dense("i", "i", ("h",), True), Dense("h", "h", ("h",), False))),
    # nnx: LSTMCell as linen's, but `if` is a Python keyword, so that attribute is `if_`.
    CellLayout("nnx", ("LSTMCell",), "lstm",
               _per_gate({"i": "ii", "f": "if_", "g": "ig", "o": "io"}, {g: "h" + g for g in _LSTM_GATES}, (), _LSTM_GATES)),
    # nnx's fused cells: one Linear per side, gates along the columns.
    CellLayout("nnx", ("OptimizedLSTMCell",), "lstm",
               (Dense("dense_i", "i", _LSTM_GATES, False), Dense("dense_h", "h", _LSTM_GATES, True))),
    CellLayout("nnx", ("GRUCell",), "gru", (Dense("dense_i", "i", _GRU_GATES, True), Dense("dense_h", "h", _GRU_GATES, False))),
    CellLayout("nnx", ("SimpleCell",), "rnn", (Dense("dense_i", "i", ("h",), True), Dense("dense_h", "h", ("h",), False))),
)
#: The gates whose recurrent bias sits inside the reset product (GRU n): it cannot be
#: folded into the input bias, so it needs a bias on the state side of its own.
INSEPARABLE_RECURRENT_BIAS: dict[str, tuple[str, ...]] = {"gru": ("n",)}

CELL_KEY = "cell"  # RNN's attribute holding its cell
BIDIRECTIONAL_KEYS = ("forward_rnn", "backward_rnn")  # Bidirectional's attributes, forward first
VARIABLES_KEY = "params"  # linen's collection of parameters in what Module.init returns
#: Branches of a saved tree that copy the parameters' structure without being parameters:
#: the optimizer state of flax.training's TrainState (Adam's mu and nu have the cells' keys).
SKIPPED_BRANCHES = ("opt_state",)


def layout_for(flavor: str, cell: str, cls: str | None = None) -> CellLayout:
    """The layout of a canonical ``cell`` kind ("lstm", "gru", "rnn_tanh", ...) in ``flavor``."""
    if flavor not in FLAVORS:
        raise RNNXError(f"flavor: expected one of {', '.join(FLAVORS)}, found {flavor!r}")
    kind = "rnn" if cell.startswith("rnn") else cell
    found = [c for c in CELLS if c.flavor == flavor and c.cell == kind and (cls is None or cls in c.classes)]
    if not found:
        classes = sorted({n for c in CELLS if c.flavor == flavor and c.cell == kind for n in c.classes})
        raise RNNXError(f"cell_class: expected one of {', '.join(classes)} for a {cell} in flax.{flavor}, found {cls!r}")
    return found[0]


def refusals(spec: RNNSpec) -> list[str]:
    """Why Flax's recurrent cells cannot hold ``spec`` (empty when they can)."""
    cannot = [
        (spec.num_layers > 1, f"{spec.num_layers} layers in one module (Flax has none: each layer is its own RNN; "
                              "convert one layer at a time)"),
        (spec.proj_size > 0, "a projection"),
        (spec.peepholes, "peepholes"),
        (not spec.bias, "no_bias (every Flax cell has biases)"),
        (spec.cell == "gru" and not spec.reset_after, "reset_before (Flax's GRUCell applies the reset gate after the recurrent product)"),
        (not spec.uses_default_activations,
         f"{getattr(spec, 'activation_text', '') or 'non-default activations, clip or input_forget'} (a cell's gate_fn and "
         "activation_fn are arguments of the module, which its parameter tree does not record)"),
    ]
    return [f"Flax's recurrent cells cannot express {what}" for bad, what in cannot if bad]


def check_expressible(spec: RNNSpec) -> None:
    refuse_spec(spec, refusals(spec))


# --- writing ------------------------------------------------------------------------


def _bias_for(weights: RNNWeights, layout: CellLayout, dense: Dense, direction: str) -> np.ndarray:
    """A dense's bias: its side's canonical bias per gate, plus the other side's where that
    side has none (biases that only add fold into one)."""
    other_side = {g for d in layout.denses if d.side != dense.side and d.bias for g in d.gates}
    inseparable = INSEPARABLE_RECURRENT_BIAS.get(layout.cell, ())
    parts = []
    for gate in dense.gates:
        own = weights[tensor_name(0, direction, "bW" if dense.side == "i" else "bR", gate)]
        other = weights[tensor_name(0, direction, "bR" if dense.side == "i" else "bW", gate)]
        # A zero other-side bias (what reading Flax gives) adds nothing, not even -0.0's sign.
        fold = gate not in other_side and gate not in inseparable and np.any(other)
        parts.append(own + other if fold else own)
    return np.concatenate(parts)


def _check_inseparable(weights: RNNWeights, layout: CellLayout, direction: str) -> None:
    state_bias = {g for d in layout.denses if d.side == "h" and d.bias for g in d.gates}
    for gate in INSEPARABLE_RECURRENT_BIAS.get(layout.cell, ()):
        if gate not in state_bias and np.any(weights[tensor_name(0, direction, "bR", gate)]):
            raise RNNXError(
                f"tensor {tensor_name(0, direction, 'bR', gate)}: flax.{layout.flavor}'s {'/'.join(layout.classes)} has no recurrent bias "
                f"for gate {gate} (it sits inside the reset product, so it cannot join the input bias), found a non-zero one; "
                "write flavor='linen', whose GRUCell has it"
            )


def cell_tree(weights: RNNWeights, layout: CellLayout, direction: str) -> dict[str, dict[str, np.ndarray]]:
    """One cell's parameter tree for one direction of the (single-layer) weights."""
    _check_inseparable(weights, layout, direction)
    tree = {}
    for dense in layout.denses:
        kind = "W" if dense.side == "i" else "R"
        entry = {"kernel": np.ascontiguousarray(weights.stacked(0, direction, kind, dense.gates).T)}
        if dense.bias:
            entry["bias"] = _bias_for(weights, layout, dense, direction)
        tree[dense.name] = entry
    return tree


def to_tree(weights: RNNWeights, flavor: str = "linen", cell_class: str | None = None, module: str = "rnn") -> dict[str, Any]:
    """Flax's parameter tree for ``weights``.

    ``module="rnn"`` (default) gives an ``RNN``'s tree, or a ``Bidirectional``'s for a
    bidirectional spec; ``module="cell"`` the bare cell's (one direction only). flax.linen's
    tree comes inside ``{"params": ...}``, as ``Module.init`` returns it; flax.nnx's is the
    pure dict of ``nnx.state(module, nnx.Param)``. ``cell_class`` picks nnx's
    ``OptimizedLSTMCell`` over its ``LSTMCell`` (linen's two share a tree).
    """
    spec = weights.spec
    check_expressible(spec)
    if module not in ("rnn", "cell"):
        raise RNNXError(f"module: expected 'rnn' (an RNN or Bidirectional) or 'cell', found {module!r}")
    layout = layout_for(flavor, spec.cell, cell_class)
    if module == "cell":
        if spec.direction == "bidirectional":
            raise RNNXError(f"module='cell': a bidirectional spec is two cells; pass module='rnn' for a Bidirectional's tree (spec {spec})")
        tree: dict[str, Any] = cell_tree(weights, layout, spec.directions[0])
    elif spec.direction == "bidirectional":
        tree = {key: {CELL_KEY: cell_tree(weights, layout, d)} for key, d in zip(BIDIRECTIONAL_KEYS, spec.directions)}
    else:
        tree = {CELL_KEY: cell_tree(weights, layout, spec.directions[0])}
    return {VARIABLES_KEY: tree} if flavor == "linen" else tree


# --- reading ------------------------------------------------------------------------


def _is_mapping(node: Any) -> bool:
    return isinstance(node, Mapping)


def _columns_are_gates(kernel: Any, dense: Dense) -> bool:
    """Whether a state-side kernel (hidden, gates*hidden) has this dense's gate count: nnx's
    GRUCell and SimpleCell have the same names and differ only here."""
    shape = np.shape(kernel)
    return len(shape) == 2 and shape[1] == len(dense.gates) * shape[0]


def match_cell(node: Any) -> list[CellLayout]:
    """The layouts whose dense names, kernel/bias entries and state-side gate counts ``node`` has."""
    if not _is_mapping(node):
        return []
    found = []
    for layout in CELLS:
        if set(node) != layout.names:
            continue
        if all(_is_mapping(node[d.name]) and set(node[d.name]) == ({"kernel", "bias"} if d.bias else {"kernel"}) for d in layout.denses) \
                and all(_columns_are_gates(node[d.name]["kernel"], d) for d in layout.denses if d.side == "h"):
            found.append(layout)
    return found


@dataclass(frozen=True)
class Group:
    """One recurrent layer found in a tree: where it is and its cells, forward first."""

    path: str
    layout: CellLayout
    cells: tuple[Mapping[str, Any], ...]
    wrapper: str  # "cell", "RNN" or "Bidirectional"


def _group_at(node: Any, path: str) -> Group | None:
    if not _is_mapping(node):
        return None
    layouts = match_cell(node)
    if layouts:
        return Group(path, layouts[0], (node,), "cell")
    if set(node) == {CELL_KEY}:
        inner = _group_at(node[CELL_KEY], path)
        return Group(path, inner.layout, inner.cells, "RNN") if inner and inner.wrapper == "cell" else None
    if set(node) == set(BIDIRECTIONAL_KEYS):
        halves = [_group_at(node[k], path) for k in BIDIRECTIONAL_KEYS]
        if all(h is not None and h.wrapper == "RNN" for h in halves) and halves[0].layout == halves[1].layout:  # type: ignore[union-attr]
            return Group(path, halves[0].layout, halves[0].cells + halves[1].cells, "Bidirectional")  # type: ignore[union-attr]
    return None


MAX_DEPTH = 64  # a parameter tree nests a few levels per module; a hostile file nests without end


def find_groups(tree: Any) -> Iterator[Group]:
    """Every recurrent layer in a tree, outermost match first, paths joined by '/'."""
    stack: list[tuple[Any, str, int]] = [(tree, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        group = _group_at(node, path)
        if group is not None:
            yield group
            continue
        if not _is_mapping(node) or depth >= MAX_DEPTH:
            continue
        for key in reversed(list(node)):
            if key in SKIPPED_BRANCHES:
                continue
            stack.append((node[key], f"{path}/{key}" if path else str(key), depth + 1))


def _array(value: Any, where: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object:
        raise RNNXError(f"{where}: expected a floating array, found {value!r}")
    if array.dtype.name == "bfloat16":  # ml_dtypes' type from jax: widened to float32 exactly
        array = array.astype(np.float32)
    if array.dtype.kind != "f":
        raise RNNXError(f"{where}: expected a floating array, found dtype {array.dtype}")
    return array


def infer_spec(group: Group) -> RNNSpec:
    """A group's spec where its tree settles it (all but a SimpleCell's activation)."""
    first = group.layout.denses[0]
    kernel = np.shape(group.cells[0][first.name]["kernel"])
    hidden_kernel = np.shape(next(group.cells[0][d.name]["kernel"] for d in group.layout.denses if d.side == "h"))
    if len(kernel) != 2 or len(hidden_kernel) != 2:
        raise RNNXError(f"flax group {group.path or '(top)'}: expected 2-D kernels, found shapes {kernel} and {hidden_kernel}")
    fields: dict[str, Any] = {"input_size": int(kernel[0]), "hidden_size": int(hidden_kernel[0]),
                              "direction": "bidirectional" if group.wrapper == "Bidirectional" else "forward"}
    if group.layout.cell == "rnn":
        options = " or ".join(f"spec={RNNSpec(c, **fields)}" for c in ("rnn_tanh", "rnn_relu"))
        raise RNNXError(f"flax group {group.path or '(top)'}: a SimpleCell's tree does not say its activation_fn (tanh by default); pass {options}")
    return RNNSpec(group.layout.cell, **fields)


def _check_spec(group: Group, spec: RNNSpec) -> None:
    kind = "rnn" if spec.cell.startswith("rnn") else spec.cell
    where = f"flax group {group.path or '(top)'}"
    if kind != group.layout.cell:
        raise RNNXError(f"{where}: holds a {'/'.join(group.layout.classes)} of flax.{group.layout.flavor}, found spec {spec}; check spec=")
    two = group.wrapper == "Bidirectional"
    if two != (spec.direction == "bidirectional"):
        raise RNNXError(f"{where}: holds {'a Bidirectional' if two else 'one direction'}, found spec {spec}; check the spec's direction")


def from_group(group: Group, spec: RNNSpec | None) -> RNNWeights:
    """Canonical weights from one group; ``spec`` settles what the tree cannot (tanh or relu, reverse)."""
    spec = spec or infer_spec(group)
    _check_spec(group, spec)
    check_expressible(spec)
    layout, H = group.layout, spec.hidden_size
    tensors: dict[str, np.ndarray] = {}
    for cell, direction in zip(group.cells, spec.directions):
        for dense in layout.denses:
            where = f"{group.path + '/' if group.path else ''}{dense.name}"
            rows = spec.input_size if dense.side == "i" else H
            kernel = _array(cell[dense.name]["kernel"], f"{where}/kernel")
            expected = (rows, len(dense.gates) * H)
            if kernel.shape != expected:
                raise RNNXError(f"{where}/kernel: expected shape {expected} for spec {spec}, found {kernel.shape}; check spec=")
            matrix, bias_kind = ("W", "bW") if dense.side == "i" else ("R", "bR")
            for gate, part in split_gates(kernel.T, dense.gates).items():
                tensors[tensor_name(0, direction, matrix, gate)] = part
            if dense.bias:
                bias = _array(cell[dense.name]["bias"], f"{where}/bias")
                if bias.shape != (expected[1],):
                    raise RNNXError(f"{where}/bias: expected shape {(expected[1],)} for spec {spec}, found {bias.shape}; check spec=")
                for gate, part in split_gates(bias, dense.gates).items():
                    tensors[tensor_name(0, direction, bias_kind, gate)] = part
        dtype = next(iter(tensors.values())).dtype
        for dense in layout.denses:  # a side without a bias holds a zero one
            if not dense.bias:
                kind = "bW" if dense.side == "i" else "bR"
                for gate in dense.gates:
                    tensors[tensor_name(0, direction, kind, gate)] = np.zeros(H, dtype)
    return RNNWeights(spec, tensors)


def select_group(tree: Any, select: str | None, where: str = "flax tree") -> Group:
    """The one recurrent group of ``tree``, or the one at path ``select``."""
    groups = list(find_groups(tree))
    if select is not None:
        chosen = [g for g in groups if g.path == select.strip("/")]
        if not chosen:
            raise RNNXError(f"{where}: select={select!r} names no recurrent group; expected one of {[g.path for g in groups] or 'none'}")
        return chosen[0]
    if len(groups) == 1:
        return groups[0]
    if not groups:
        classes = ", ".join(dict.fromkeys(n for c in CELLS for n in c.classes))
        raise RNNXError(f"{where}: expected the parameters of a Flax {classes} (alone, as an RNN's {CELL_KEY!r} or in a Bidirectional), "
                        "found none; pass the tree the module was initialised with")
    raise RNNXError(f"{where}: holds {len(groups)} recurrent groups ({', '.join(g.path or '(top)' for g in groups)}); pass select=GROUP naming one")


def from_tree(tree: Any, spec: RNNSpec | None = None, select: str | None = None) -> RNNWeights:
    """Canonical weights from a Flax parameter tree (linen variables or params, an nnx
    state's pure dict, a bare cell, an RNN or a Bidirectional)."""
    if hasattr(tree, "to_pure_dict"):  # an nnx.State
        tree = tree.to_pure_dict()
    return from_group(select_group(tree, select), spec)
