"""``keras_h5``: Keras's legacy HDF5 files (``.h5``, ``.hdf5``), read with h5py alone.

Keras 2 (tf.keras, tf_keras, and Keras 3's ``model.save("x.h5")``) writes two kinds:

* a whole model (``model.save("x.h5")``): root attributes ``model_config`` (JSON: each
  layer's class, activations, reset mode, direction, bias), ``keras_version`` and
  ``backend``; the weights under the group ``model_weights``;
* weights alone (``model.save_weights("x.h5")``): the weights at the root, no config.

Either way the weights group lists its layers in the attribute ``layer_names``, and each
layer's group lists its arrays, in ``get_weights()`` order, in ``weight_names``; the arrays
sit at those paths inside the layer's group. rnnx reads these lists, the config and the
arrays: Keras is never imported and no model code runs.

Read: LSTM, GRU (either reset mode), SimpleRNN, ``keras.layers.RNN`` around their cells,
and Keras 2's CuDNNLSTM and CuDNNGRU (cuDNN's own blocks, see :mod:`rnnx.layouts.keras`),
each alone or in a Bidirectional wrapper. Each recurrent layer is a group named by its
layer name, for ``select=``; inside a nested model, by the model's name and the path of
its arrays.

A whole model says each layer's activations. ``hard_sigmoid`` is read as the writer's Keras
defined it, from the file's ``keras_version``: 0.2x+0.5 in Keras 2 (ONNX HardSigmoid,
alpha 0.2), x/6+0.5 in Keras 3 (alpha 1/6); a file whose ``keras_version`` was removed
cannot say which, so a layer using hard_sigmoid there is read only with ``spec=`` stating one.
Every other activation means the same in both. A weights-only file records neither the
activations (Keras 2's default recurrent activation was hard_sigmoid before Keras 2.3,
sigmoid after) nor ``go_backwards``, so ``spec=`` must say them; a CuDNN layer's math is
fixed and its 2*gates*units bias marks it, so it is read without one, taken to run forward
as the Keras 3 reader does (pass ``spec=...,reverse`` otherwise).

Untrusted files: only hard links inside the file are followed (an external or soft link is
refused); arrays stored in other files (external storage, virtual datasets) are refused;
each array's declared size is checked against the file's before it is read; string lists,
the config's size and its nesting are bounded.

One module, though long, because it is one idea: Keras 2's HDF5 layout read from an untrusted
file. Finding a layer (its model config, its weight names, nested models), reading its arrays
and bounding every read share the open file, its h5py handles and its limits; the gate orders
and layouts it maps are :mod:`rnnx.layouts.keras`'s, shared with :mod:`rnnx.formats.keras`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.fileio import require_file
from rnnx.formats.hdf5 import Budget, import_h5py
from rnnx.formats.registry import Format, get, register_module
from rnnx.layouts import keras as layout
from rnnx.spec import Activation, RNNSpec
from rnnx.weights import RNNWeights

FORMAT = "keras_h5"
EXTENSIONS = (".h5", ".hdf5")
# Limits for untrusted files: names per list, characters per name, components per array path,
# the config's size in characters and the depth of nested models searched in it, and how far
# the arrays together may claim to exceed their file (Keras stores raw data).
_MAX_NAMES = 100_000
_MAX_NAME = 4096
_MAX_PATH_PARTS = 64
_MAX_CONFIG = 64 * 1024 * 1024
_MAX_MODEL_DEPTH = 32
_MODEL_CLASSES = ("Sequential", "Functional", "Model")
# Array names end in TensorFlow's output index (kernel:0); Keras 3's legacy writer leaves it off.
_INDEX = re.compile(r":\d+$")


def _damaged(path: Path, exc: BaseException) -> RNNXError:
    return RNNXError(f"{path}: cannot read it as HDF5 ({one_line(exc, DETAIL_CHARS)}); the file is damaged or not a Keras .h5 file")


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[tuple[Any, Any, int]]:
    """h5py, the file open for reading, and its size in bytes."""
    h5py = import_h5py(f"reading {path.name}")
    path = require_file(path)
    try:
        h5 = h5py.File(str(path), "r")
    except Exception as exc:  # noqa: BLE001  h5py raises OSError and others for a damaged file
        raise _damaged(path, exc) from None
    try:
        yield h5py, h5, path.stat().st_size
    except RNNXError as exc:  # named by the file, once
        message = str(exc)
        raise RNNXError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    except Exception as exc:  # noqa: BLE001  h5py raises many types for a damaged file; none is a bug of ours
        raise _damaged(path, exc) from None
    finally:
        with contextlib.suppress(Exception):
            h5.close()


# --- the file's structure, followed inside the file only -------------------------------------


def _node(group: Any, name: str, h5py: Any, where: str) -> Any:
    """``group/name`` through hard links only, or None when absent: an external link would
    reach another file and a soft link could loop."""
    parts = name.split("/")
    if len(parts) > _MAX_PATH_PARTS or any(p in ("", ".", "..") for p in parts):
        raise RNNXError(f"{where}: array path {name[:80]!r}: expected at most {_MAX_PATH_PARTS} plain names joined by /; the file is damaged")
    node = group
    for part in parts:
        if not isinstance(node, h5py.Group):
            return None
        link = node.get(part, default=None, getlink=True)
        if link is None:
            return None
        if isinstance(link, h5py.ExternalLink):
            raise RNNXError(f"{where}: {name!r} links to another file ({link.filename}); rnnx reads only data stored inside the file itself")
        if not isinstance(link, h5py.HardLink):
            raise RNNXError(f"{where}: {name!r} is a {type(link).__name__}; Keras writes only plain groups and arrays, so the file was changed after Keras wrote it")
        node = node[part]
    return node


def _decoded(value: Any, where: str) -> str:
    if isinstance(value, bytes | np.bytes_):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise RNNXError(f"{where}: expected UTF-8 text, found undecodable bytes; the file is damaged") from None
    if isinstance(value, str):
        return value
    raise RNNXError(f"{where}: expected text, found {type(value).__name__}; the file is damaged or not Keras's")


def _text_attr(obj: Any, name: str, h5py: Any, where: str, limit: int = _MAX_NAME) -> str | None:
    """A scalar string attribute, or None when absent."""
    if name not in obj.attrs:
        return None
    attr = obj.attrs.get_id(name)
    if attr.shape != () or h5py.check_string_dtype(attr.dtype) is None:
        raise RNNXError(f"{where}: attribute {name}: expected a string, found {attr.dtype} of shape {attr.shape}; the file is damaged or not Keras's")
    text = _decoded(obj.attrs[name], f"{where}: attribute {name}")
    if len(text) > limit:
        raise RNNXError(f"{where}: attribute {name}: {len(text)} characters, expected at most {limit}; the file is damaged")
    return text


def _name_list(obj: Any, name: str, h5py: Any, where: str) -> list[str] | None:
    """A list-of-names attribute (``layer_names``, ``weight_names``), or None when absent.
    Keras splits a list too long for an HDF5 object header into ``name0``, ``name1``, ..."""
    keys = [name] if name in obj.attrs else []
    while not keys or keys[-1] != name:  # the chunked form
        key = f"{name}{len(keys)}"
        if key not in obj.attrs:
            break
        keys.append(key)
        if len(keys) > _MAX_NAMES:
            raise RNNXError(f"{where}: more than {_MAX_NAMES} attributes {name}N; the file is damaged")
    if not keys:
        return None
    names: list[str] = []
    for key in keys:
        attr = obj.attrs.get_id(key)
        if attr.shape is None or len(attr.shape) != 1:
            raise RNNXError(f"{where}: attribute {key}: expected a list of names, found shape {attr.shape}; the file is damaged or not Keras's")
        if attr.shape[0] == 0:
            continue  # Keras writes an empty list as an empty float array
        if h5py.check_string_dtype(attr.dtype) is None:
            raise RNNXError(f"{where}: attribute {key}: expected names (strings), found {attr.dtype}; the file is damaged or not Keras's")
        if len(names) + attr.shape[0] > _MAX_NAMES:
            raise RNNXError(f"{where}: attribute {name}: more than {_MAX_NAMES} names; the file is damaged")
        for value in obj.attrs[key]:
            text = _decoded(value, f"{where}: attribute {key}")
            if len(text) > _MAX_NAME:
                raise RNNXError(f"{where}: attribute {key}: a name of {len(text)} characters, expected at most {_MAX_NAME}; the file is damaged")
            names.append(text)
    return names


def _weights_root(h5: Any, h5py: Any) -> Any | None:
    """The group that lists the layers: ``model_weights`` in a whole model, the root in a weights file."""
    for group in (_node(h5, "model_weights", h5py, "model_weights") if "model_weights" in h5 else None, h5):
        if isinstance(group, h5py.Group) and any(k in group.attrs for k in ("layer_names", "layer_names0")):
            return group
    return None


def is_legacy_file(path: Path) -> bool:
    """Whether ``path`` is an HDF5 file in Keras's legacy layout (a ``layer_names`` list)."""
    try:
        with _opened(Path(path)) as (h5py, h5, _):
            return _weights_root(h5, h5py) is not None
    except Exception:  # noqa: BLE001  a file that cannot be opened or followed is not claimed; its reader says why
        return False


def _keras_major(h5: Any, root: Any, h5py: Any) -> int | None:
    """The writer's Keras major version, from ``keras_version``; None when the file has none
    (Keras's own loader then reads it as Keras 1's, but Keras 1 wrote per-gate arrays: a
    file with kernel/recurrent_kernel arrays is Keras 2's or Keras 3's with the version removed)."""
    text = _text_attr(h5, "keras_version", h5py, "file") or _text_attr(root, "keras_version", h5py, "model_weights")
    if text is None:
        return None
    found = re.match(r"\s*(\d+)", text)
    return int(found.group(1)) if found else 1


def _model_config(h5: Any, h5py: Any) -> dict[str, Any] | None:
    text = _text_attr(h5, "model_config", h5py, "file", limit=_MAX_CONFIG)
    if text is None:
        return None
    try:
        config = json.loads(text)
    except RecursionError:
        raise RNNXError("attribute model_config: JSON nested too deeply to read; the file is damaged") from None
    except ValueError as exc:
        raise RNNXError(f"attribute model_config: expected Keras's JSON model config, found text that is not JSON ({one_line(exc, DETAIL_CHARS)}); the file is damaged") from None
    if not isinstance(config, dict):
        raise RNNXError(f"attribute model_config: expected a JSON object (Keras's model config), found {type(config).__name__}; the file is damaged")
    return config


# --- recurrent layers ------------------------------------------------------------------------


def _sublayers(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """A model config's layers: ``config.layers``, or (Keras 2.0/2.1 Sequential) ``config`` itself."""
    conf = cfg.get("config")
    listed = conf if isinstance(conf, list) else layout.config_dict(conf).get("layers")
    return [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []


@dataclass
class _Layer:
    """One recurrent layer (or Bidirectional pair) in a file."""

    name: str  # for select=
    arrays: list[str]  # HDF5 paths of its arrays: kernel, recurrent_kernel[, bias], forward then backward
    config: dict[str, Any] | None  # its entry in model_config, Bidirectional wrapper included


def _cells(group: Any, weight_names: list[str], h5py: Any, where: str) -> list[tuple[str, list[str]]]:
    """(owner path, array paths) of each run of kernel, recurrent_kernel[, bias] matrices in ``weight_names``."""
    runs: list[tuple[str, list[str], list[str]]] = []
    for name in weight_names:
        owner, _, base = name.rpartition("/")
        base = _INDEX.sub("", base)
        if runs and runs[-1][0] == owner:
            runs[-1][1].append(base)
            runs[-1][2].append(name)
        else:
            runs.append((owner, [base], [name]))
    cells = []
    for owner, bases, names in runs:
        if bases not in (["kernel", "recurrent_kernel"], ["kernel", "recurrent_kernel", "bias"]):
            continue
        nodes = [_node(group, n, h5py, where) for n in names]
        for n, node in zip(names, nodes):
            if not isinstance(node, h5py.Dataset):
                raise RNNXError(f"{where}: weight_names lists {n!r}, found {'nothing' if node is None else 'a group'} there; the file is damaged")
        if nodes[0].ndim == 2 and nodes[1].ndim == 2:  # not ConvLSTM's kernels
            cells.append((owner, [f"{group.name}/{n}".lstrip("/") for n in names]))
    return cells


def _pair(first: str, second: str) -> str | None:
    """The owner path of a Bidirectional pair (its ``forward_``/``backward_`` part dropped), or None."""
    a, b = first.split("/"), second.split("/")
    if len(a) != len(b):
        return None
    differ = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(differ) == 1 and a[differ[0]].startswith("forward_") and b[differ[0]].startswith("backward_"):
        return "/".join(a[: differ[0]])
    return None


def _config_of(cfg: dict[str, Any] | None, owner: str, depth: int = 0) -> dict[str, Any] | None:
    """The config entry of the layer owning ``owner`` inside a nested model's config."""
    if cfg is None or depth > _MAX_MODEL_DEPTH or cfg.get("class_name") not in _MODEL_CLASSES:
        return cfg
    parts = owner.split("/")
    for sub in _sublayers(cfg):
        if layout.layer_name(sub) in parts:
            return _config_of(sub, owner, depth + 1)
    return None


def _nested_name(layer: str, owner: str) -> str:
    """``model/layer`` for a layer inside a nested model: its arrays' path without the model's
    own name in front nor the cell (``lstm_cell``) behind."""
    parts = owner.split("/")
    if parts and parts[0] == layer:
        parts = parts[1:]
    if len(parts) > 1 and parts[-1].endswith("cell"):
        parts = parts[:-1]
    return "/".join([layer, *parts])


def _find(root: Any, config: dict[str, Any] | None, h5py: Any) -> tuple[list[_Layer], list[str]]:
    """The recurrent layers, and every layer's name."""
    layer_names = _name_list(root, "layer_names", h5py, "layer list") or []
    configs = {layout.layer_name(c): c for c in _sublayers(config)} if config else {}
    found: list[_Layer] = []
    for layer in layer_names:
        where = f"layer {layer!r}"
        group = _node(root, layer, h5py, where)
        if not isinstance(group, h5py.Group):
            raise RNNXError(f"{where}: layer_names lists it, found {'nothing' if group is None else 'an array'} there; the file is damaged")
        cells = _cells(group, _name_list(group, "weight_names", h5py, where) or [], h5py, where)
        units: list[tuple[str, list[str]]] = []
        k = 0
        while k < len(cells):
            owner = _pair(cells[k][0], cells[k + 1][0]) if k + 1 < len(cells) else None
            if owner is not None:
                units.append((owner, cells[k][1] + cells[k + 1][1]))
                k += 2
            else:
                units.append(cells[k])
                k += 1
        cfg = configs.get(layer) if config else None
        for owner, arrays in units:
            name = layer if len(units) == 1 else _nested_name(layer, owner)
            found.append(_Layer(name, arrays, _config_of(cfg, owner) if len(units) > 1 else cfg))
    return found, layer_names


def _listing(found: list[_Layer]) -> str:
    return ", ".join(repr(f.name) for f in found)


def _choose(found: list[_Layer], layer_names: list[str], select: str | None, major: int | None) -> _Layer:
    if not found:
        if major is None or major < 2:
            raise RNNXError("expected Keras 2 LSTM/GRU/SimpleRNN layers, found none; the file has no keras_version, so Keras reads it as Keras 1's "
                            "(per-gate arrays), which rnnx does not read: load it in Keras 2 and save it again")
        shown = ", ".join(layer_names[:8]) + (", ..." if len(layer_names) > 8 else "")
        raise RNNXError(f"expected an LSTM, GRU, SimpleRNN, CuDNNLSTM or CuDNNGRU layer (kernel, recurrent_kernel[, bias] in its weight_names), "
                        f"found none among its layers ({shown or 'none listed'}); rnnx converts recurrent layers only")
    if select is not None:
        hits = [f for f in found if f.name == select]
        if not hits:
            raise RNNXError(f"no recurrent layer {select!r}; layers are {_listing(found)}")
        return hits[0]
    if len(found) > 1:
        raise RNNXError(f"{len(found)} recurrent layers ({_listing(found)}); pass select=GROUP")
    return found[0]


def _read_array(h5: Any, path: str, budget: Budget, h5py: Any) -> np.ndarray:
    ds = h5[path]
    if ds.is_virtual or ds.external:
        raise RNNXError(f"{path}: the array's data lives in another file; rnnx reads only data stored inside the file itself")
    if ds.ndim not in (1, 2):
        raise RNNXError(f"{path}: expected a matrix or a vector, found shape {ds.shape}; the file is damaged or not Keras's")
    if ds.dtype.kind != "f" or ds.dtype.itemsize not in (2, 4, 8):
        raise RNNXError(f"{path}: expected float16/32/64 weights, found {ds.dtype}; the file is damaged or not Keras's")
    budget.take(int(ds.size) * ds.dtype.itemsize, path, ds.shape)
    return np.asarray(ds[()])


# --- specs ---------------------------------------------------------------------------------


def _cell(family: str, cell_cfg: dict[str, Any], shown: str, major: int) -> tuple[str, tuple[Activation, ...]]:
    """The canonical cell kind and activations of a layer's config, as the writer's Keras defines them."""
    recurrent = cell_cfg.get("recurrent_activation") if family != "rnn" else None
    if family != "rnn" and recurrent is None:
        raise RNNXError(f"{shown}: the config does not say recurrent_activation (Keras 2's default was hard_sigmoid before Keras 2.3, "
                        "sigmoid after); pass spec= saying it")
    try:  # activation has been tanh by default in every Keras
        return layout.layer_activations(family, cell_cfg.get("activation", "tanh"), recurrent, major)
    except RNNXError as exc:
        raise RNNXError(f"{shown}: {exc}") from None


class _NeedsSpec(RNNXError):
    """A layer the config does not settle alone: a Bidirectional that merges its directions other
    than by concatenation, or a hard_sigmoid in a file without keras_version. Read only when spec=
    states one of ``readings``, acknowledging what rnnx takes the layer to be."""

    def __init__(self, readings: tuple[RNNSpec, ...], cudnn: bool, message: str) -> None:
        super().__init__(message)
        self.readings, self.cudnn = readings, cudnn


def _config_spec(found: _Layer, arrays: list[np.ndarray], major: int | None) -> tuple[RNNSpec, bool] | None:
    """(the spec model_config states for a layer, whether it is a CuDNN layer); None without a config.
    Refuses what has no canonical form, a Bidirectional that does not concatenate its directions,
    and a hard_sigmoid whose definition the file's missing keras_version leaves open."""
    cfg = found.config
    if cfg is None:
        return None
    cls = cfg.get("class_name")
    pair = len(arrays) in (4, 6)
    if pair:
        if cls != "Bidirectional":
            raise RNNXError(f"forward and backward weights under a {cls!r}, expected Bidirectional; the file is damaged")
        conf = layout.config_dict(cfg.get("config"))
        family, rnn_cfg, cell_cfg, cudnn = layout.bidirectional_family(conf, f"Bidirectional {found.name!r}", cudnn_layers=True)
        direction, shown = "bidirectional", f"Keras Bidirectional({layout.config_dict(conf.get('layer')).get('class_name')}) {found.name!r}"
        merge = conf.get("merge_mode", "concat")
    else:
        if cls == "Bidirectional":
            raise RNNXError(f"Bidirectional {found.name!r}: expected forward_ and backward_ weights, found {len(arrays)} arrays; the file is damaged")
        family, rnn_cfg, cell_cfg, cudnn = layout.layer_family(cfg, cudnn_layers=True)
        direction, shown = ("reverse" if rnn_cfg.get("go_backwards") else "forward"), f"Keras {cls} {found.name!r}"
    if family is None:
        raise RNNXError(f"layer {found.name!r} is a {cls!r}, not LSTM, GRU, SimpleRNN, CuDNNLSTM or CuDNNGRU: rnnx cannot tell its math; "
                        "pass spec= if it computes like one of those")
    kernel, recurrent = arrays[0], arrays[1]
    fields: dict[str, Any] = {"input_size": int(kernel.shape[0]), "hidden_size": int(recurrent.shape[0]), "direction": direction}
    readings: tuple[RNNSpec, ...]
    if cudnn:
        readings = (RNNSpec(family, **fields),)
    else:
        bias = len(arrays) in (3, 6)
        reset_after = cell_cfg.get("reset_after")
        if not isinstance(reset_after, bool):
            # GRUs before Keras 2.1 had no reset_after and reset before; a (2, 3*units) bias is reset-after's.
            reset_after = family == "gru" and bias and arrays[2].ndim == 2
        specs = []
        for version in (major,) if major is not None else (2, 3):
            cell, activations = _cell(family, cell_cfg, shown, version)
            specs.append(RNNSpec(cell, bias=bias, reset_after=reset_after if cell == "gru" else True, activations=activations, **fields))
        readings = tuple(dict.fromkeys(specs))  # one unless hard_sigmoid is used: Keras 2 and 3 define it differently
    problems = []
    if len(readings) > 1:
        keras2, keras3 = readings
        problems.append(f"{shown} uses hard_sigmoid and the file has no keras_version to say which Keras defined it: Keras 2's is "
                        f"0.2x+0.5 (spec={keras2}), Keras 3's x/6+0.5 (spec={keras3}); pass spec= saying which")
    if pair and merge not in ("concat", None):
        taken = readings[0] if len(readings) == 1 else "SPEC"
        problems.append(f"{shown} merges its directions by {merge!r} (merge_mode); rnnx's bidirectional gives them concatenated, "
                        f"forward then backward features. The weights convert exactly: pass spec={taken} to take them so, "
                        f"and merge the output's two halves as Keras does ({merge})")
    if problems:
        raise _NeedsSpec(readings, cudnn, "; ".join(problems))
    return readings[0], cudnn


def _weights_only_spec(arrays: list[np.ndarray], pair: bool) -> RNNSpec | None:
    """A CuDNN layer's spec, which its bias shape settles; None for any other layer."""
    spec = layout.cudnn_layer_spec(arrays[:3])
    return spec.with_(direction="bidirectional") if spec is not None and pair else spec


def _unpack(arrays: list[np.ndarray], spec: RNNSpec, cudnn: bool) -> RNNWeights:
    """The arrays under ``spec``. Their layout does not depend on the activations, so they are
    unpacked without them: a Keras 2 hard_sigmoid is not Keras 3's to refuse."""
    plain = spec.with_(activations=())
    weights = layout.from_cudnn_layer(arrays, plain) if cudnn else layout.from_native(arrays, plain)
    return RNNWeights(spec, weights.tensors)


def _settle(found: _Layer, arrays: list[np.ndarray], spec: RNNSpec | None, major: int | None) -> RNNWeights:
    pair = len(arrays) in (4, 6)
    try:
        stated = _config_spec(found, arrays, major)
    except _NeedsSpec as unsettled:
        if spec not in unsettled.readings:
            raise RNNXError(str(unsettled)) from None
        stated = (spec, unsettled.cudnn)
    assumed = stated is None  # a weights-only file: only a CuDNN layer's spec is known, and its direction assumed
    if stated is None:
        cudnn_spec = _weights_only_spec(arrays, pair)
        stated = (cudnn_spec, True) if cudnn_spec is not None else None
    if stated is None:
        if spec is None:
            raise RNNXError(_needs_spec(arrays, pair))
        return _unpack(arrays, spec, cudnn=False)
    settled, cudnn = stated
    if spec is not None:
        comparable = settled.with_(direction=spec.direction) if assumed and not pair and spec.direction != "bidirectional" else settled
        if spec != comparable:
            raise RNNXError(f"spec={spec} disagrees with the file's own spec {comparable}; drop spec=")
        settled = spec
    return _unpack(arrays, settled, cudnn)


def _needs_spec(arrays: list[np.ndarray], pair: bool) -> str:
    """The refusal for a weights-only layer: what spec= must say, with specs that fit the shapes as examples."""
    half = arrays[: len(arrays) // 2] if pair else arrays
    examples = "spec=CELL,input=N,hidden=N[,act=...]"
    kernel, recurrent = half[0], half[1]
    units = recurrent.shape[0]
    cell = {4: "lstm", 3: "gru", 1: "rnn_tanh"}.get(recurrent.shape[1] // units if units else 0)
    if cell is not None and kernel.ndim == 2:
        with contextlib.suppress(RNNXError):
            shaped = RNNSpec(cell, input_size=int(kernel.shape[0]), hidden_size=int(units), bias=len(half) == 3,
                             reset_after=not (cell == "gru" and len(half) == 3 and half[2].ndim == 1),
                             direction="bidirectional" if pair else "forward")
            if cell == "rnn_tanh":
                examples = f"spec={shaped} or spec={shaped.with_(cell='rnn_relu')}"
            else:
                hard = layout.KERAS_ACTIVATIONS[2]["hard_sigmoid"]
                acts = shaped.activation_functions
                examples = (f"spec={shaped} for a sigmoid recurrent activation, or spec={shaped.with_(activations=(hard, *acts[1:]))} "
                            "for Keras 2's hard_sigmoid (its default before Keras 2.3)")
    return ("a weights-only file (save_weights) does not record the layer's activations nor whether it ran backwards (go_backwards: "
            f"add reverse); pass spec= saying them, e.g. {examples}")


# --- the format ------------------------------------------------------------------------------


def _refuse_unknown(h5: Any, h5py: Any) -> None:
    """Refuses an HDF5 file in neither Keras layout: no layer list, and not Keras 3's ``layers``/``vars`` groups."""
    if not any(isinstance(h5.get(k, default=None, getlink=True), h5py.HardLink) for k in ("layers", "vars")):
        raise RNNXError("expected a Keras .h5 file (a layer_names list, as model.save and save_weights write it), found an HDF5 file without one; "
                        "the file is not Keras's")


def _keras3_reader() -> Format:
    return get("keras")


def groups(path: Path) -> list[str]:
    path = Path(path)
    with _opened(path) as (h5py, h5, _):
        root = _weights_root(h5, h5py)
        if root is not None:
            return [f.name for f in _find(root, _model_config(h5, h5py), h5py)[0]]
        _refuse_unknown(h5, h5py)
    keras3 = _keras3_reader()
    assert keras3.groups is not None
    return keras3.groups(path)  # no layer list: Keras 3's own layout, if anything


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    path = Path(path)
    with _opened(path) as (h5py, h5, size):
        root = _weights_root(h5, h5py)
        if root is not None:
            major = _keras_major(h5, root, h5py)
            one = _choose(*_find(root, _model_config(h5, h5py), h5py), select, major)
            budget = Budget(size)
            arrays = [_read_array(h5, p, budget, h5py) for p in one.arrays]
        else:
            _refuse_unknown(h5, h5py)
    if root is None:  # no layer list: Keras 3's own layout (a .weights.h5 renamed), or not Keras's
        keras3 = _keras3_reader()
        assert keras3.read is not None
        return keras3.read(path, select, spec)
    try:
        return _settle(one, arrays, spec, major)
    except RNNXError as exc:
        raise RNNXError(f"{path}: layer {one.name!r}: {exc}") from None


def read_notes(path: Path, select: str | None, spec: RNNSpec | None, weights: RNNWeights) -> list[str]:
    """What a conversion of ``weights``, just read from ``path``, tells its user that the file
    does not say: a weights-only file's CuDNN layer is read without ``spec=``, as running forward."""
    path = Path(path)
    if spec is not None or weights.spec.direction == "bidirectional":
        return []
    with _opened(path) as (h5py, h5, _):
        root = _weights_root(h5, h5py)
        if root is None:
            return []
        one = _choose(*_find(root, _model_config(h5, h5py), h5py), select, _keras_major(h5, root, h5py))
    if one.config is not None:
        return []
    return [f"{path.name}: layer {one.name!r}: a weights-only file (save_weights) records no go_backwards; the CuDNN layer is read "
            f"as running forward; pass spec={weights.spec.with_(direction='reverse')} if it ran backwards"]


register_module(globals(), name=FORMAT, to_native=layout.to_native, from_native=layout.from_native, refusals=layout.refusals,
                extensions=EXTENSIONS, sniff=is_legacy_file,
                description="Keras's legacy HDF5: Keras 2 model.save / save_weights .h5 (LSTM, GRU, SimpleRNN, CuDNNLSTM/GRU, Bidirectional), read with h5py")
