"""File helpers shared by the formats: atomic writes and safetensors with metadata."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import struct
import tempfile
from collections.abc import Iterable, Iterator
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
    _refuse_special(path, "output")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent or ".")
    os.close(fd)
    try:
        yield Path(tmp)
        if path.is_file():  # replacing a file: keep its permissions (a 0600 file stays private)
            mode = stat.S_IMODE(path.stat().st_mode)
        else:  # mkstemp creates 0600; give a new file the permissions a plain open() would have
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        _refuse_special(path, "output")  # it may have become one while we worked
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _refuse_special(path: Path, role: str) -> None:
    if path.is_dir():
        raise RNNXError(f"{path}: the {role} is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise RNNXError(f"{path}: the {role} exists and is not a regular file (a device, pipe or socket); rnnx writes by renaming and would replace it; choose another path")


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)  # hard links, bind mounts
    except OSError:
        return False


def refuse_overwriting(inputs: Iterable[Path | str | None], outputs: dict[str, Path | str | None]) -> None:
    """No output may be an input (by any name: links, hard links), another output, a folder
    or a special file. ``outputs`` maps each output's option (``-o``, ``--report``) to its path."""
    ins = [Path(p) for p in inputs if p]
    given = [(flag, Path(p)) for flag, p in outputs.items() if p]
    for k, (flag, out) in enumerate(given):
        _refuse_special(out, f"{flag} output")
        for src in ins:
            if _same(out, src):
                raise RNNXError(f"{flag} {out}: would overwrite the input {src}; choose another path")
        for other_flag, other in given[:k]:
            if _same(out, other):
                raise RNNXError(f"{flag} {out}: is also the {other_flag} output; give each output its own path")


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
