"""``keras``: Keras 3 LSTM / GRU / SimpleRNN weights, Bidirectional included.

Per layer ``get_weights()`` is [kernel (in, gates*units), recurrent_kernel (units,
gates*units), bias]: matrices transposed relative to ours, gates in :data:`GATE_ORDER`
along the last axis. Biases: LSTM and SimpleRNN one (gates*units,), read as the input bias
with a zero recurrent bias and written as their sum; GRU ``reset_after=True`` (2,
3*units) = [input; recurrent]; GRU ``reset_after=False`` one (3*units,). A Bidirectional
layer lists its forward layer's weights, then its backward layer's; a layer with
``go_backwards=True`` is our ``reverse``. The natural object is the flat list of arrays,
layer after layer.

Files: ``.keras`` (its config.json says each layer's class, activation, reset mode,
direction and bias) and ``.weights.h5`` (weights only: a plain layer is taken to run
forward, SimpleRNN needs ``--spec`` for tanh or relu). Both are read with h5py alone;
Keras is never imported and no model code runs. rnnx does not write Keras files: load
the arrays into your layer with ``layer.set_weights(rnnx.to_format(w, "keras"))``.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.fileio import require_file
from rnnx.formats.registry import Format, register
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights, split_gates, tensor_name

GATE_ORDER: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),  # Keras calls g "c"
    "gru": ("z", "r", "n"),  # Keras calls n "h"
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
_CELLS_BY_GATES = {4: "lstm", 3: "gru", 1: "rnn"}
_CLASSES = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "rnn"}


def _check_expressible(spec: RNNSpec) -> None:
    if spec.proj_size:
        raise RNNXError(f"spec {spec}: Keras LSTMs have no projection")
    if spec.peepholes:
        raise RNNXError(f"spec {spec}: Keras LSTMs have no peepholes")


def _arrays_per_cell(spec: RNNSpec) -> int:
    return 3 if spec.bias else 2


def to_native(weights: RNNWeights) -> list[np.ndarray]:
    spec = weights.spec
    _check_expressible(spec)
    order = GATE_ORDER[spec.cell]
    out: list[np.ndarray] = []
    for layer, d in weights.cells():
        out.append(weights.stacked(layer, d, "W", order).T)
        out.append(weights.stacked(layer, d, "R", order).T)
        if spec.bias:
            bw, br = weights.stacked(layer, d, "bW", order), weights.stacked(layer, d, "bR", order)
            if spec.cell == "gru" and spec.reset_after:
                out.append(np.stack([bw, br]))
            else:
                out.append(bw + br)
    return out


def _infer_spec(arrays: list[np.ndarray]) -> RNNSpec:
    if len(arrays) not in (2, 3):
        raise RNNXError(f"Keras weights: {len(arrays)} arrays cannot be read without a spec (one layer has 2 or 3); pass --spec")
    kernel, recurrent = np.asarray(arrays[0]), np.asarray(arrays[1])
    if kernel.ndim != 2 or recurrent.ndim != 2 or recurrent.shape[1] % max(recurrent.shape[0], 1):
        raise RNNXError(f"Keras weights: expected kernel (in, gates*units) and recurrent (units, gates*units), found {kernel.shape} and {recurrent.shape}")
    units = recurrent.shape[0]
    family = _CELLS_BY_GATES.get(recurrent.shape[1] // units)
    if family is None:
        raise RNNXError(f"Keras weights: expected 4 (LSTM), 3 (GRU) or 1 (SimpleRNN) gates, found {recurrent.shape[1] // units}")
    bias = len(arrays) == 3
    fields = dict(input_size=int(kernel.shape[0]), hidden_size=int(units), bias=bias)
    if family == "rnn":
        tanh, relu = RNNSpec("rnn_tanh", **fields), RNNSpec("rnn_relu", **fields)  # type: ignore[arg-type]
        raise RNNXError(f"Keras SimpleRNN weights do not say tanh or relu; pass --spec {tanh} or --spec {relu}")
    reset_after = not (family == "gru" and bias and np.asarray(arrays[2]).ndim == 1)
    return RNNSpec(family, reset_after=reset_after, **fields)  # type: ignore[arg-type]


def from_native(arrays: list[Any], spec: RNNSpec | None = None) -> RNNWeights:
    arrays = [np.asarray(a) for a in arrays]
    spec = spec or _infer_spec(arrays)
    _check_expressible(spec)
    order = GATE_ORDER[spec.cell]
    per_cell = _arrays_per_cell(spec)
    cells = [(layer, d) for layer in range(spec.num_layers) for d in spec.directions]
    if len(arrays) != per_cell * len(cells):
        raise RNNXError(f"Keras weights: expected {per_cell * len(cells)} arrays for spec {spec}, found {len(arrays)}; check --spec")
    H, G = spec.hidden_size, len(order)
    tensors: dict[str, np.ndarray] = {}
    for k, (layer, d) in enumerate(cells):
        kernel, recurrent, *rest = arrays[k * per_cell : (k + 1) * per_cell]
        where = f"layer {layer} {d}"
        for name, array, shape in (("kernel", kernel, (spec.layer_input_size(layer), G * H)), ("recurrent_kernel", recurrent, (H, G * H))):
            if array.shape != shape:
                raise RNNXError(f"tensor {name} of {where}: expected shape {shape} for spec {spec}, found {array.shape}")
        for kind, array in (("W", kernel.T), ("R", recurrent.T)):
            for gate, part in split_gates(array, order).items():
                tensors[tensor_name(layer, d, kind, gate)] = part
        if spec.bias:
            (bias,) = rest
            two_rows = spec.cell == "gru" and spec.reset_after
            expected = (2, G * H) if two_rows else (G * H,)
            if bias.shape != expected:
                raise RNNXError(f"tensor bias of {where}: expected shape {expected} for spec {spec}, found {bias.shape}")
            bw, br = (bias[0], bias[1]) if two_rows else (bias, np.zeros_like(bias))
            for kind, array in (("bW", bw), ("bR", br)):
                for gate, part in split_gates(array, order).items():
                    tensors[tensor_name(layer, d, kind, gate)] = part
    return RNNWeights(spec, tensors)


# --- files --------------------------------------------------------------------------------


def _h5_bytes(path: Path) -> tuple[bytes, dict[str, Any] | None]:
    """The weights HDF5 and, for .keras archives, the parsed config.json."""
    path = require_file(path)
    if path.suffix.lower() == ".keras":
        try:
            with zipfile.ZipFile(path) as archive:
                config = json.loads(archive.read("config.json"))
                return archive.read("model.weights.h5"), config
        except Exception as exc:  # noqa: BLE001  zipfile/json parsing only: any failure means a damaged archive
            raise RNNXError(f"{path}: not a readable .keras archive ({exc}); expected config.json and model.weights.h5 inside") from None
    return path.read_bytes(), None


def _vars(group: Any) -> list[np.ndarray]:
    vars_ = group["vars"] if "vars" in group else None
    if vars_ is None:
        return []
    return [np.asarray(vars_[k]) for k in sorted(vars_, key=int)]


def _snake(name: str) -> str:
    """Keras's own class-name-to-group-name rule: LSTM -> lstm, SimpleRNN -> simple_rnn."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _config_layers(config: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """h5 group name -> layer config: Keras names groups by class, numbering repeats in order."""
    if not config:
        return {}
    layers = config.get("config", {}).get("layers", [])
    seen: dict[str, int] = {}
    out = {}
    for layer in layers:
        base = _snake(layer.get("class_name", ""))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out[base if n == 0 else f"{base}_{n}"] = layer
    return out


def _find_groups(path: Path) -> dict[str, tuple[list[np.ndarray], RNNSpec | None, str]]:
    """Recurrent layers of the file: name -> (arrays in get_weights order, spec if known, user's layer name)."""
    import h5py

    raw, config = _h5_bytes(path)
    configs = _config_layers(config)
    found: dict[str, tuple[list[np.ndarray], RNNSpec | None, str]] = {}
    try:
        with h5py.File(io.BytesIO(raw), "r") as f:
            layers = f["layers"] if "layers" in f else f
            for name in layers:
                group = layers[name]
                cfg = configs.get(name, {})
                if "forward_layer" in group and "backward_layer" in group:
                    arrays = _vars(group["forward_layer"]["cell"]) + _vars(group["backward_layer"]["cell"])
                    inner = cfg.get("config", {}).get("layer", {}).get("config", {})
                    cls = cfg.get("config", {}).get("layer", {}).get("class_name")
                    bidirectional = True
                elif "cell" in group:
                    arrays = _vars(group["cell"])
                    inner = cfg.get("config", {})
                    cls = cfg.get("class_name")
                    bidirectional = False
                else:
                    continue
                if len(arrays) not in (2, 3, 4, 6):
                    continue
                spec = _spec_from_config(cls, inner, arrays, bidirectional) if cfg else None
                found[cfg.get("config", {}).get("name", name)] = (arrays, spec, name)
    except RNNXError:
        raise
    except Exception as exc:  # noqa: BLE001  h5py raises many types for a damaged file; none is a bug of ours
        raise RNNXError(f"{path}: cannot read the weights as HDF5 ({' '.join(str(exc).split())[:160]}); the file is damaged or not Keras 3") from None
    return found


def _spec_from_config(cls: str | None, cfg: dict[str, Any], arrays: list[np.ndarray], bidirectional: bool) -> RNNSpec | None:
    family = _CLASSES.get(cls or "")
    if family is None:
        return None
    if family == "rnn":
        cell = {"tanh": "rnn_tanh", "relu": "rnn_relu"}.get(cfg.get("activation", "tanh"))
        if cell is None:
            raise RNNXError(f"Keras SimpleRNN {cfg.get('name')!r}: activation {cfg.get('activation')!r} has no canonical form (tanh or relu)")
    else:
        cell = family
        if cfg.get("activation", "tanh") != "tanh" or cfg.get("recurrent_activation", "sigmoid") != "sigmoid":
            raise RNNXError(f"Keras {cls} {cfg.get('name')!r}: non-default activations have no canonical form")
    direction = "bidirectional" if bidirectional else ("reverse" if cfg.get("go_backwards") else "forward")
    return RNNSpec(
        cell=cell,
        input_size=int(arrays[0].shape[0]),
        hidden_size=int(arrays[1].shape[0]),
        direction=direction,
        bias=bool(cfg.get("use_bias", True)),
        reset_after=bool(cfg.get("reset_after", True)) if cell == "gru" else True,
    )


def groups(path: Path) -> list[str]:
    return list(_find_groups(path))


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    from rnnx.formats.torch import choose_group

    found = _find_groups(path)
    name = choose_group(found, select, str(path))
    arrays, file_spec, _ = found[name]
    if spec is None and file_spec is None and len(arrays) in (4, 6):
        single = _infer_spec(arrays[: len(arrays) // 2])
        spec = single.with_(direction="bidirectional")
    return from_native(arrays, spec or file_spec)


register(
    Format(
        name="keras",
        to_native=to_native,
        from_native=from_native,
        read=read,
        groups=groups,
        extensions=(".keras", ".weights.h5"),
        description="Keras 3 LSTM/GRU/SimpleRNN (get_weights() arrays; .keras and .weights.h5 read with h5py)",
    )
)
