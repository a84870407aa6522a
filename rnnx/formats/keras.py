"""``keras``: Keras 3 LSTM / GRU / SimpleRNN weights, Bidirectional included, in files.

The arrays' layout (``get_weights()`` order, gate order, biases, what Keras cannot hold)
is :mod:`rnnx.layouts.keras`.

Files, read with h5py alone (Keras is never imported and no model code runs):

* ``.keras`` (a zip holding ``config.json`` and ``model.weights.h5``): config.json says each
  layer's class, activation, reset mode, direction and bias, so the spec is the file's.
* ``.weights.h5`` (``model.save_weights``): weights only. Keras 3 writes no config into it
  (only ``.keras`` has config.json), so nothing in the file says the layer's activations or
  ``go_backwards``. ``--spec`` states them (``act=Sigmoid/Relu/Relu`` for ``LSTM(activation=
  "relu")``, ``reverse`` for ``go_backwards=True``); without it the spec comes from the shapes
  with Keras's defaults (tanh, sigmoid, forward), and :func:`read_notes` gives the note
  ``rnnx convert`` prints saying so. SimpleRNN needs ``--spec`` for tanh or relu and a
  bias-free GRU for its reset mode. Layers that config.json does not list (those held as
  attributes of subclassed models) are read the same way from a ``.keras`` archive.

Each recurrent layer is a group named by its path in the file with Keras's ``layers``
containers left out (``lstm``, ``bidirectional``, ``lstm_1``, ``sequential/gru``: Keras
names these by class, numbered in model order); in a ``.keras`` archive ``--select`` also
takes the layer's own name from config.json (``encoder``) when no path has that name. (The
names Keras also writes as HDF5 string attributes are never read: a damaged string heap
can hang HDF5.) ``keras.layers.RNN`` around an LSTMCell,
GRUCell or SimpleRNNCell is read too; StackedRNNCells are not. Keras 2's ``.h5`` files (also
when named ``.weights.h5``) are handed to :mod:`rnnx.formats.keras_legacy_h5`. Activations come
from config.json, ``hard_sigmoid`` as the writer's Keras (metadata.json) defines it. A
go_backwards layer is read as direction ``reverse``; Keras returns its sequence last step
first, the converted layer in input order, and the conversion notes it.
bfloat16 weights are widened to float32, exactly.

Writing gives a ``.weights.h5`` for a model made of exactly the spec's layers, in order::

    keras.Sequential([keras.Input((None, input)),
                      keras.layers.LSTM(hidden, return_sequences=True),   # one per layer,
                      ...])                                              # Bidirectional(...) when bidirectional
    model.load_weights("weights.weights.h5")

Build the layers with the spec's options (``go_backwards=True`` for ``reverse``,
``reset_after=False`` for ``reset_before``, ``use_bias=False`` for ``no_bias``,
``activation="relu"`` for ``rnn_relu``): Keras reads no options from a weights file. rnnx
records the spec in the file's root attribute ``rnnx_spec`` (Keras ignores it), so reading
such a file without ``--select`` gives the whole stack back, options included; with
``--select`` one layer is read like any ``.weights.h5``. rnnx does not write ``.keras``
archives.

One module, though long, because it is one idea: Keras 3's stored weights (``.weights.h5`` and
the ``.keras`` archive that holds one) read from an untrusted file; the archive's member is
read in place and bounded like the HDF5 it holds. The gate orders and layouts are
:mod:`rnnx.layouts.keras`'s, shared with :mod:`rnnx.formats.keras_legacy_h5`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.fileio import atomic_output, check_archive, library_write, require_file
from rnnx.formats import keras_legacy_h5
from rnnx.formats.hdf5 import Budget, import_h5py
from rnnx.formats.registry import Format, get, register_module, settle_spec
from rnnx.layouts import keras as layout
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

#: Keras's h5 group name (its snake-cased class name) per cell kind, for writing.
LAYER_GROUP = {"lstm": "lstm", "gru": "gru", "rnn_tanh": "simple_rnn", "rnn_relu": "simple_rnn"}
# Limits for untrusted files: how deep the HDF5 tree is walked, how many groups, how big a
# JSON config (what the datasets may claim together is hdf5.Budget's).
_MAX_DEPTH = 32
_MAX_GROUPS = 100_000
_MAX_CONFIG = 64 * 1024 * 1024
#: Root attribute of the .weights.h5 files rnnx writes: the spec, a fixed-length string (no HDF5 string heap).
SPEC_ATTR = "rnnx_spec"


# --- files: reading ----------------------------------------------------------------------


def _damaged(path: Path, exc: BaseException) -> RNNXError:
    return RNNXError(f"{path}: cannot read the weights as HDF5 ({one_line(exc, DETAIL_CHARS)}); the file is damaged or not Keras 3's")


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[tuple[Any, Any, dict[str, Any] | None, int]]:
    """h5py, the weights as an open h5py.File, the parsed config.json (.keras only), and the data's size in bytes."""
    h5py = import_h5py(f"reading {path.name}")
    path = require_file(path)
    config: dict[str, Any] | None = None
    source: Any
    if path.name.lower().endswith(".keras"):
        check_archive(path)
        try:
            with zipfile.ZipFile(path) as archive:
                members = {info.filename: info for info in archive.infolist()}
                missing = [m for m in ("config.json", "model.weights.h5") if m not in members]
                if missing:
                    raise RNNXError(
                        f"{path}: expected config.json and model.weights.h5 in the .keras archive, found {sorted(members) or 'nothing'}; "
                        "save it with Keras 3's model.save"
                    )
                if members["config.json"].file_size > _MAX_CONFIG:
                    raise RNNXError(f"{path}: config.json claims {members['config.json'].file_size} bytes; the archive is damaged or not Keras's")
                loaded = json.loads(archive.read("config.json"))
                weights = members["model.weights.h5"]
                # Keras stores the member uncompressed: h5py reads it in place, through a window
                # onto the archive, and never holds the whole of it; a compressed one is inflated.
                stored = weights.compress_type == zipfile.ZIP_STORED
                source = _StoredMember(path, weights) if stored else io.BytesIO(archive.read("model.weights.h5"))
        except RNNXError:
            raise
        except Exception as exc:  # noqa: BLE001  zipfile/json parsing only: any failure means a damaged archive
            raise RNNXError(f"{path}: not a readable .keras archive ({one_line(exc, DETAIL_CHARS)}); expected a zip with config.json and model.weights.h5") from None
        if not isinstance(loaded, dict):
            raise RNNXError(f"{path}: config.json holds {type(loaded).__name__}, expected a Keras model config (an object)")
        config, size = loaded, weights.file_size
    else:
        source, size = str(path), path.stat().st_size
    try:
        h5 = h5py.File(source, "r")
    except Exception as exc:  # noqa: BLE001  h5py raises OSError and others for a damaged file
        if isinstance(source, _StoredMember):
            source.close()
        raise _damaged(path, exc) from None
    try:
        yield h5py, h5, config, size
    except RNNXError as exc:  # named by the file, once
        message = str(exc)
        raise RNNXError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    except Exception as exc:  # noqa: BLE001  h5py raises many types for a damaged file; none is a bug of ours
        raise _damaged(path, exc) from None
    finally:
        with contextlib.suppress(Exception):
            h5.close()
        if isinstance(source, _StoredMember):
            source.close()


class _StoredMember(io.RawIOBase):
    """An uncompressed zip member as a seekable read-only file: its bytes where they lie in the archive."""

    def __init__(self, path: Path, info: zipfile.ZipInfo) -> None:
        super().__init__()
        self._file = open(path, "rb")
        self._file.seek(info.header_offset)
        local = self._file.read(30)  # the local file header: its name and extra field come next, then the data
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            self._file.close()
            raise RNNXError(f"{path}: the archive's entry for {info.filename} does not point at a local file header; the archive is damaged")
        name_length, extra_length = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
        self._start = info.header_offset + 30 + name_length + extra_length
        self._size = info.file_size
        if self._start + self._size > os.fstat(self._file.fileno()).st_size:
            self._file.close()
            raise RNNXError(f"{path}: {info.filename} claims {self._size} bytes past the archive's end; the archive is damaged")
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._at = max(0, {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence] + offset)
        return self._at

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self._size - self._at))
        self._file.seek(self._start + self._at)
        got = self._file.readinto(memoryview(buffer)[:n]) or 0
        self._at += got
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


@dataclass
class _Found:
    """One recurrent layer in a file."""

    name: str  # its path, Keras's ``layers`` containers left out
    path: str  # its full HDF5 path
    layer: str | None  # the Keras layer's own name, from config.json (.keras only)
    cells: list[str]  # HDF5 paths of the cells' ``vars``: one, or forward then backward
    config: dict[str, Any] | None  # its entry in config.json (.keras only)


def _child(group: Any, key: str, h5py: Any) -> Any:
    """A hard-linked child only: soft and external links could loop or reach other files."""
    if key not in group or not isinstance(group.get(key, getlink=True), h5py.HardLink):
        return None
    return group[key]


def _snake(name: str) -> str:
    """Keras's rule for a layer's group name from its class: LSTM -> lstm, SimpleRNN -> simple_rnn."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _keyed_configs(listed: Any) -> dict[str, dict[str, Any]]:
    """A model's config.json layer list keyed like its HDF5 groups: class names numbered in model order."""
    keyed: dict[str, dict[str, Any]] = {}
    used: dict[str, int] = {}
    for cfg in listed if isinstance(listed, list) else []:
        if not isinstance(cfg, dict) or not isinstance(cfg.get("class_name"), str):
            continue
        base = _snake(cfg["class_name"])
        if base in used:
            used[base] += 1
            keyed[f"{base}_{used[base]}"] = cfg
        else:
            used[base] = 0
            keyed[base] = cfg
    return keyed


def _cell_vars(group: Any, h5py: Any) -> Any:
    """``group/cell/vars`` when it holds a recurrent layer's 2 or 3 arrays (matrices first), else None."""
    cell = _child(group, "cell", h5py)
    if not isinstance(cell, h5py.Group):
        return None
    v = _child(cell, "vars", h5py)
    if not isinstance(v, h5py.Group) or set(v) not in ({"0", "1"}, {"0", "1", "2"}):
        return None
    first = [_child(v, k, h5py) for k in ("0", "1")]
    if not all(isinstance(d, h5py.Dataset) and d.ndim == 2 for d in first):
        return None  # e.g. ConvLSTM's kernels: not matrices
    return v


def _natural(name: str) -> tuple[Any, ...]:
    """lstm, lstm_1, lstm_2, ..., lstm_10: Keras's numbering in order."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _find(h5: Any, config: dict[str, Any] | None, h5py: Any) -> list[_Found]:
    """Every recurrent layer in the file, with its config.json entry where the archive has one."""
    found: list[_Found] = []
    visited = [0]

    def handle(group: Any, parts: list[str], full: list[str], cfg: dict[str, Any] | None, depth: int) -> None:
        visited[0] += 1
        if depth > _MAX_DEPTH or visited[0] > _MAX_GROUPS:
            raise RNNXError(f"HDF5 tree deeper than {_MAX_DEPTH} or larger than {_MAX_GROUPS} groups; the file is damaged or not Keras 3's")
        single = _cell_vars(group, h5py)
        if single is None:
            pair = [_child(group, k, h5py) for k in ("forward_layer", "backward_layer")]
            halves = [_cell_vars(g, h5py) if isinstance(g, h5py.Group) else None for g in pair]
            cells = [h for h in halves if h is not None]
            if len(cells) == len(halves):
                found.append(_Found("/".join(parts), "/".join(full), layout.layer_name(cfg) if cfg else None, [h.name for h in cells], cfg))
                return
            walk(group, parts, full, cfg, depth)
            return
        found.append(_Found("/".join(parts), "/".join(full), layout.layer_name(cfg) if cfg else None, [single.name], cfg))

    def walk(group: Any, parts: list[str], full: list[str], cfg: dict[str, Any] | None, depth: int) -> None:
        keyed = _keyed_configs(layout.config_dict(cfg.get("config") if cfg else None).get("layers"))
        for key in sorted(group, key=_natural):
            child = _child(group, key, h5py)
            if key == "vars" or not isinstance(child, h5py.Group):
                continue
            if key != "layers":
                handle(child, [*parts, key], [*full, key], None, depth + 1)
                continue
            # A model's layer list: Keras names each group by its class, numbered in model order.
            order = {k: i for i, k in enumerate(keyed)}
            for sub in sorted(child, key=lambda k: (order.get(k, len(order)), _natural(k))):
                grand = _child(child, sub, h5py)
                if isinstance(grand, h5py.Group):
                    handle(grand, [*parts, sub], [*full, key, sub], keyed.get(sub), depth + 2)

    walk(h5, [], [], config, 0)
    names = [f.name for f in found]
    if len(set(names)) != len(names):  # a custom layer's attribute named like a listed layer: keep full paths
        for f in found:
            f.name = f.path
    return found


def _listing(found: list[_Found]) -> str:
    return ", ".join(repr(f.name) + (f" (layer {f.layer!r})" if f.layer and f.layer != f.name else "") for f in found)


def _choose(found: list[_Found], select: str | None, where: str) -> _Found:
    """The one layer to convert: ``select`` (a path, else a layer name) if given, else the only one."""
    if not found:
        raise RNNXError(f"{where}: expected Keras 3 LSTM/GRU/SimpleRNN layers (groups holding cell/vars), found none")
    if select is not None:
        hits = [f for f in found if f.name == select] or [f for f in found if f.layer == select]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise RNNXError(f"{where}: {len(hits)} layers are named {select!r} ({_listing(hits)}); select one by its path")
        raise RNNXError(f"{where}: no recurrent group {select!r}; groups are {_listing(found)}")
    if len(found) > 1:
        raise RNNXError(f"{where}: {len(found)} recurrent groups ({_listing(found)}); pass select=GROUP")
    return found[0]


def _read_dataset(ds: Any, where: str, budget: Budget, h5py: Any) -> np.ndarray:
    if not isinstance(ds, h5py.Dataset):
        raise RNNXError(f"{where}: expected an array, found {type(ds).__name__}; the file is damaged or not Keras 3's")
    if ds.is_virtual or ds.external:
        raise RNNXError(f"{where}: the array's data lives in another file; rnnx reads only data stored inside the file itself")
    budget.take(int(ds.size) * ds.dtype.itemsize, where, ds.shape)
    if ds.dtype.kind == "f" and ds.dtype.itemsize not in (2, 4, 8):
        raise RNNXError(f"{where}: expected float16/32/64 or bfloat16 weights, found {ds.dtype}; the file is damaged or not Keras 3's")
    data = np.asarray(ds[()])
    # Keras stores bfloat16 as 2-byte opaque values marked by a "dtype" attribute. Only the mark's presence
    # is checked: reading a string attribute goes through HDF5's global heap, which can hang on a damaged file.
    if data.dtype.kind == "V" and data.dtype.itemsize == 2 and "dtype" in ds.attrs:
        # The top half of a float32, so widening is exact.
        return (np.frombuffer(data.tobytes(), dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(data.shape)
    if data.dtype.kind != "f":
        raise RNNXError(f"{where}: expected floating weights, found dtype {data.dtype}; the file is damaged or not Keras 3's")
    return data


def _load_cells(h5: Any, found: _Found, budget: Budget, h5py: Any) -> list[list[np.ndarray]]:
    cells = []
    for vars_path in found.cells:
        group = h5[vars_path]
        cells.append([_read_dataset(_child(group, k, h5py), f"{vars_path}/{k}", budget, h5py) for k in sorted(group, key=int)])
    return cells


def _archive_keras_major(path: Path) -> int:
    """The major version of the Keras that wrote a .keras archive, from its metadata.json: tf_keras
    2.13+ writes .keras archives too, and its hard_sigmoid is Keras 2's. 3 when it does not say."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("metadata.json")
            version = json.loads(archive.read(info)).get("keras_version") if info.file_size < 1 << 20 else None
    except Exception:  # noqa: BLE001  no or unreadable metadata: the archive format is Keras 3's
        return 3
    found = re.match(r"\s*(\d+)", version) if isinstance(version, str) else None
    return int(found.group(1)) if found else 3


def _spec_from_config(found: _Found, cells: list[list[np.ndarray]], given: RNNSpec | None, major: int = 3) -> RNNSpec | None:
    """The spec config.json states for a layer; None without a config. Refuses what has no canonical form."""
    cfg = found.config
    if cfg is None:
        return None
    layer = found.layer or found.name
    cls = cfg.get("class_name")
    if len(cells) == 2:
        if cls != "Bidirectional":
            raise RNNXError(f"Keras layer {layer!r}: forward and backward weights under a {cls!r}, expected Bidirectional; the file is not Keras 3's")
        conf = layout.config_dict(cfg.get("config"))
        family, rnn_cfg, cell_cfg, _ = layout.bidirectional_family(conf, f"Keras Bidirectional {layer!r}")
        direction, cls_shown = "bidirectional", f"Bidirectional({layout.config_dict(conf.get('layer')).get('class_name')})"
    else:
        family, rnn_cfg, cell_cfg, _ = layout.layer_family(cfg)
        direction, cls_shown = ("reverse" if rnn_cfg.get("go_backwards") else "forward"), str(cls)
    if family is None:
        if given is not None:
            return None  # the user's --spec says how it computes
        raise RNNXError(
            f"Keras layer {layer!r} is a {cls_shown}, not LSTM, GRU or SimpleRNN: rnnx cannot tell its math; "
            "pass spec= if it computes like one of those"
        )
    try:  # hard_sigmoid as the writer's Keras defines it: x/6+0.5 in Keras 3
        cell, activations = layout.layer_activations(family, cell_cfg.get("activation", "tanh"), cell_cfg.get("recurrent_activation", "sigmoid"), major)
    except RNNXError as exc:
        raise RNNXError(f"Keras {cls_shown} {layer!r}: {exc}") from None
    kernel, rec = cells[0][0], cells[0][1]
    return RNNSpec(
        cell=cell,
        input_size=int(kernel.shape[0]),
        hidden_size=int(rec.shape[0]),
        direction=direction,
        bias=cell_cfg.get("use_bias", True) is not False,
        reset_after=cell_cfg.get("reset_after", True) is not False if cell == "gru" else True,
        activations=activations,
    )


def _settle(found: _Found, cells: list[list[np.ndarray]], spec: RNNSpec | None, major: int = 3) -> RNNWeights:
    """The weights of one found layer, under the file's spec, the user's, or one inferred from shapes."""
    if len(cells) == 2 and len(cells[0]) != len(cells[1]):
        raise RNNXError(f"forward and backward hold {len(cells[0])} and {len(cells[1])} arrays; the file is damaged")
    stated = _spec_from_config(found, cells, spec, major)
    if spec is not None and stated is not None and spec != stated:
        raise RNNXError(f"spec={spec} disagrees with the file's own spec {stated}; drop spec=")
    if spec is None and stated is None:
        spec = layout.infer_spec(cells[0], "")
        if len(cells) == 2:
            spec = spec.with_(direction="bidirectional")
    arrays = [a for cell in cells for a in cell]
    if stated is not None and stated.activations:  # the config's own functions: the arrays' layout does not depend on them
        return RNNWeights(stated, layout.from_native(arrays, stated.with_(activations=())).tensors)
    return layout.from_native(arrays, spec or stated)


def _stored_spec(h5: Any) -> str | None:
    """The spec an rnnx-written file records, read only when it is a short fixed-length string."""
    if SPEC_ATTR not in h5.attrs:
        return None
    attr = h5.attrs.get_id(SPEC_ATTR)
    if attr.shape != () or attr.dtype.kind != "S" or attr.dtype.itemsize > 1024:
        raise RNNXError(f"attribute {SPEC_ATTR}: expected a short string, found {attr.dtype} of shape {attr.shape}; the file is damaged")
    return bytes(h5.attrs[SPEC_ATTR]).decode("ascii", "replace")


def _whole_stack(path: Path, found: list[_Found], cells: list[list[list[np.ndarray]]], stored: str, spec: RNNSpec | None) -> RNNWeights:
    """An rnnx-written file without --select: its layers in order, under the spec it records."""
    settled = settle_spec(path, spec, stored)
    assert settled is not None
    kind = "bidirectional" if settled.direction == "bidirectional" else LAYER_GROUP[settled.cell]
    expected = [kind + (f"_{k}" if k else "") for k in range(settled.num_layers)]
    if [f.name for f in found] != expected:
        raise RNNXError(f"{path}: spec {settled} expects groups {expected}, found {[f.name for f in found]}; the file was changed after rnnx wrote it")
    try:
        return layout.from_native([a for layer in cells for cell in layer for a in cell], settled)
    except RNNXError as exc:
        raise RNNXError(f"{path}: {exc}") from None


def _legacy(path: Path) -> Format | None:
    """The reader of Keras's legacy HDF5 layout (Keras 2's .h5), when ``path`` is in it."""
    legacy = get("keras_h5")
    return legacy if not path.name.lower().endswith(".keras") and legacy.sniff is not None and legacy.sniff(path) else None


def groups(path: Path) -> list[str]:
    legacy = _legacy(Path(path))
    if legacy is not None and legacy.groups is not None:
        return legacy.groups(path)
    with _opened(Path(path)) as (h5py, h5, config, _):
        return [f.name for f in _find(h5, config, h5py)]


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    legacy = _legacy(Path(path))
    if legacy is not None and legacy.read is not None:
        return legacy.read(path, select, spec)
    with _opened(Path(path)) as (h5py, h5, config, size):
        budget = Budget(size)
        found = _find(h5, config, h5py)
        stored = _stored_spec(h5) if config is None and select is None else None
        if stored is not None and found:
            stack = [_load_cells(h5, f, budget, h5py) for f in found]
        else:
            stack = None
            one = _choose(found, select, str(path))
            cells = _load_cells(h5, one, budget, h5py)
    if stack is not None:
        assert stored is not None
        return _whole_stack(Path(path), found, stack, stored, spec)
    try:
        return _settle(one, cells, spec, _archive_keras_major(Path(path)) if config is not None else 3)
    except RNNXError as exc:
        raise RNNXError(f"{path}: layer {one.name!r}: {exc}") from None


def read_notes(path: Path, select: str | None, spec: RNNSpec | None, weights: RNNWeights) -> list[str]:
    """What a conversion of ``weights``, just read from ``path`` with ``select`` and ``spec``, tells
    its user: what the file did not record and was assumed (a layer read from its shapes takes
    Keras's defaults), and that a go_backwards layer's output comes back in another order."""
    path = Path(path)
    notes: list[str] = []
    if _legacy(path) is not None:
        notes += keras_legacy_h5.read_notes(path, select, spec, weights)
    elif spec is None:
        with _opened(path) as (h5py, h5, config, _):
            found = _find(h5, config, h5py)
            whole = config is None and select is None and _stored_spec(h5) is not None  # rnnx's own file records its spec
            one = None if whole else _choose(found, select, str(path))
        if one is not None and one.config is None:
            what = "a .weights.h5 file" if config is None else "a .keras archive whose config.json does not list the layer"
            notes.append(f"{path.name}: layer {one.name!r}: {layout.unrecorded_note(what)}")
    if weights.spec.direction == "reverse":
        notes.append(layout.GO_BACKWARDS_NOTE)
    return notes


# --- files: writing ----------------------------------------------------------------------


def write(weights: RNNWeights, path: Path) -> None:
    """A ``.weights.h5`` for ``model.load_weights`` of a model made of exactly the spec's layers."""
    path = Path(path)
    if not path.name.lower().endswith(".weights.h5"):
        raise RNNXError(
            f"{path}: rnnx writes Keras weights as .weights.h5 only (a .keras archive needs Keras's own config); "
            "name the output NAME.weights.h5"
        )
    spec = weights.spec
    arrays = layout.native_arrays(weights)  # made one at a time as they are written
    h5py = import_h5py("writing .weights.h5")
    per_cell = layout.arrays_per_cell(spec)
    kind = "bidirectional" if spec.direction == "bidirectional" else LAYER_GROUP[spec.cell]
    with atomic_output(path) as tmp, library_write(path), h5py.File(tmp, "w") as f:
        f.attrs[SPEC_ATTR] = np.bytes_(str(spec))
        f.create_group("vars")
        for layer in range(spec.num_layers):
            # Keras's own paths: layers/<class>, layers/<class>_1, ...; a Bidirectional's halves under it.
            group = f.create_group(f"layers/{kind}" + (f"_{layer}" if layer else ""))
            group.create_group("vars")
            halves = [group.create_group(h) for h in ("forward_layer", "backward_layer")] if kind == "bidirectional" else [group]
            for half in halves:
                vars_ = half.create_group("cell/vars")
                for i in range(per_cell):
                    vars_.create_dataset(str(i), data=next(arrays))


register_module(globals(), name="keras", to_native=layout.to_native, from_native=layout.from_native, refusals=layout.refusals,
                extensions=(".keras", ".weights.h5"),
                description="Keras 3 LSTM/GRU/SimpleRNN (get_weights() arrays; .keras and .weights.h5 read with h5py, .weights.h5 written)")
