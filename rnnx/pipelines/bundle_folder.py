"""Where a bundle goes: ``-o`` is a new folder, or one an earlier ``rnnx bundle`` wrote, which is
replaced whole (a CI job that reruns). Nothing rnnx did not write is ever deleted.

An earlier bundle is recognised by what it holds, not by the names of two files in it: its
BUNDLE.json must parse, say rnnx bundle wrote it, and list every file in the folder with the
size and SHA-256 it has now. Besides those, only what build.sh and check.sh make on the device
may be there (the engine, its log, the timing cache, ``out/``). A file it does not list, a
listed file that was edited, or a symbolic link anywhere means refusal, naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import NoReturn

from rnnx.errors import RNNXError
from rnnx.fileio import file_sha256, staging_folder

WRITTEN_BY = "rnnx bundle"
# What the folder's own scripts write on the device (build.sh, check.sh, check.py --carry): not listed, theirs to replace.
DEVICE_FILES = ("model.engine", "build.log", "timing.cache")
DEVICE_FOLDER = "out"
_MAX_MANIFEST = 64 << 20  # a BUNDLE.json lists files and their hashes: far below this


def earlier_bundle(folder: Path) -> bool:
    """True where ``folder`` is an earlier bundle (to be replaced), False where nothing is there;
    anything else is refused in one line that names what was found."""
    if not os.path.lexists(folder):
        return False
    if os.path.islink(folder) or not folder.is_dir():
        raise RNNXError(f"-o {folder}: expected a new folder or one rnnx bundle wrote, found {'a symbolic link' if os.path.islink(folder) else 'a file'} "
                        "there; remove it or choose another name")
    listed = _listed_files(folder)
    for path in sorted(_walk(folder)):
        relative = path.relative_to(folder).as_posix()
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            _refuse(folder, relative, "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file")
        if stat.S_ISDIR(mode) or relative in (*DEVICE_FILES, "BUNDLE.json") or relative.split("/")[0] == DEVICE_FOLDER:
            continue
        want = listed.get(relative)
        if want is None:
            _refuse(folder, relative, "a file rnnx bundle did not write")
        if path.stat().st_size != want["bytes"] or file_sha256(path) != want["sha256"]:
            _refuse(folder, relative, "a file rnnx bundle wrote, changed since")
    return True


def _walk(folder: Path) -> list[Path]:
    """Every entry under ``folder``, links not followed."""
    found = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        found += [Path(top) / name for name in (*dirs, *files)]
    return found


def _listed_files(folder: Path) -> dict[str, dict]:
    """BUNDLE.json's files, each {bytes, sha256}, where the folder's BUNDLE.json is rnnx bundle's (format 1 listed hashes alone)."""
    manifest = folder / "BUNDLE.json"
    what = "a folder it did not write (no BUNDLE.json)"
    if os.path.islink(manifest) or (manifest.exists() and not manifest.is_file()):
        what = "a folder whose BUNDLE.json is not a plain file"
    elif manifest.is_file():
        try:
            if manifest.stat().st_size > _MAX_MANIFEST:
                raise ValueError("too large")
            data = json.loads(manifest.read_text(encoding="utf-8"))
            files = data["files"]
            if data.get("format") == 1:
                files = {k: {"sha256": v, "bytes": (folder / k).stat().st_size if (folder / k).is_file() else -1} for k, v in files.items()}
            elif data.get("format") != 2 or not str(data.get("written_by", "")).startswith(WRITTEN_BY):
                raise ValueError("not written by rnnx bundle")
            if not all(isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("sha256"), str) for k, v in files.items()):
                raise ValueError("files are not listed with their hashes")
            return files
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            what = "a folder whose BUNDLE.json is not one rnnx bundle wrote"
    raise RNNXError(f"-o {folder}: expected a new folder or one rnnx bundle wrote, found {what}; remove it or choose another name")


def _refuse(folder: Path, relative: str, what: str) -> NoReturn:
    raise RNNXError(f"-o {folder}: expected a folder rnnx bundle wrote, to replace whole, found {relative} in it, {what}; nothing was "
                    "deleted: move it out, or choose another folder")


def move_into_place(staging: Path, folder: Path, replacing: bool) -> None:
    """Rename the checked ``staging`` folder to ``folder``; an earlier bundle there goes aside first,
    and comes back if the rename fails."""
    try:
        if not replacing:
            os.rename(staging, folder)  # fails, rather than merging, if a folder appeared there meanwhile
            return
        with staging_folder(folder.parent, "old") as old:
            os.replace(folder, old / "bundle")
            try:
                os.replace(staging, folder)
            except OSError:
                os.replace(old / "bundle", folder)
                raise
    except OSError as exc:
        raise RNNXError(f"-o {folder}: could not move the bundle into place ({exc.strerror}); nothing was changed there") from None
