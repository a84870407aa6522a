"""The gate every input passes before a reader opens it: a regular file this user may read (a
FIFO would block a read for ever, a device never end), and an archive whose members do not
claim more than the memory budget once inflated."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

from rnnx import limits
from rnnx.errors import RNNXError


def check_archive(path: Path) -> None:
    """Refuse a zip archive (.pt, .npz, .keras) whose members claim more than the memory budget
    once inflated, before any member is read: a 2 MB zip bomb can claim gigabytes.

    The claims are the central directory's sizes, which zipfile and torch's reader both hold
    a member to; a stored (uncompressed) member must be as large as it claims.
    """
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return  # not a zip (or not one zipfile reads): the format's own reader refuses it
    total = 0
    for info in infos:
        if info.compress_size > size or (info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size):
            raise RNNXError(f"{path}: archive member {info.filename[:80]!r} claims {info.file_size} bytes stored in {info.compress_size}, "
                            f"in a {size}-byte file; the archive is damaged")
        total += info.file_size
    # The inflated bytes are held while the arrays are built from them: two copies at the peak.
    limits.check_claim(f"{path}: inflating its {len(infos)} archive member(s)", 2 * total, size)


def kind_of(path: Path) -> str:
    """What is at ``path``, in words, for a message that refuses it (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else "nothing"
    except OSError as exc:
        return f"a path that cannot be opened ({exc.strerror})"
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO), which rnnx does not read: it could block for ever"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISREG, "a regular file")):
        if test(mode):
            return words
    return "something that is not a regular file"


def require_file(path: Path) -> Path:
    path = Path(path)
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise RNNXError(f"{str(path)[:60]}: expected an existing file, found a path that cannot be opened ({getattr(exc, 'strerror', None) or exc})") from None
    if not found:
        raise RNNXError(f"{path}: expected an existing file, found {kind_of(path)}")
    try:  # a file this user may not read is refused here, not as whatever its format's reader makes of the error
        os.close(os.open(path, os.O_RDONLY))
    except PermissionError:
        raise RNNXError(f"{path}: expected a file you can read, found one you may not (permission denied); change its permissions or run as a user who can") from None
    return path
