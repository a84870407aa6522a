"""Run one verb: parse, set the budgets, call it, and turn what it raised into an exit status.

Exit status: 0 success, 1 a parity check failed, 2 bad input or usage, 3 an internal error
(a bug in rnnx: the message says so; --debug shows the traceback). An input this user may not
read, an output folder it may not write or a full disk is bad input (2), not a bug.

With --json a failing run prints one JSON object on stdout (rnnx/cli/schema/error.json) besides
its one line on stderr, unless the verb printed its own report first (convert's, export's,
verify's, doctor's, with passed false). A run that succeeds prints its verb's report, one object
as rnnx/cli/schema/<verb>.json describes it (commands.json_report).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import re
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from rnnx import progress
from rnnx.cli.flags import flagged
from rnnx.cli.groups import CommonArgs
from rnnx.cli.parser import build_parser
from rnnx.errors import CAUSE_CHARS, ParityError, RNNXError, one_line
from rnnx.fileio import remove_partial_outputs, write_failure

INTERNAL_ERROR = 3
_STEPPED_VERBS = ("convert", "export", "fuse", "lower", "verify")
_running = ["rnnx"]  # the verb, for the signal handler's message


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP (what `timeout`, CI runners and closed terminals send): remove the
    half-written outputs and leave at once. Raising an exception here instead could unwind
    through a native library's frames (torch's, mid-import) and abort the process."""
    remove_partial_outputs()
    os.write(2, f"rnnx {_running[0]}: stopped by {signal.Signals(signum).name}; no output was left behind\n".encode())
    os._exit(128 + signum)


BAD_INPUT = 2
_registered: list[object] = []


def _bus_error_handler() -> tuple[Any, tuple[Any, Any]] | None:  # ctypes' handler, and libc with the handler it replaced
    """A bus error (SIGBUS) is what reading a memory-mapped input gives once another process has
    cut the file short. Python cannot handle it (the faulting read would repeat for ever), so a
    C-level handler, made with ctypes, removes the half-written outputs, says so in one line and
    exits with the status for bad input. Returns what to restore (None where ctypes cannot)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        kind = ctypes.CFUNCTYPE(None, ctypes.c_int)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None

    def on_bus_error(signum: int) -> None:
        remove_partial_outputs()
        os.write(2, f"rnnx {_running[0]}: an input file shrank while it was read (a bus error on its memory map): another process "
                    "changed it; no output was left behind: convert it again once it is complete\n".encode())
        os._exit(BAD_INPUT)

    handler = kind(on_bus_error)
    _registered.append(handler)  # the callback must outlive its registration, which may last until the process exits
    previous = libc.signal(signal.SIGBUS, ctypes.cast(handler, ctypes.c_void_p))
    return handler, (libc, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's own arguments). Called with ``argv``
    (in-process: tests, notebooks), the caller gets its signal handlers back afterwards. As the
    program itself, once the verb is done SIGTERM and SIGHUP are ignored: the interpreter's
    shutdown (torch's takes most of a second) restores their default action, and a signal then
    would kill a process whose work is finished and written."""
    handlers = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    bus = _bus_error_handler()
    try:
        return _main(argv)
    finally:
        if argv is None:  # ignored, not blocked: a blocked signal still reaches the other threads (ONNX Runtime's, torch's)
            for sig in handlers:
                signal.signal(sig, signal.SIG_IGN)
        else:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            if bus is not None:
                libc, previous = bus[1]
                libc.signal(signal.SIGBUS, previous)


# OS errors that are the environment's, not a bug: a file this user may not read or a folder it
# may not write, a full disk, a read-only file system, a folder where a file was expected.
_ENVIRONMENT = {errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG,
                errno.ENAMETOOLONG, errno.ELOOP}


def _environment_error(exc: OSError) -> str | None:
    """The one line for an OS error the user's environment caused (None where it is a bug)."""
    if exc.errno not in _ENVIRONMENT:
        return None
    path = exc.filename or exc.filename2
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
        return str(write_failure(Path(path) if path else Path("output"), exc)) if path else \
            f"writing failed ({exc.strerror}); nothing was written: free space or choose another path"
    where = f"{path}: " if path else ""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"{where}permission denied; expected a file you can read (and, for an output, a folder you can write): "
                "change its permissions or run as a user who can")
    if exc.errno == errno.EISDIR:
        return f"{where}expected a file, found a folder; give a file name"
    return f"{where}the path cannot be used ({exc.strerror}); choose another path"


def _without_prefix(text: str, verb: str) -> str:
    """A message that already names the program or the verb ("rnnx export: ...", "export: ...")
    gets the prefix once, from the CLI."""
    return re.sub(rf"^(?:(?:rnnx )?{re.escape(verb)}: )+", "", text)


class _Watched(io.TextIOBase):
    """sys.stdout, noting whether the verb printed anything (its own JSON report)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.used = False

    def write(self, text: str) -> int:
        self.used = self.used or bool(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()


def _concerns(line: str, args: object, exc: BaseException | None) -> dict[str, str]:
    """Which input, output or flag a refusal is about, where its message says so: it starts with
    the path or the flag (``--report out.json: ...``, ``model.pt: ...``), or the OS error names the file."""
    found: dict[str, str] = {}
    if isinstance(exc, OSError) and (exc.filename or exc.filename2):
        found["path"] = str(exc.filename or exc.filename2)
        return found
    head = line.split(": ", 1)[0] if ": " in line else ""
    if head.startswith("--"):
        flag, _, rest = head.partition(" ")
        found["flag"] = flag
        if rest:
            found["path"] = rest
        return found
    given: set[str] = set()
    for value in vars(args).values() if hasattr(args, "__dict__") else ():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            # a path the user gave: a Path argument, or a string naming a file (not a flag's word, like a backend's "ort")
            if isinstance(item, Path) or (isinstance(item, str) and Path(item).exists()):
                given.add(str(item))
    if head and (head in given or Path(head).name in {Path(g).name for g in given if g}):
        found["path"] = head
    return found


MAX_LINE = 1000  # characters of an error's one line


def _report(args: object, verb: str, code: int, line: str, exc: BaseException | None, stdout: _Watched | None) -> int:
    """Print the failure's one line on stderr and, with --json, one JSON object on stdout (unless
    the verb already printed its own report, as verify does when a check fails). A line that
    would echo a huge argument back is cut in its middle: what failed and what to do stay."""
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE // 2] + f" [... {len(line) - MAX_LINE} characters ...] " + line[-MAX_LINE // 2:]
    print(line, file=sys.stderr)
    if stdout is not None and not stdout.used:
        kind = {1: "parity", 2: "bad_input", INTERNAL_ERROR: "internal", 130: "interrupted"}.get(code, "error")
        message = {"passed": False, "exit_code": code, "error": line, "kind": kind, "verb": verb,
                   **_concerns(line.removeprefix(f"rnnx {verb}: "), args, exc)}
        print(json.dumps(message), file=stdout._stream)
    return code


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """argparse's own parse; with --json, a usage error is also one JSON object on stdout."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    options = tokens[:tokens.index("--")] if "--" in tokens else tokens
    if "--json" not in options:
        return parser.parse_args(argv)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return parser.parse_args(argv)
    except SystemExit as stop:
        text = said.getvalue()
        sys.stderr.write(text)
        if stop.code not in (0, None):
            line = " ".join(text.strip().splitlines()[-1:]) if text.strip() else "usage error"
            verb = next((t for t in tokens if not t.startswith("-")), None)
            print(json.dumps({"passed": False, "exit_code": stop.code, "error": line, "kind": "usage", "verb": verb}))
        raise


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)  # argparse itself exits 2 on usage errors
    if args.command is None:
        parser.print_help()
        return 2
    _running[0] = verb = args.command
    prefix = f"rnnx {verb}: "
    # What a long verb is doing, for a person at a terminal; pipelines and --json get none.
    shown = verb in _STEPPED_VERBS and sys.stderr.isatty() and not getattr(args, "json", False)
    stdout = _Watched(sys.stdout) if getattr(args, "json", False) else None
    real_stdout = sys.stdout
    try:
        if stdout is not None:
            sys.stdout = stdout
        with CommonArgs.parse(args), progress.shown(f"rnnx {verb}", shown):
            if args.debug:
                return args.func(args)
            # Other libraries' warnings (torch, onnx, h5py) would add lines to a one-line
            # report or refusal; they are shown with --debug only.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return args.func(args)
    except RNNXError as exc:
        if args.debug:
            raise
        line, parity = _without_prefix(one_line(exc, None), verb), isinstance(exc, ParityError)
        # The library names its parameters (select=...); the user typed flags (--select ...).
        return _report(args, verb, 1 if parity else 2, prefix + (line if parity else flagged(line, verb)), exc, stdout)
    except BrokenPipeError:
        # The reader of our stdout (e.g. `| head`) left; exit quietly as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), real_stdout.fileno())
        return 141
    except MemoryError as exc:
        if args.debug:
            raise
        return _report(args, verb, 2, prefix + "ran out of memory on this input; nothing was written. If the input is trusted, "
                       "run it on a machine with more memory", exc, stdout)
    except KeyboardInterrupt as exc:
        return _report(args, verb, 130, prefix + "interrupted; no output was left behind", exc, stdout)
    except Exception as exc:  # anything else is a bug in rnnx, not the user's input
        if args.debug:
            raise
        environment = _environment_error(exc) if isinstance(exc, OSError) else None
        if environment is not None:  # a file it may not read, a folder it may not write, a full disk
            return _report(args, verb, 2, prefix + environment, exc, stdout)
        where = exc.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        frame = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where is not None else ""
        return _report(args, verb, INTERNAL_ERROR, f"{prefix}internal error {type(exc).__name__}{frame}: {one_line(exc, CAUSE_CHARS)} "
                       "(a bug in rnnx; rerun with --debug for the traceback and report it)", exc, stdout)
    finally:
        sys.stdout = real_stdout
