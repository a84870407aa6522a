"""Reading a large ONNX file's tensors lazily: a small "skeleton" ModelProto in which every
large tensor's bytes stay in the file, and arrays that are views of a memory map of it.

The skeleton is the file's protobuf with each large inline ``raw_data`` cut out (found by
walking the wire format over a memory map, every enclosing length re-encoded), parsed by onnx.
Each such tensor, and each tensor already kept in an external-data file, is marked as external
data at an absolute path with an entry keyed :data:`KEY`, whose value carries a token drawn for
that load (so a file cannot forge one: a marked tensor in a file is checked as any external data,
and its absolute path refused) and the file's identity (device, inode, size, mtime). Only files
that a load read or checked are mapped, and only while they are the same file.

A skeleton is read-only: ``onnx.save`` of one writes a model whose tensors point at absolute
paths, which onnx and rnnx both refuse to load. Edit and save models loaded eagerly.
A memory map is only as stable as its file: truncating the file while arrays of it are alive
makes reading them fail (SIGBUS), as with any memory-mapped reader.
"""

from __future__ import annotations

import mmap
import os
import secrets
import sys
import weakref
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.formats.protobuf_wire import LEN, VARINT, key, len_header, records, varint

KEY = "rnnx.lazy"
THRESHOLD = 64 << 10  # smaller payloads stay in the skeleton: they cost less than their bookkeeping
_MAX_DEPTH = 100  # protobuf's own recursion limit: a deeper file is refused by the eager reader too

# Field numbers from onnx.proto (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto).
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_ATTRIBUTE = 5
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS = 5, 6, 10, 11
_TENSOR_DATA_TYPE, _TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 2, 9, 13, 14
_EXTERNAL = 1
# Which embedded messages hold tensors, per message kind: field -> kind of the embedded message.
_CHILDREN = {
    "model": {_MODEL_GRAPH: "graph"},
    "graph": {_GRAPH_NODE: "node", _GRAPH_INITIALIZER: "tensor"},
    "node": {_NODE_ATTRIBUTE: "attribute"},
    "attribute": {_ATTR_T: "tensor", _ATTR_TENSORS: "tensor", _ATTR_G: "graph", _ATTR_GRAPHS: "graph"},
}
# Data types whose raw bytes are the array as numpy holds it (one element, one item, little-endian);
# packed 2-, 4- and 6-bit types and strings are read eagerly.
_MAPPED_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16})

# One memory map per file: the whole file as a read-only uint8 array, held as long as any
# array cut from it is alive, and the last few held a while longer (between load and read).
_maps: weakref.WeakValueDictionary[tuple[str, str], np.ndarray] = weakref.WeakValueDictionary()
_recent: deque[np.ndarray] = deque(maxlen=4)
# The tokens this process's loads drew, and the files (path, identity) they read or checked.
_tokens: set[str] = set()
_allowed: set[tuple[str, str]] = set()


def supported() -> bool:
    """Whether this machine reads ONNX's little-endian bytes as they are (else read eagerly)."""
    return sys.byteorder == "little"


def identity(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def new_token() -> str:
    token = secrets.token_hex(12)
    _tokens.add(token)
    return token


def allow(source: str, ident: str) -> None:
    """Let lazy tensors read ``source`` while it has identity ``ident`` (it was read or checked)."""
    _allowed.add((source, ident))


def is_lazy(tensor: Any, token: str | None = None) -> bool:
    """Whether ``tensor`` is one this process marked as kept in its file (a skeleton's): by the
    load that drew ``token`` if given, else by any."""
    for e in tensor.external_data:
        if e.key == KEY:
            drawn = e.value.split(" ", 1)[0]
            if drawn == token if token is not None else drawn in _tokens:
                return True
    return False


def _entries(location: str, offset: int, length: int, ident: str, token: str) -> list[tuple[str, str]]:
    return [("location", location), ("offset", str(offset)), ("length", str(length)), (KEY, f"{token} {ident}")]


def mark(tensor: Any, location: str, offset: int, length: int, ident: str, token: str) -> None:
    """Make ``tensor`` (a parsed TensorProto) point at bytes ``offset..offset+length`` of ``location``."""
    from onnx import TensorProto

    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    tensor.data_location = TensorProto.EXTERNAL
    allow(location, ident)
    for k, v in _entries(location, offset, length, ident, token):
        entry = tensor.external_data.add()
        entry.key, entry.value = k, v


def mappable(data_type: int) -> bool:
    return data_type in _MAPPED_TYPES


class _Cutter:
    """Builds the skeleton's bytes: the file's, less each large raw_data, as a list of pieces
    (views of the map where nothing changed)."""

    def __init__(self, buf: memoryview, location: str, ident: str, threshold: int, token: str) -> None:
        self.buf, self.location, self.ident, self.threshold, self.token = buf, location, ident, threshold, token
        self.cut = 0

    def message(self, start: int, end: int, kind: str, depth: int) -> list[Any] | None:
        """The message's new content, or None when it is unchanged."""
        if depth > _MAX_DEPTH:
            raise RNNXError(f"protobuf: messages nested over {_MAX_DEPTH} deep; the file is damaged")
        children, out, copied = _CHILDREN[kind], [], start
        for r in records(self.buf, start, end):
            sub = children.get(r.field) if r.wire_type == LEN else None
            if sub is None:
                continue
            parts = self.tensor(r.value_start, r.end) if sub == "tensor" else self.message(r.value_start, r.end, sub, depth + 1)
            if parts is None:
                continue
            out += [self.buf[copied:r.start], len_header(r.field, sum(len(p) for p in parts)), *parts]
            copied = r.end
        if not out:
            return None
        return out + [self.buf[copied:end]]

    def tensor(self, start: int, end: int) -> list[Any] | None:
        raw, data_type, location = None, 0, 0
        for r in records(self.buf, start, end):  # the last of a singular field wins, as protobuf parses it
            if r.field == _TENSOR_RAW_DATA and r.wire_type == LEN:
                raw = r
            elif r.field == _TENSOR_DATA_TYPE and r.wire_type == VARINT:
                data_type = r.value
            elif r.field == _TENSOR_DATA_LOCATION and r.wire_type == VARINT:
                location = r.value
        if raw is None or location == _EXTERNAL or raw.end - raw.value_start < self.threshold or not mappable(data_type):
            return None  # small, or bytes onnx would read from elsewhere: left as it is
        drop = (_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION)
        out: list[Any] = [self.buf[r.start:r.end] for r in records(self.buf, start, end) if r.field not in drop]
        out += [key(_TENSOR_DATA_LOCATION, VARINT), varint(_EXTERNAL)]
        for k, v in _entries(self.location, raw.value_start, raw.end - raw.value_start, self.ident, self.token):
            entry = len_header(1, len(k.encode())) + k.encode() + len_header(2, len(v.encode())) + v.encode()
            out += [len_header(_TENSOR_EXTERNAL_DATA, len(entry)), entry]
        self.cut += 1
        return out


def read_skeleton(path: Path, threshold: int | None = None) -> tuple[Any, str] | None:
    """The ModelProto of ``path`` with every inline raw_data of ``threshold`` bytes or more kept in
    the file (see the module's notes), and the token its lazy tensors carry; damage is refused
    in one line. None where the file's path cannot be written in a model (not UTF-8): read it eagerly."""
    import onnx

    source = str(path.resolve())
    try:
        source.encode()
    except UnicodeEncodeError:
        return None
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        whole = _map(fd, st)
    finally:
        os.close(fd)
    ident, token = identity(st), new_token()
    _remember(source, ident, whole)
    allow(source, ident)
    buf = whole.data
    try:
        parts = _Cutter(buf, source, ident, THRESHOLD if threshold is None else threshold, token).message(0, len(buf), "model", 0)
        skeleton = bytes(buf) if parts is None else b"".join(parts)
    except RNNXError as exc:
        raise RNNXError(f"{path}: cannot parse as an ONNX model ({exc}); the file is damaged or not ONNX") from None
    finally:
        parts = None
        buf.release()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(skeleton)
    except Exception as exc:  # noqa: BLE001  protobuf's DecodeError and friends: the file is not a model
        raise RNNXError(f"{path}: cannot parse as an ONNX model ({type(exc).__name__}); the file is damaged or not ONNX") from None
    return model, token


def _map(fd: int, st: os.stat_result) -> np.ndarray:
    if not st.st_size:
        return np.zeros(0, np.uint8)
    whole = np.frombuffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ), np.uint8)
    return whole


def _remember(source: str, ident: str, whole: np.ndarray) -> None:
    _maps[(source, ident)] = whole
    _recent.append(whole)


def _file(source: str, ident: str, where: str) -> np.ndarray:
    """The whole file at ``source`` as a read-only array, if it is still the file that was read."""
    whole = _maps.get((source, ident))
    if whole is not None:
        return whole
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise RNNXError(f"{where} in {source!r}, which cannot be opened now ({exc.strerror}); read the model again") from None
    try:
        st = os.fstat(fd)
        if identity(st) != ident:
            raise RNNXError(f"{where} in {source!r}, which has changed since the model was read; read the model again")
        whole = _map(fd, st)
    finally:
        os.close(fd)
    _remember(source, ident, whole)
    return whole


def _where(tensor: Any) -> tuple[str, int, int, str]:
    """(file, offset, length, identity) of a lazy tensor; refs that are not exactly the ones
    :func:`mark` writes (a merged or edited tensor) are refused."""
    info: dict[str, str] = {}
    for e in tensor.external_data:
        if e.key in info:
            info = {}
            break
        info[e.key] = e.value
    try:
        token, ident = info[KEY].split(" ", 1)
        if token not in _tokens or (info["location"], ident) not in _allowed or set(info) != {"location", "offset", "length", KEY} or tensor.HasField("raw_data"):
            raise ValueError
        return info["location"], int(info["offset"]), int(info["length"]), ident
    except (KeyError, ValueError):
        raise RNNXError(f"tensor {tensor.name!r}: its references into the file are not the ones rnnx wrote; the model is damaged or was edited, load it again") from None


def mapped_array(tensor: Any) -> np.ndarray:
    """A lazy tensor's data: a read-only view of its file's memory map, with the dtype and shape
    the TensorProto gives (as onnx's numpy_helper reads raw data)."""
    from onnx import helper

    where = f"tensor {tensor.name!r} keeps its data"
    source, offset, length, ident = _where(tensor)
    if tensor.HasField("segment"):
        raise RNNXError(f"tensor {tensor.name!r}: stored in segments, which onnx does not read either; the file is damaged")
    if not mappable(tensor.data_type):
        raise RNNXError(f"tensor {tensor.name!r}: data type {tensor.data_type} cannot be read from a memory map; the file is damaged")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    dims = [int(d) for d in tensor.dims]
    count = int(np.prod(dims, dtype=object)) if dims else 1
    if any(d < 0 for d in dims) or count * dtype.itemsize != length:
        raise RNNXError(f"tensor {tensor.name!r}: its {length} stored bytes do not fit its shape {dims} of {dtype.name}; the file is damaged")
    if length == 0:
        return np.zeros(dims, dtype)
    whole = _file(source, ident, where)
    if offset < 0 or offset + length > whole.size:
        raise RNNXError(f"tensor {tensor.name!r}: claims bytes {offset}..{offset + length} of {source!r}, which has {whole.size}; the file is damaged")
    return whole[offset:offset + length].view(dtype).reshape(dims)


def to_array(tensor: Any) -> np.ndarray:
    """A TensorProto's data, refused in one line when its stored bytes do not fit its shape: a
    view of the file's memory map for a skeleton's lazy tensor, else onnx's copy."""
    from onnx import numpy_helper

    if is_lazy(tensor):
        return mapped_array(tensor)
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError) as exc:  # KeyError: an unknown data type
        raise RNNXError(f"tensor {tensor.name!r}: its stored data does not fit its shape {list(tensor.dims)} ({exc}); the file is damaged") from None


def for_runtime(skeleton: Any, folder: Path) -> Any:
    """A copy of a skeleton for ONNX Runtime, loaded from bytes with ``folder`` as its
    external-data folder: each mapped tensor points, by a path relative to ``folder``, at the
    bytes it stands for (an inline tensor at its offset in the model's own file). ONNX Runtime
    then reads the weights from the files themselves, and the proto it is given stays small,
    however large the model."""
    import onnx

    base = Path(folder).resolve()
    copy = onnx.ModelProto()
    copy.CopyFrom(skeleton)
    for tensor in stored_tensors(copy.graph):
        if not is_lazy(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        target = Path(info["location"])
        if base not in target.parents:  # every file a load maps lies in the model's folder (checked); refuse anything else
            raise RNNXError(f"tensor {tensor.name!r}: its data lies in {target}, outside {base}; the model cannot be handed to ONNX Runtime")
        del tensor.external_data[:]
        for name, value in (("location", target.relative_to(base).as_posix()), ("offset", info["offset"]), ("length", info["length"])):
            entry = tensor.external_data.add()
            entry.key, entry.value = name, value
    return copy


def stored_tensors(graph: Any) -> Iterator[Any]:
    """Every tensor a graph stores: initializers and attribute tensors (Constants' values),
    subgraphs included. The one walker the ONNX readers and writers share."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from stored_tensors(attr.g)
            for g in attr.graphs:
                yield from stored_tensors(g)
