"""File helpers shared by the formats: atomic writes and safetensors with metadata."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnx.errors import RNNXError

# safetensors' own limit on the JSON header; anything larger is not a safetensors file.
_MAX_HEADER = 100 * 1024 * 1024


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    A failure, Ctrl-C or kill therefore never leaves a partial file under the final name.
    """
    path = Path(path)
    if path.parent and not path.parent.exists():
        raise RNNXError(f"{path}: the folder {path.parent} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent or ".")
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600; give the file the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def require_file(path: Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise RNNXError(f"{path}: expected an existing file, found {'a folder' if path.is_dir() else 'nothing'}")
    return path


def safetensors_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, after checking its header against the file size."""
    path = require_file(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise RNNXError(f"{path}: expected a safetensors file (8-byte header length), found {len(head)} bytes")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER, size - 8):
            raise RNNXError(f"{path}: safetensors header claims {n} bytes but the file has {size}; the file is damaged")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise RNNXError(f"{path}: safetensors header is not valid JSON; the file is damaged") from None
    if not isinstance(header, dict):
        raise RNNXError(f"{path}: safetensors header is not a JSON object; the file is damaged")
    meta = header.get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


def read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (as numpy) and the metadata of a safetensors file."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    meta = safetensors_metadata(path)
    try:
        tensors = load(Path(path).read_bytes())
    except (SafetensorError, ValueError, TypeError) as exc:
        raise RNNXError(f"{path}: cannot read as safetensors ({exc}); the file is damaged or not safetensors") from None
    return tensors, meta


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    from safetensors.numpy import save_file

    with atomic_output(path) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp), metadata=metadata)
