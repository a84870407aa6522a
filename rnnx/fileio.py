"""File helpers shared by the formats: atomic writes and safetensors with metadata."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rnnx import progress
from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.input_gate import check_archive, kind_of, require_file  # noqa: F401  (the readers import them from here)
from rnnx.tensor_pieces import CHUNK_BYTES, Pieces, as_pieces

# safetensors' own limit on the JSON header; anything larger is not a safetensors file.
_MAX_HEADER = 100 * 1024 * 1024
_MAX_RANK = 32  # numpy holds 64 dimensions at most; no weight has more than a handful


# The temporary file of each output being written in this thread, by final path. A writer
# nested inside a checked write (convert: write, then run the written file, then rename)
# writes into the outer temporary file instead of renaming its own over the final name.
_pending: contextvars.ContextVar[dict[Path, Path]] = contextvars.ContextVar("rnnx_pending_outputs", default={})  # noqa: B039  never mutated: each writer sets a new dict
# Every temporary output file in this process, for the signal handler (which may run in any context).
_in_flight: set[str] = set()


def _temporary_beside(path: Path) -> str:
    """A new empty 0600 file beside ``path``, registered for removal *before* it exists: a
    SIGTERM between creating and registering it (mkstemp, then a set's add) left it behind.
    The name ends as the final one does, so that readers that go by extension can check it."""
    folder = str(path.parent or ".")
    suffix = ".part" + "".join(path.suffixes[-2:])[:40]
    for _ in range(100):
        tmp = os.path.join(folder, f".{path.name[:100]}.{secrets.token_hex(4)}{suffix}")
        _in_flight.add(tmp)
        fd = -1
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            return tmp
        except FileExistsError:
            _in_flight.discard(tmp)
        except BaseException:  # an OS error, or a signal's exit: nothing of ours stays behind
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            _in_flight.discard(tmp)
            raise
    raise FileExistsError(errno.EEXIST, "no free temporary name", folder)


def remove_partial_outputs() -> None:
    """Delete every temporary output still being written, files and staging folders (from a
    SIGTERM/SIGHUP handler)."""
    for tmp in list(_in_flight):
        if os.path.isdir(tmp) and not os.path.islink(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def staging_folder(parent: Path, kind: str) -> Iterator[Path]:
    """A new hidden folder in ``parent`` for an output folder being written, registered for removal
    before it exists (a signal between the two leaves nothing), removed on any failure or signal.
    Its name is short (``.rnnx-KIND-XXXXXXXX``), so that any name the final folder may have fits.
    The caller renames it into place; what is left of it here is removed."""
    for _ in range(100):
        path = os.path.join(str(parent), f".rnnx-{kind}-{secrets.token_hex(4)}")
        _in_flight.add(path)
        try:
            os.mkdir(path, 0o777)  # the umask applies, as to a folder the user makes
            break
        except FileExistsError:
            _in_flight.discard(path)
        except BaseException:
            _in_flight.discard(path)
            raise
    else:
        raise FileExistsError(errno.EEXIST, "no free staging name", str(parent))
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _in_flight.discard(path)


WRITTEN_LOG = "RNNX_WRITTEN_LOG"  # environment: a file to which each ONNX file rnnx writes is appended


def _log_written(path: Path) -> None:
    """For audits of what a run wrote (the test suite verifies every ONNX file it makes):
    one absolute path per line, appended in one write so parallel writers do not interleave."""
    log = os.environ.get(WRITTEN_LOG)
    if log and path.suffix.lower() == ".onnx":
        with open(log, "a", encoding="utf-8") as f:
            f.write(str(path.absolute()) + "\n")


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    Every file rnnx writes goes through here: the data is flushed to disk (fsync) before
    the rename, the rename is atomic, an existing file keeps its permissions, and a failure,
    Ctrl-C, SIGTERM or SIGHUP never leaves a partial file under the final name or beside it.
    Nested calls for the same path share the outer temporary file, so the outer caller can
    check what was written before anything is renamed into place.
    """
    path = Path(path)
    key = path.absolute()
    outer = _pending.get()
    if key in outer:
        yield outer[key]
        return
    _refuse_special(path, "output")
    if path.parent and not path.parent.exists():
        raise RNNXError(f"{path}: the folder {path.parent} does not exist; create it first")
    try:
        tmp = _temporary_beside(path)
    except OSError as exc:
        raise RNNXError(f"{path}: cannot create a file in {path.parent or '.'} ({exc.strerror}); choose a writable folder") from None
    token = _pending.set({**outer, key: Path(tmp)})
    try:
        yield Path(tmp)
        if path.is_file():  # replacing a file: keep its permissions (a 0600 file stays private)
            mode = stat.S_IMODE(path.stat().st_mode)
        else:  # mkstemp creates 0600; give a new file the permissions a plain open() would have
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        _fsync(tmp)
        _refuse_special(path, "output")  # it may have become one while we worked
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise RNNXError(f"{path}: cannot write it ({exc.strerror}); choose another path") from None
        _fsync(path.parent or Path("."), folder=True)
        _log_written(path)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.EFBIG):
            raise write_failure(path, exc) from None
        raise
    finally:
        _pending.reset(token)
        if os.path.lexists(tmp):
            os.unlink(tmp)
        _in_flight.discard(tmp)


# How a library's own write error reads when the disk, quota or file-size limit is the cause:
# h5py, safetensors and torch wrap the OS error in their own exception types.
# torch.save's writer, on a full disk, says "unexpected pos N vs M" or "file write failed".
_IO_FAILURE = ("errno", "os error", "i/o error", "no space", "file too large", "quota", "read-only file system", "failed writing",
               "unexpected pos", "file write failed")
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full(folder: Path) -> bool:
    """Whether the file system holding ``folder`` has (next to) no room left for this user."""
    try:
        found = os.statvfs(folder)
    except (OSError, AttributeError):
        return False
    return found.f_bavail * found.f_frsize < 1 << 20


def write_failure(path: Path, exc: BaseException) -> RNNXError:
    """The one line for an output that could not be written: the disk is full, the folder is not
    writable, or the library's own words where neither is the cause. Nothing was written either way
    (:func:`atomic_output` removes the temporary file)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    code = getattr(exc, "errno", None)
    if code in _FULL or (code is None and _disk_full(folder)):
        return RNNXError(f"{path}: the disk holding {folder} is full (no space left on device); nothing was written: free space or choose another path")
    if code == errno.EFBIG:
        return RNNXError(f"{path}: the file is too large for this file system or its size limit (ulimit -f); nothing was written: choose another path")
    if code == errno.EROFS:
        return RNNXError(f"{path}: the file system holding {folder} is read-only; nothing was written: choose another path")
    if code in (errno.EACCES, errno.EPERM):
        return RNNXError(f"{path}: permission denied writing in {folder}; nothing was written: choose a folder you can write")
    detail = one_line(getattr(exc, "strerror", None) or exc, DETAIL_CHARS)
    return RNNXError(f"{path}: writing failed ({detail}); nothing was written: free space or choose another path")


@contextlib.contextmanager
def library_write(path: Path) -> Iterator[None]:
    """Around a library's serialiser (h5py, safetensors, torch.save, onnx.save): a write that
    fails for lack of room is the user's to fix, so it is one line, not an internal error."""
    try:
        yield
    except RNNXError:
        raise
    except Exception as exc:
        text = one_line(exc, None)
        if isinstance(exc, OSError) or any(marker in text.lower() for marker in _IO_FAILURE):
            raise write_failure(path, exc) from None
        raise


def _fsync(path: Path | str, folder: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if folder else 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        if not folder:  # some file systems cannot sync a folder; a file that cannot be synced is not safely written
            raise
    finally:
        os.close(fd)


def _refuse_special(path: Path, role: str) -> None:
    try:
        limit = os.pathconf(path.parent if str(path.parent) else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(path.name)) > limit:
        raise RNNXError(f"{path.name[:40]}...: the {role} name is {len(os.fsencode(path.name))} bytes, over this file system's limit of {limit}; choose a shorter name")
    try:
        is_dir, exists, is_file = path.is_dir(), path.exists(), path.is_file()
    except OSError as exc:  # a path too long, a loop of links
        raise RNNXError(f"{str(path)[:60]}...: the {role} cannot be used ({exc.strerror}); choose another path") from None
    if is_dir:
        raise RNNXError(f"{path}: the {role} is a folder; give a file name")
    if exists and not is_file:
        raise RNNXError(f"{path}: the {role} exists and is not a regular file (a device, pipe or socket); rnnx writes by renaming and would replace it; choose another path")


def _same(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):
        return False
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


# safetensors' dtype codes that numpy holds as they are; BF16 is widened to float32 exactly.
_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
                       "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?", "BF16": "<u2"}


def _safetensors_header(path: Path) -> tuple[dict, int, int]:
    """The JSON header of a safetensors file, checked against the file size: (header, data start, file size)."""
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
        except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, integers past 4300 digits
            raise RNNXError(f"{path}: safetensors header is not valid JSON; the file is damaged") from None
    if not isinstance(header, dict):
        raise RNNXError(f"{path}: safetensors header is not a JSON object; the file is damaged")
    return header, 8 + n, size


def safetensors_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, after checking its header against the file size."""
    return _metadata_of(_safetensors_header(path)[0])


def _metadata_of(header: dict) -> dict[str, str]:
    meta = header.get("__metadata__") or {}
    return {k: v for k, v in meta.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(meta, dict) else {}


def read_safetensors(path: Path, mapped: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (as numpy) and the metadata of a safetensors file.

    Read by rnnx itself, as safetensors specifies the format: each tensor's offsets must lie
    inside the data and match its shape and dtype before any byte is read. The arrays are
    read-only views of a memory map of the file (``mapped``; else writable copies), so a
    large checkpoint is paged in as it is used and never held twice. BF16 (common in
    checkpoints) is widened to float32 exactly; float8 is refused in one line.
    """
    header, start, size = _safetensors_header(path)
    tensors: dict[str, np.ndarray] = {}
    data = np.memmap(path, dtype=np.uint8, mode="r") if mapped and size > start else None
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            np_dtype, shape, begin, end = _tensor_entry(path, name, info, size - start)
            where = f"{path}: tensor {name!r}"
            try:
                if data is not None:
                    raw = data[start + begin:start + end].view(np_dtype) if end > begin else np.empty(0, np_dtype)
                else:
                    f.seek(start + begin)
                    raw = np.frombuffer(bytearray(f.read(end - begin)), dtype=np_dtype)  # writable, not copied again
                array = raw.reshape(shape)
            except ValueError:  # numpy refuses the shape itself (an empty tensor with absurd other sizes)
                raise RNNXError(f"{where}: shape {str(shape)[:80]} is not one numpy can hold; the file is damaged") from None
            if info["dtype"] == "BF16":  # the top half of a float32
                array = (array.astype(np.uint32) << 16).view(np.float32)
            tensors[name] = array
    return tensors, _metadata_of(header)


def _tensor_entry(path: Path, name: str, info: object, data_bytes: int) -> tuple[np.dtype, list[int], int, int]:
    """One header entry checked: (dtype, shape, first byte, end) inside the file's data."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or not isinstance(info.get("shape"), list) or not isinstance(info.get("data_offsets"), list):
        raise RNNXError(f"{where}: expected dtype, shape and data_offsets; the file is damaged")
    dtype, shape, offsets = info.get("dtype"), info["shape"], info["data_offsets"]
    if isinstance(dtype, str) and dtype.startswith("F8"):
        raise RNNXError(f"{where} is {dtype}; rnnx reads float32/16/64 and bfloat16 weights: dequantize the checkpoint first")
    if not isinstance(dtype, str) or dtype not in _SAFETENSORS_DTYPES:
        raise RNNXError(f"{where}: unknown dtype {dtype!r}; expected one of {', '.join(_SAFETENSORS_DTYPES)}")
    if len(shape) > _MAX_RANK or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 48 for d in shape) or len(offsets) != 2 \
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
        raise RNNXError(f"{where}: shape {str(shape)[:80]} or offsets {str(offsets)[:80]} are not {_MAX_RANK} or fewer sizes and two offsets; the file is damaged")
    np_dtype = np.dtype(_SAFETENSORS_DTYPES[dtype])
    begin, end = offsets
    count = int(np.prod(shape, dtype=object))
    if not 0 <= begin <= end <= data_bytes or end - begin != count * np_dtype.itemsize:
        raise RNNXError(f"{where}: its bytes ({begin}..{end}) do not fit its shape {shape} and dtype {dtype} inside the file; the file is damaged")
    return np_dtype, shape, begin, end


#: The safetensors dtype code of each numpy dtype rnnx writes.
_WRITTEN_DTYPES = {np.dtype(v).newbyteorder("<"): k for k, v in _SAFETENSORS_DTYPES.items() if k != "BF16"}


def write_safetensors(path: Path, tensors: Mapping[str, np.ndarray | Pieces], metadata: dict[str, str]) -> None:
    """A safetensors file written tensor by tensor: the header first (every offset is known
    from the shapes), then each tensor's bytes streamed from its parts (:class:`Pieces`), so
    nothing is assembled in memory. Readable by the safetensors library and torch."""
    pieces = {name: as_pieces(value) for name, value in tensors.items()}
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    # As the safetensors library does: wider dtypes first, so that every tensor stays aligned to its element size.
    order = sorted(pieces, key=lambda n: -pieces[n].dtype.itemsize)
    for name in order:
        p = pieces[name]
        code = _WRITTEN_DTYPES.get(p.dtype.newbyteorder("<"))
        if code is None:
            raise RNNXError(f"tensor {name!r}: safetensors has no dtype for {p.dtype}")
        header[name] = {"dtype": code, "shape": list(p.shape), "data_offsets": [offset, offset + p.nbytes]}
        offset += p.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the library pads it
    shown = progress.Bytes(f"writing {path.name}", offset)
    with atomic_output(path) as tmp, library_write(path), open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            stream(f, pieces[name], shown=shown)


def stream(f: BinaryIO, pieces: Pieces, convert: Callable[[np.ndarray], np.ndarray] | None = None,
           shown: progress.Bytes | None = None) -> int:
    """Write ``pieces``' elements to ``f`` as little-endian values, chunk by chunk, each chunk
    first passed through ``convert`` when given (a change of dtype); returns the bytes written.

    Each chunk is copied into one staging buffer before it is written: the kernel writes from
    a memory map far more slowly than a copy pages it in (measured: 3 s against 0.1 s for
    369 MB from torch's mapped checkpoint), the buffer is reused, so memory stays one chunk, and
    a mapped input cut short by another process fails in the copy, as the bus error the CLI
    reports, not as a puzzling EFAULT from write()."""
    written = 0
    staging: np.ndarray | None = None
    for chunk in pieces.chunks():
        out = chunk if convert is None else convert(chunk)
        if out is chunk or np.may_share_memory(out, chunk):  # still the source's memory (a map): stage it
            if staging is None or staging.dtype != out.dtype.newbyteorder("<"):
                staging = np.empty(min(pieces.size, max(CHUNK_BYTES // out.dtype.itemsize, 1)), dtype=out.dtype.newbyteorder("<"))
            np.copyto(staging[:out.size], out.reshape(-1))
            out = staging[:out.size]
        out = np.ascontiguousarray(out, dtype=out.dtype.newbyteorder("<"))
        f.write(out.data.cast("B"))
        written += out.nbytes
        if shown is not None:
            shown.add(out.nbytes)
    return written


def file_sha256(path: Path | str) -> str:
    """The SHA-256 of a file's bytes, read 1 MiB at a time (an engine or an ONNX file may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
