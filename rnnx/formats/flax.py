"""``flax``: parameter trees of Flax's recurrent cells (flax.linen and flax.nnx), in memory
and as the ``.msgpack`` files of ``flax.serialization.to_bytes``.

What Flax users save with Flax itself is ``flax.serialization.to_bytes(tree)``: linen's
variables or params, a ``TrainState``, or an nnx state's pure dict (``nnx.State`` itself
does not serialise; ``state.to_pure_dict()`` does). rnnx reads any of these and finds the
recurrent cells, RNNs and Bidirectionals in it (``select=`` names one by its '/'-joined
path where there are several; the optimizer state's copies are skipped). It writes linen's
``{"params": ...}`` of one RNN or Bidirectional, which ``flax.serialization.from_bytes``
loads into that module's variables. An nnx tree comes from
``rnnx.to_format(weights, "flax", flavor="nnx")``.

The file is read with ``msgpack`` alone and Flax's own array encoding (extension type 1:
shape, dtype name, row-major bytes), so reading runs no Flax and no pickle. Every length
the file claims is held to the file's size before anything is allocated.
Orbax checkpoints (directories) are not read: restore them with Orbax and pass the tree to
``rnnx.from_format``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits, parity
from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.fileio import atomic_output, library_write, require_file
from rnnx.formats.registry import register_module
from rnnx.layouts.flax import find_groups, from_group, from_tree, refusals, select_group, to_tree
from rnnx.spec import RNNSpec
from rnnx.tolerance import BY_DTYPE, compare_arrays
from rnnx.weights import RNNWeights

#: Flax's msgpack extension codes (flax/serialization.py, _MsgpackExtType).
EXT_NDARRAY = 1
EXT_SCALAR = 3
#: dtype names a parameter may have; anything else in a file (step counters, rng keys) is
#: kept as a marker, never decoded.
_FLOAT_DTYPES = {"float16": "<f2", "float32": "<f4", "float64": "<f8", "bfloat16": "<u2"}


class _Other:
    """A leaf that no recurrent cell holds (an integer counter, a key, a string)."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"<{self.dtype} leaf>"


def _decode_array(data: bytes, path: Path) -> Any:
    import msgpack

    try:
        shape, dtype, buffer = msgpack.unpackb(data, raw=True, max_bin_len=len(data), max_array_len=64, max_str_len=64)
        dtype = dtype.decode("ascii") if isinstance(dtype, bytes) else str(dtype)
        shape = tuple(int(n) for n in shape)
    except Exception:  # noqa: BLE001  any failure to parse an array record means a damaged file
        raise RNNXError(f"{path}: an array record is malformed (expected Flax's (shape, dtype, bytes)); the file is damaged") from None
    if dtype not in _FLOAT_DTYPES:
        return _Other(dtype)
    if len(shape) > 32 or any(n < 0 for n in shape):
        raise RNNXError(f"{path}: an array claims shape {shape[:8]}; the file is damaged")
    itemsize = np.dtype(_FLOAT_DTYPES[dtype]).itemsize
    count = int(np.prod(shape, dtype=object))
    if count * itemsize != len(buffer):
        raise RNNXError(f"{path}: an array of shape {shape} and {dtype} needs {count * itemsize} bytes, found {len(buffer)}; the file is damaged or truncated")
    array = np.frombuffer(buffer, dtype=_FLOAT_DTYPES[dtype]).reshape(shape)
    if dtype == "bfloat16":  # widened to float32 exactly: bfloat16 is float32's top half
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


def read_tree(path: Path) -> Any:
    """The tree a ``flax.serialization.to_bytes`` file holds, float arrays decoded."""
    import msgpack

    path = require_file(path)
    size = path.stat().st_size
    limits.check_claim(f"{path}", size, size)
    data = path.read_bytes()

    def ext_hook(code: int, payload: bytes) -> Any:
        if code in (EXT_NDARRAY, EXT_SCALAR):
            return _decode_array(payload, path)
        return _Other(f"ext{code}")

    try:
        # Every length is bounded by the file's own size: a claim beyond it is a lie.
        tree = msgpack.unpackb(data, ext_hook=ext_hook, raw=False, strict_map_key=False,
                               max_bin_len=size, max_str_len=size, max_ext_len=size, max_array_len=size, max_map_len=size)
    except RNNXError:
        raise
    except Exception as exc:  # noqa: BLE001  msgpack's parser raises several types for damaged input
        reason = "nested too deeply" if type(exc).__name__ == "StackError" else one_line(exc, DETAIL_CHARS)
        raise RNNXError(f"{path}: cannot read as Flax msgpack ({reason}); the file is damaged, truncated or not flax.serialization's") from None
    if not isinstance(tree, dict):
        raise RNNXError(f"{path}: expected a Flax state dict (a msgpack map), found a {type(tree).__name__}")
    return tree


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    return from_group(select_group(read_tree(path), select, where=str(path)), spec)


def groups(path: Path) -> list[str]:
    return [g.path for g in find_groups(read_tree(path))]


def _pack(tree: Any) -> bytes:
    """flax.serialization.to_bytes's encoding of a tree of float arrays."""
    import msgpack

    def default(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            record = (obj.shape, obj.dtype.name, np.ascontiguousarray(obj).tobytes("C"))
            return msgpack.ExtType(EXT_NDARRAY, msgpack.packb(record, use_bin_type=True))
        raise TypeError(f"cannot encode {type(obj).__name__}")

    return msgpack.packb(tree, default=default, strict_types=True)


def write(weights: RNNWeights, path: Path) -> None:
    data = _pack(to_tree(weights, flavor="linen"))
    with atomic_output(path) as tmp, library_write(path):
        tmp.write_bytes(data)
        # Checked before the rename: what was written reads back to weights that compute the
        # same outputs (biases that only add were folded into one, so not the same tensors).
        back = from_group(select_group(read_tree(tmp), None, where=str(path)), weights.spec)
        # Both sides are the float64 reference, so only the folding's rounding in the weights'
        # dtype separates them: the fixed tolerance of that dtype, no calibration (that is
        # rnnx.check's, a layer above; convert's check then runs the file in Flax itself).
        dtype = weights.dtype.name if weights.dtype.name in ("float16", "float64") else "float32"
        inputs = parity.random_inputs(weights, 3, 2, dtype=dtype)
        want, got = parity.reference_outputs(weights, inputs), parity.reference_outputs(back, inputs)
        off = {name: compare_arrays(got[name], want[name], BY_DTYPE[dtype]) for name in want}
        bad = next((f"{name}: {stats}" for name, stats in off.items() if not stats.passed), None)
        if bad is not None:
            raise AssertionError(f"{path}: the written Flax file does not compute what the weights do: {bad}")


register_module(
    globals(), name="flax", to_native=to_tree, from_native=from_tree, refusals=refusals, extensions=(".msgpack",),
    description="Flax parameter trees of LSTMCell, OptimizedLSTMCell, GRUCell, SimpleCell, RNN and Bidirectional "
    "(flax.linen and flax.nnx); .msgpack files of flax.serialization.to_bytes",
    options={"flavor": "linen (default) or nnx", "cell_class": "OptimizedLSTMCell for nnx's fused LSTM",
             "module": "rnn (RNN or Bidirectional, default) or cell"},
)
