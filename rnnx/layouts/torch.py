"""PyTorch's nn.LSTM / nn.GRU / nn.RNN and ``*Cell`` parameters: names, gate order, pack,
unpack, spec inference and what torch cannot hold (pure numpy).

PyTorch stacks gates on dim 0 of ``weight_ih_l{k}`` (gates*hidden, in) in the order of
:data:`GATE_ORDER`; ``weight_hr_l{k}`` (proj, hidden) is the LSTM projection. A module's
keys end in ``_l{layer}`` (``_reverse`` for the backward direction), a Cell's have no
suffix. A whole model's state_dict may hold several recurrent groups, named by their key
prefix. The native object here is a state_dict of numpy arrays; torch tensors are made
and read by :mod:`rnnx.formats.torch`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnx.errors import RNNXError, refuse_spec
from rnnx.spec import CELLS_BY_GATE_COUNT, RNNSpec
from rnnx.tensor_pieces import Pieces, as_pieces
from rnnx.weights import RNNWeights, split_gates, tensor_name

GATE_ORDER: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),
    "gru": ("r", "z", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
#: (torch parameter, canonical kind) in the order of a module's ``_flat_weights_names``
#: for one layer and direction; "proj" is not gate-stacked.
PARAMS = (("weight_ih", "W"), ("weight_hh", "R"), ("bias_ih", "bW"), ("bias_hh", "bR"), ("weight_hr", "proj"))
KEY = re.compile(r"^(?P<prefix>(?:.*\.)?)(?P<param>weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)(?P<suffix>_l(?P<layer>\d+)(?P<rev>_reverse)?)?$")


def suffix(layer: int, direction: str, cell_style: bool = False) -> str:
    """The key suffix of one layer and direction: ``_l1_reverse``; nothing for a Cell."""
    if cell_style:
        return ""
    return f"_l{layer}" + ("_reverse" if direction == "reverse" else "")


def keys(spec: RNNSpec, cell_style: bool = False) -> list[tuple[str, int, str, str]]:
    """(key, layer, direction, canonical kind) of every parameter a module of ``spec`` holds,
    in the order of its ``_flat_weights_names``."""
    out = []
    for layer in range(spec.num_layers):
        for direction in spec.directions:
            sfx = suffix(layer, direction, cell_style)
            for param, kind in PARAMS:
                if (kind == "proj" and not spec.proj_size) or (kind in ("bW", "bR") and not spec.bias):
                    continue
                out.append((f"{param}{sfx}", layer, direction, kind))
    return out


def refusals(spec: RNNSpec, cell: bool = False) -> list[str]:
    """Why a torch module (or, with ``cell``, a torch Cell) cannot hold ``spec`` (empty when it can)."""
    reasons = []
    if spec.peepholes:
        reasons.append("PyTorch LSTMs have no peepholes")
    if not spec.reset_after:
        reasons.append("PyTorch GRUs always reset after the recurrent product; reset_before has no torch form")
    if spec.direction == "reverse":
        reasons.append("PyTorch has no reverse-only layer")
    if not spec.uses_default_activations:
        reasons.append(f"PyTorch's recurrent modules compute with fixed sigmoid/tanh (or an RNN's tanh/relu); {spec.activation_text} has no torch form")
    if cell and (spec.num_layers != 1 or spec.num_directions != 1 or spec.proj_size):
        reasons.append("a torch Cell is one layer, one direction, no projection")
    return reasons


def check_expressible(spec: RNNSpec, cell: bool = False) -> None:
    refuse_spec(spec, refusals(spec, cell))


def to_native(weights: RNNWeights, cell: bool = False, prefix: str = "") -> dict[str, np.ndarray]:
    """The state_dict as numpy arrays (what .safetensors stores). ``cell=True`` gives nn.LSTMCell keys."""
    return {k: v.array() for k, v in native_pieces(weights, cell, prefix).items()}


def native_pieces(weights: RNNWeights, cell: bool = False, prefix: str = "") -> dict[str, Pieces]:
    """The state_dict as :class:`Pieces`: each parameter is its gates' canonical arrays in
    torch's order, one after another, so a writer streams it without assembling it."""
    spec = weights.spec
    check_expressible(spec, cell)
    order = GATE_ORDER[spec.cell]
    out: dict[str, Pieces] = {}
    for layer, direction in weights.cells():
        sfx = suffix(layer, direction, cell)
        for param, kind in PARAMS:
            if kind == "proj":
                if spec.proj_size:
                    out[f"{prefix}{param}{sfx}"] = as_pieces(weights.proj(layer, direction))  # type: ignore[arg-type]
            elif kind in ("W", "R") or spec.bias:
                out[f"{prefix}{param}{sfx}"] = Pieces.of([weights[tensor_name(layer, direction, kind, g)] for g in order])
    return out


def find_groups(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Recurrent groups by key prefix: ``{"encoder.lstm": {"weight_ih_l0": ..., ...}}``."""
    groups: dict[str, dict[str, Any]] = {}
    for key, value in state.items():
        m = KEY.match(key)
        if m:
            groups.setdefault(m["prefix"].rstrip("."), {})[key[len(m["prefix"]) :]] = value
    # A group needs its matrices; stray "weight_hh" keys of other layers are not recurrences.
    return {p: g for p, g in groups.items() if any(k.startswith("weight_ih") for k in g) and any(k.startswith("weight_hh") for k in g)}


def choose_group(groups: Mapping[str, Any], select: str | None, where: str) -> str:
    """The one group to convert: ``select`` if given, else the only one; else a listing."""
    if not groups:
        raise RNNXError(f"{where}: expected LSTM/GRU/RNN weights (weight_ih/weight_hh keys), found none")
    shown = lambda g: repr(g) if g else "'' (top level)"  # noqa: E731
    if select is not None:
        if select not in groups:
            raise RNNXError(f"{where}: no recurrent group {select!r}; groups are {', '.join(shown(g) for g in groups)}")
        return select
    if len(groups) > 1:
        raise RNNXError(f"{where}: {len(groups)} recurrent groups ({', '.join(shown(g) for g in groups)}); pass select=GROUP")
    return next(iter(groups))


def _refuse_mixed_naming(group: Mapping[str, Any], name: str) -> None:
    """nn.LSTM numbers its keys (weight_ih_l0), nn.LSTMCell does not (weight_ih); a group with both is neither."""
    plain = sorted(k for k in group if (m := KEY.match(k)) is not None and m["layer"] is None)
    numbered = sorted(k for k in group if (m := KEY.match(k)) is not None and m["layer"] is not None)
    if plain and numbered:
        raise RNNXError(f"group {name!r}: expected one key naming, found layer-numbered keys ({', '.join(numbered[:3])}) mixed with "
                        f"unnumbered ones ({', '.join(plain[:3])}); rename them all as nn.LSTM's (bias_ih_l0) or all as nn.LSTMCell's (bias_ih)")


def infer_spec(group: Mapping[str, np.ndarray], name: str) -> RNNSpec:
    """One group's spec from its keys and shapes; a plain RNN is refused naming both specs it may be."""
    cell_style = "weight_ih" in group
    _refuse_mixed_naming(group, name)
    sfx0 = "" if cell_style else "_l0"
    for key in (f"weight_ih{sfx0}", f"weight_hh{sfx0}"):
        if key not in group:
            raise RNNXError(f"group {name!r}: expected {key}, found only {sorted(group)}; pass spec=SPEC if the layer numbering is unusual")
    w_ih, w_hh = group[f"weight_ih{sfx0}"], group[f"weight_hh{sfx0}"]
    w_hr = group.get(f"weight_hr{sfx0}")
    if w_ih.ndim != 2 or w_hh.ndim != 2 or (w_hr is not None and w_hr.ndim != 2):
        raise RNNXError(f"group {name!r}: weight_ih{sfx0} and weight_hh{sfx0} must be matrices, found shapes {tuple(w_ih.shape)} and {tuple(w_hh.shape)}")
    hidden = w_hr.shape[1] if w_hr is not None else w_hh.shape[1]
    if hidden == 0 or w_hh.shape[0] % hidden:
        raise RNNXError(f"group {name!r}: weight_hh{sfx0} of shape {tuple(w_hh.shape)} is no recurrent matrix (gates*hidden, hidden)")
    n_gates = w_hh.shape[0] // hidden
    cells = CELLS_BY_GATE_COUNT.get(n_gates)
    if cells is None:
        raise RNNXError(f"group {name!r}: expected 4 (LSTM), 3 (GRU) or 1 (RNN) gates, found {n_gates} in weight_hh{sfx0}")
    layers = 1 if cell_style else 1 + max(int(KEY.match(k)["layer"]) for k in group)  # type: ignore[index]
    spec_fields = dict(
        input_size=int(w_ih.shape[1]),
        hidden_size=int(hidden),
        num_layers=layers,
        direction="bidirectional" if any(k.endswith("_reverse") for k in group) else "forward",
        bias=f"bias_ih{sfx0}" in group,
        proj_size=int(w_hr.shape[0]) if w_hr is not None else 0,
    )
    specs = [RNNSpec(cell, **spec_fields) for cell in cells]  # type: ignore[arg-type]
    if len(specs) > 1:
        raise RNNXError(
            f"group {name!r}: a plain RNN's state_dict does not say tanh or relu; "
            f"pass {' or '.join(f'spec={s}' for s in specs)}"
        )
    return specs[0]


def from_group(arrays: Mapping[str, np.ndarray], spec: RNNSpec | None, name: str) -> RNNWeights:
    """Canonical weights from one group's arrays (keys without the group's prefix)."""
    cell_style = "weight_ih" in arrays
    _refuse_mixed_naming(arrays, name)
    if spec is None:
        spec = infer_spec(arrays, name)
    else:
        check_expressible(spec, cell_style)
    order = GATE_ORDER[spec.cell]
    tensors: dict[str, np.ndarray] = {}
    expected_keys = set()
    for key, layer, direction, kind in keys(spec, cell_style):
        expected_keys.add(key)
        if key not in arrays:
            raise RNNXError(f"group {name!r}: expected {key} for spec {spec}, found nothing")
        if kind == "proj":
            tensors[tensor_name(layer, direction, "proj")] = arrays[key]
            continue
        if arrays[key].shape[0] != len(order) * spec.hidden_size:
            raise RNNXError(
                f"tensor {key}: expected {len(order)}*{spec.hidden_size} rows for spec {spec}, "
                f"found shape {tuple(arrays[key].shape)}"
            )
        for gate, part in split_gates(arrays[key], order).items():
            tensors[tensor_name(layer, direction, kind, gate)] = part
    extra = sorted(set(arrays) - expected_keys)
    if extra:
        raise RNNXError(f"group {name!r}: {extra[0]} is not part of spec {spec}; check layers, bias, direction and proj")
    return RNNWeights(spec, tensors)


def from_native(state: Mapping[str, np.ndarray], spec: RNNSpec | None = None, select: str | None = None) -> RNNWeights:
    """Canonical weights from a state_dict of arrays (a module's, a cell's, or a whole model's with ``select``)."""
    groups = find_groups(state)
    name = choose_group(groups, select, "state_dict")
    return from_group({k: np.asarray(v) for k, v in groups[name].items()}, spec, name)
