"""Headerless cuDNN blobs (``.bin``): the packed weight space of :mod:`rnnx.layouts.cudnn` as
raw little-endian values, the bytes C++ code reads with ``fread`` into cuDNN's weight space.

Nothing in such a file says what it holds, so the spec and the dtype come from the caller,
and the file's size is checked against them before a byte is read. numpy has no bfloat16:
it is stored as the upper half of float32's bits, rounded to nearest even (as PyTorch rounds),
and read back widened to float32, which holds every bfloat16 value exactly.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, library_write, stream
from rnnx.layouts.cudnn import BlobEntry, blob_size, from_native, offset_table
from rnnx.spec import RNNSpec
from rnnx.tensor_pieces import Pieces
from rnnx.tolerance import Tolerance
from rnnx.weights import RNNWeights

SUFFIX = ".bin"
DEFAULT_DTYPE = "float32"  # what a C++ program built on cuDNN's CUDNN_DATA_FLOAT reads
#: How each dtype's values lie in the file: little-endian, whatever the machine; bfloat16 as its 16 bits.
STORED = {"float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "float64": "<f8"}
#: The numpy dtype each is read into.
WIDENED: dict[str, type[np.floating]] = {"float32": np.float32, "float16": np.float16, "bfloat16": np.float32, "float64": np.float64}
#: Storing a value rounds it by at most this much: relative (half an ulp, 2**-(mantissa bits + 1))
#: above the smallest normal, absolute (half the smallest subnormal) below it.
ROUNDING = {
    "float32": Tolerance(2.0**-150, 2.0**-24),
    "float16": Tolerance(2.0**-25, 2.0**-11),
    "bfloat16": Tolerance(2.0**-134, 2.0**-8),
    "float64": Tolerance(0.0, 2.0**-53),
}
_ZIP = b"PK\x03\x04"  # PyTorch's checkpoints are zip archives, and often named .bin


def is_raw(path: Path) -> bool:
    """A ``.bin`` name means a headerless blob."""
    return Path(path).suffix.lower() == SUFFIX


def dtype_name(dtype: str | np.dtype | type | None) -> str:
    """``dtype`` as one of :data:`STORED`'s names (None: :data:`DEFAULT_DTYPE`)."""
    if dtype is None:
        return DEFAULT_DTYPE
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in STORED:
        raise RNNXError(f"dtype: expected one of {', '.join(STORED)} for a headerless {SUFFIX} blob, found {name!r}")
    return name


def itemsize(name: str) -> int:
    return np.dtype(STORED[name]).itemsize


def read(path: Path, spec: RNNSpec | None, dtype: str | None = None) -> RNNWeights:
    """The blob in ``path``, sized by ``spec`` and ``dtype`` and checked against the file's
    size before anything is read; exactly that many values are read."""
    name = dtype_name(dtype)
    if spec is None:
        raise RNNXError(f"{path}: a headerless {SUFFIX} blob does not say what it holds; pass spec=SPEC "
                        f"(and dtype=, {DEFAULT_DTYPE} unless given)")
    count = blob_size(spec)
    found = os.stat(path).st_size
    if found != count * itemsize(name):
        raise RNNXError(_size_refusal(path, spec, name, count, found))
    # Memory-mapped, read-only: a float32/16/64 blob's canonical tensors are views of the file.
    stored = np.memmap(path, dtype=STORED[name], mode="r", shape=(count,)) if count else np.empty(0, STORED[name])
    return from_native(widen(stored, name), spec)


def write(weights: RNNWeights, path: Path, dtype: str | None = None) -> None:
    """The packed blob as raw little-endian ``dtype`` values, atomically, streamed tensor by
    tensor in the table's order (nothing packed in memory). A finite weight that would
    overflow ``dtype`` is refused before the file is renamed into place."""
    name = dtype_name(dtype)
    table = offset_table(weights.spec)
    shown = progress.Bytes(f"writing {path.name}", blob_size(weights.spec) * itemsize(name))
    with atomic_output(path) as tmp, library_write(path), open(tmp, "wb") as f:
        for entry in table:
            values = weights[entry.canonical_name].reshape(-1)

            def stored(chunk: np.ndarray, entry: BlobEntry = entry) -> np.ndarray:
                out = narrow(chunk, name)
                _refuse_overflow(entry, chunk, out, name, path)
                return out

            stream(f, Pieces((values.size,), (values,)), stored, shown)


def narrow(blob: np.ndarray, name: str) -> np.ndarray:
    """``blob``'s values as the file stores them at ``name``: little-endian, rounded to nearest even."""
    if name != "bfloat16":
        with np.errstate(over="ignore"):
            return blob.astype(STORED[name], copy=False)
    with np.errstate(over="ignore"):
        bits = np.ascontiguousarray(blob, dtype=np.float32).view(np.uint32).astype(np.uint64)
    # Round to nearest even on the 16 bits dropped; a carry may reach the exponent (and infinity), as it should.
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(blob)
    if nan.any():  # a NaN's payload could round into infinity: keep it a quiet NaN of its sign
        rounded[nan] = ((bits[nan] >> 16) & 0x8000).astype(np.uint16) | 0x7FC0
    return rounded.astype(STORED[name])


def widen(stored: np.ndarray, name: str) -> np.ndarray:
    """The values a file's ``stored`` array holds, as :data:`WIDENED` arrays (bfloat16 exactly, in float32)."""
    if name == "bfloat16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored.astype(WIDENED[name], copy=False)


def _refuse_overflow(entry: BlobEntry, values: np.ndarray, stored: np.ndarray, name: str, path: Path) -> None:
    """A finite weight that became infinite is beyond the dtype's range: nothing is written."""
    if name in ("float32", "float64") and values.dtype.itemsize <= np.dtype(STORED[name]).itemsize:
        return  # widening (or keeping) the dtype loses nothing
    lost = np.isfinite(values) & ~np.isfinite(widen(stored, name))
    if not lost.any():
        return
    at = int(np.argmax(lost))
    largest = (2 - 2.0**-7) * 2.0**127 if name == "bfloat16" else float(np.finfo(WIDENED[name]).max)
    raise RNNXError(f"{path}: {entry.canonical_name} holds {float(values[at]):g}, beyond {name}'s largest value {largest:g} "
                    f"({int(lost.sum())} value(s)); write a wider dtype= (float32)")


def _size_refusal(path: Path, spec: RNNSpec, name: str, count: int, found: int) -> str:
    """Both sizes, and what the found size would fit, where it fits something near."""
    head = f"{path}: expected {count * itemsize(name)} bytes ({count} {name} values) for spec {spec} at dtype {name}, found {found} bytes"
    hints = [f"that is its size as {other} values; pass dtype={other}" for other in STORED
             if other != name and found == count * itemsize(other)]
    other_spec = dataclasses.replace(spec, bias=not spec.bias)
    if found == blob_size(other_spec) * itemsize(name):
        hints.append(f"that is the size for spec {other_spec}" + (" (PyTorch's buffer of a bias=False module ends in zero biases)" if spec.bias is False else ""))
    if found % itemsize(name):
        hints.append(f"{found} bytes is not a whole number of {itemsize(name)}-byte values")
    with open(path, "rb") as f:
        if f.read(len(_ZIP)) == _ZIP:
            hints.append("the file is a zip archive, as a PyTorch checkpoint is: pass from_format=torch")
    return "; ".join([head, *hints] if hints else [head, "check spec= (sizes, layers, bidirectional, proj, no_bias) and dtype="])
