"""What is checked of an ONNX file before its tensors are read: external data that is a plain
file inside the model's folder holding exactly the bytes its tensor's shape takes (a 192-byte
tensor may claim 8 GiB of a sparse file), and opsets onnx can look schemas up for."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.formats.onnx_lazy import is_lazy, stored_tensors
from rnnx.layouts.onnx import DEFAULT_DOMAINS


def check_external_data(model: Any, path: Path, token: str = "") -> None:
    """External data must be a plain file inside the model's folder, and hold the bytes claimed.

    As onnx's own loader does, a symbolic link or a file with other hard links is refused:
    either could make a file from elsewhere on the machine pass for the model's weights.
    """
    from onnx import TensorProto

    base = path.parent.resolve()
    for tensor in stored_tensors(model.graph):
        if tensor.data_location != TensorProto.EXTERNAL or is_lazy(tensor, token):  # this load's skeleton's own refs, made by rnnx
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        where = f"{path}: tensor {tensor.name!r} keeps its data"
        if not location or "\0" in location or len(location) > 4096 or Path(location).is_absolute():
            raise RNNXError(f"{where} at {location[:80]!r}, which is not a relative file name inside the model's folder; rnnx refuses to read it")
        try:
            target = (base / location).resolve()
            inside = base in target.parents
            status = (base / location).lstat() if inside else None
        except FileNotFoundError:
            raise RNNXError(f"{where} in {location[:80]!r}, which does not exist beside the model") from None
        except (OSError, RuntimeError, ValueError) as exc:  # a name too long, a symlink loop
            raise RNNXError(f"{where} at {location[:80]!r}, which cannot be opened ({getattr(exc, 'strerror', None) or exc}); the model is damaged") from None
        if not inside or status is None:  # status is None exactly when outside
            raise RNNXError(f"{where} at {location[:80]!r}, outside the model's folder; rnnx refuses to read it")
        if not stat.S_ISREG(status.st_mode) or status.st_nlink > 1:
            kind = "a symbolic link" if stat.S_ISLNK(status.st_mode) else "a file with other hard links" if stat.S_ISREG(status.st_mode) else "not a regular file"
            raise RNNXError(f"{where} in {location[:80]!r}, which is {kind}; as onnx does, rnnx reads external data only from plain files inside the model's folder")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", status.st_size))
        except ValueError:
            raise RNNXError(f"{path}: tensor {tensor.name!r} has a non-numeric external-data offset or length") from None
        if offset < 0 or length < 0 or offset + length > status.st_size:
            raise RNNXError(f"{path}: tensor {tensor.name!r} claims bytes {offset}..{offset + length} of {location!r}, which has {status.st_size}")
        expected = _stored_bytes(tensor)
        if expected is not None and length != expected:  # a 192-byte tensor claiming 8 GiB of a sparse file is read before anything else
            raise RNNXError(f"{path}: tensor {tensor.name!r}: its {length} stored bytes in {location[:80]!r} do not fit its shape "
                            f"{list(tensor.dims)} ({expected} bytes); the file is damaged")


# bits per element of the ONNX types whose size is fixed (TensorProto.DataType); strings have none
_ELEMENT_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64, 15: 128, 16: 16,
                 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4}


def _stored_bytes(tensor: Any) -> int | None:
    """The bytes a tensor's shape and type take (4-bit types packed two to a byte); None where unknown."""
    bits = _ELEMENT_BITS.get(tensor.data_type)
    if bits is None or any(d < 0 for d in tensor.dims):
        return None
    count = 1
    for d in tensor.dims:
        count *= d
    return (count * bits + 7) // 8


def check_opsets(model: Any, path: Path) -> None:
    """Each opset version must be one onnx can look schemas up for: a positive 32-bit integer,
    and for the default domain no newer than this onnx knows."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        default = entry.domain in DEFAULT_DOMAINS
        if not 1 <= entry.version < (newest + 1 if default else 1 << 31):
            domain = "the default domain" if default else f"domain {entry.domain!r}"
            hint = f"; this onnx knows opsets 1 to {newest}: upgrade onnx if the file is newer" if default else ""
            raise RNNXError(f"{path}: imports opset {entry.version} of {domain}{hint}; the file is damaged or from a newer onnx")
