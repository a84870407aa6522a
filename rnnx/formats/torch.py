"""``torch``: state_dicts of nn.LSTM / nn.GRU / nn.RNN and their Cell variants.

PyTorch stacks gates on dim 0 of ``weight_ih_l{k}`` (gates*hidden, in) in the order of
:data:`GATE_ORDER`; ``weight_hr_l{k}`` (proj, hidden) is the LSTM projection. Files are
.pt/.pth (loaded weights-only: a pickle's code never runs) or .safetensors. A whole
model's state_dict may hold several recurrent groups, named by their key prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits
from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, check_archive, library_write, read_safetensors, require_file, safetensors_metadata, write_safetensors
from rnnx.formats.registry import Format, register
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights, split_gates, tensor_name

GATE_ORDER: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),
    "gru": ("r", "z", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
# (torch parameter, canonical kind); "proj" is not gate-stacked.
_PARAMS = (("weight_ih", "W"), ("weight_hh", "R"), ("bias_ih", "bW"), ("bias_hh", "bR"), ("weight_hr", "proj"))
_KEY = re.compile(r"^(?P<prefix>(?:.*\.)?)(?P<param>weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)(?P<suffix>_l(?P<layer>\d+)(?P<rev>_reverse)?)?$")
_CELLS_BY_GATES = {4: "lstm", 3: "gru", 1: "rnn_tanh"}


def _suffix(layer: int, direction: str, cell_style: bool) -> str:
    if cell_style:
        return ""
    return f"_l{layer}" + ("_reverse" if direction == "reverse" else "")


def _check_expressible(spec: RNNSpec, cell_style: bool) -> None:
    if spec.peepholes:
        raise RNNXError(f"spec {spec}: PyTorch LSTMs have no peepholes; convert to onnx or rnnx instead")
    if not spec.reset_after:
        raise RNNXError(f"spec {spec}: PyTorch GRUs always reset after the recurrent product; reset_before has no torch form")
    if spec.direction == "reverse":
        raise RNNXError(f"spec {spec}: PyTorch has no reverse-only layer; use bidirectional or forward")
    if cell_style and (spec.num_layers != 1 or spec.num_directions != 1 or spec.proj_size):
        raise RNNXError(f"spec {spec}: a torch Cell is one layer, one direction, no projection")


def to_arrays(weights: RNNWeights, cell: bool = False, prefix: str = "") -> dict[str, np.ndarray]:
    """The state_dict as numpy arrays (what .safetensors stores). ``cell=True`` gives nn.LSTMCell keys."""
    spec = weights.spec
    _check_expressible(spec, cell)
    order = GATE_ORDER[spec.cell]
    out: dict[str, np.ndarray] = {}
    for layer, direction in weights.cells():
        sfx = _suffix(layer, direction, cell)
        for param, kind in _PARAMS:
            if kind == "proj":
                if spec.proj_size:
                    out[f"{prefix}{param}{sfx}"] = weights.proj(layer, direction)  # type: ignore[assignment]
            elif kind in ("W", "R") or spec.bias:
                out[f"{prefix}{param}{sfx}"] = weights.stacked(layer, direction, kind, order)
    return out


def to_native(weights: RNNWeights, cell: bool = False, prefix: str = "") -> dict[str, Any]:
    """A state_dict of torch tensors, ready for ``module.load_state_dict``."""
    torch = _import_torch("building a torch state_dict")
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in to_arrays(weights, cell, prefix).items()}


def _as_numpy(value: Any, key: str = "") -> np.ndarray:
    if hasattr(value, "detach"):
        what = f"tensor {key!r}" if key else "a tensor"
        if getattr(value, "is_nested", False):
            raise RNNXError(f"{what} is a nested tensor; rnnx reads dense floating-point weights")
        if getattr(value, "is_meta", False):
            raise RNNXError(f"{what} is a meta tensor, which holds no data; save the checkpoint from a model with real weights")
        if getattr(value, "is_quantized", False) or str(getattr(value, "layout", "torch.strided")) != "torch.strided":
            raise RNNXError(f"{what} is stored {'quantized' if value.is_quantized else 'sparse'}; rnnx reads dense floating-point weights: "
                            "dequantize or densify them first")
        if not value.dtype.is_floating_point or "float8" in str(value.dtype):
            raise RNNXError(f"{what} holds {str(value.dtype).replace('torch.', '')}; rnnx reads float32/16/64 and bfloat16 weights")
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16; widening is exact
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def find_groups(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Recurrent groups by key prefix: ``{"encoder.lstm": {"weight_ih_l0": ..., ...}}``."""
    groups: dict[str, dict[str, Any]] = {}
    for key, value in state.items():
        m = _KEY.match(key)
        if m:
            groups.setdefault(m["prefix"].rstrip("."), {})[key[len(m["prefix"]) :]] = value
    # A group needs its matrices; stray "weight_hh" keys of other layers are not recurrences.
    return {p: g for p, g in groups.items() if any(k.startswith("weight_ih") for k in g) and any(k.startswith("weight_hh") for k in g)}


def _infer_spec(group: Mapping[str, np.ndarray], name: str) -> RNNSpec:
    cell_style = "weight_ih" in group
    sfx0 = "" if cell_style else "_l0"
    for key in (f"weight_ih{sfx0}", f"weight_hh{sfx0}"):
        if key not in group:
            raise RNNXError(f"group {name!r}: expected {key}, found only {sorted(group)}; pass --spec if the layer numbering is unusual")
    w_ih, w_hh = group[f"weight_ih{sfx0}"], group[f"weight_hh{sfx0}"]
    w_hr = group.get(f"weight_hr{sfx0}")
    if w_ih.ndim != 2 or w_hh.ndim != 2 or (w_hr is not None and w_hr.ndim != 2):
        raise RNNXError(f"group {name!r}: weight_ih{sfx0} and weight_hh{sfx0} must be matrices, found shapes {tuple(w_ih.shape)} and {tuple(w_hh.shape)}")
    hidden = w_hr.shape[1] if w_hr is not None else w_hh.shape[1]
    if hidden == 0 or w_hh.shape[0] % hidden:
        raise RNNXError(f"group {name!r}: weight_hh{sfx0} of shape {tuple(w_hh.shape)} is no recurrent matrix (gates*hidden, hidden)")
    n_gates = w_hh.shape[0] // hidden
    if n_gates not in _CELLS_BY_GATES:
        raise RNNXError(f"group {name!r}: expected 4 (LSTM), 3 (GRU) or 1 (RNN) gates, found {n_gates} in weight_hh{sfx0}")
    cell = _CELLS_BY_GATES[n_gates]
    layers = 1 if cell_style else 1 + max(int(_KEY.match(k)["layer"]) for k in group)  # type: ignore[index]
    spec_fields = dict(
        cell=cell,
        input_size=int(w_ih.shape[1]),
        hidden_size=int(hidden),
        num_layers=layers,
        direction="bidirectional" if any(k.endswith("_reverse") for k in group) else "forward",
        bias=f"bias_ih{sfx0}" in group,
        proj_size=int(w_hr.shape[0]) if w_hr is not None else 0,
    )
    if cell == "rnn_tanh":
        tanh, relu = RNNSpec(**spec_fields), RNNSpec(**{**spec_fields, "cell": "rnn_relu"})  # type: ignore[arg-type]
        raise RNNXError(
            f"group {name!r}: a plain RNN's state_dict does not say tanh or relu; "
            f"pass --spec {tanh} or --spec {relu}"
        )
    return RNNSpec(**spec_fields)  # type: ignore[arg-type]


def _group_to_weights(group: Mapping[str, Any], spec: RNNSpec | None, name: str) -> RNNWeights:
    arrays = {k: _as_numpy(v, f"{name}.{k}" if name else k) for k, v in group.items()}
    cell_style = "weight_ih" in arrays
    if spec is None:
        spec = _infer_spec(arrays, name)
    else:
        _check_expressible(spec, cell_style)
    order = GATE_ORDER[spec.cell]
    tensors: dict[str, np.ndarray] = {}
    expected_keys = set()
    for layer in range(spec.num_layers):
        for direction in spec.directions:
            sfx = _suffix(layer, direction, cell_style)
            for param, kind in _PARAMS:
                key = f"{param}{sfx}"
                if kind == "proj":
                    if not spec.proj_size:
                        continue
                    expected_keys.add(key)
                    if key not in arrays:
                        raise RNNXError(f"group {name!r}: expected {key} for spec {spec}, found nothing")
                    tensors[tensor_name(layer, direction, "proj")] = arrays[key]
                    continue
                if kind in ("bW", "bR") and not spec.bias:
                    continue
                expected_keys.add(key)
                if key not in arrays:
                    raise RNNXError(f"group {name!r}: expected {key} for spec {spec}, found nothing")
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


def from_native(state: Mapping[str, Any], spec: RNNSpec | None = None, select: str | None = None) -> RNNWeights:
    """Canonical weights from a state_dict (a module's, a cell's, or a whole model's with ``select``)."""
    groups = find_groups(state)
    name = choose_group(groups, select, "state_dict")
    return _group_to_weights(groups[name], spec, name)


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
        raise RNNXError(f"{where}: {len(groups)} recurrent groups ({', '.join(shown(g) for g in groups)}); pass --select GROUP")
    return next(iter(groups))


def _import_torch(why: str) -> Any:
    try:
        import torch
    except ImportError:
        raise RNNXError(f"{why} needs PyTorch, which is not installed; pip install 'rnnx[torch]'") from None
    return torch


_MAX_NESTING = 64


def _flatten(obj: Any) -> dict[str, Any]:
    """Nested checkpoints ({"model": {...}, "optimizer": ...}) flattened to dotted keys."""
    flat: dict[str, Any] = {}
    todo: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while todo:  # a loop, not recursion: a hostile file may nest thousands deep
        item, prefix, depth = todo.pop()
        if isinstance(item, Mapping):
            if depth >= _MAX_NESTING:
                raise RNNXError(f"the checkpoint nests dictionaries over {_MAX_NESTING} deep at {prefix[:80]!r}; the file is damaged or not a state_dict")
            todo.extend((value, f"{prefix}{key}.", depth + 1) for key, value in reversed(list(item.items())))
        elif hasattr(item, "detach") or isinstance(item, np.ndarray):
            flat[prefix[:-1]] = item
    return flat


def load_state(path: Path) -> dict[str, Any]:
    """The flattened tensors of a .pt/.pth (weights-only) or .safetensors file."""
    path = require_file(path)
    if path.suffix.lower() == ".safetensors":
        return dict(read_safetensors(path)[0])
    torch = _import_torch(f"reading {path.suffix}")
    check_archive(path)
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RNNXError(
            f"{path}: cannot load as weights only ({first[:200]}); rnnx never runs code inside a pickle: "
            "save a plain state_dict (torch.save(model.state_dict(), ...)) or a .safetensors file"
        ) from None
    flat = _flatten(obj)
    # A tensor may be a view far larger than its storage (an expanded 0-stride tensor): what the
    # tensors will take once made dense is checked against the budget, not the file's size.
    claimed = sum(_dense_bytes(v) for v in flat.values()) * limits.WORKING_COPIES
    limits.check_claim(f"{path}: converting its tensors (made dense: expanded views take their full size)", claimed, path.stat().st_size)
    return flat


def _dense_bytes(value: Any) -> int:
    try:
        return int(value.numel()) * int(value.element_size()) if hasattr(value, "numel") else int(np.asarray(value).nbytes)
    except (RuntimeError, TypeError, ValueError):  # nested and other tensors without one size: refused later, one by one
        return 0


def groups(path: Path) -> list[str]:
    return list(find_groups(load_state(path)))


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    state = load_state(path)
    groups_ = find_groups(state)
    name = choose_group(groups_, select, str(path))
    return _group_to_weights(groups_[name], spec, name)


def write(weights: RNNWeights, path: Path) -> None:
    arrays = to_arrays(weights)
    if path.suffix.lower() == ".safetensors":
        write_safetensors(path, arrays, {"format": "torch", "spec": str(weights.spec)})
        return
    torch = _import_torch(f"writing {path.suffix}")
    with atomic_output(path) as tmp, library_write(path):
        torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}, str(tmp))


def sniff(path: Path) -> bool:
    if path.suffix.lower() != ".safetensors":
        return True
    return safetensors_metadata(path).get("format", "torch") == "torch"


register(
    Format(
        name="torch",
        to_native=to_native,
        from_native=lambda obj, spec=None: from_native(obj, spec),
        read=read,
        write=write,
        groups=groups,
        extensions=(".pt", ".pth", ".safetensors"),
        sniff=sniff,
        description="PyTorch nn.LSTM/GRU/RNN and Cell state_dicts (.pt/.pth weights-only, .safetensors)",
    )
)
