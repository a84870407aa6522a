"""Run one verb: parse, set the budgets, call it, and turn what it raised into an exit status.

Exit status: 0 success, 1 a parity check failed, 2 bad input or usage, 3 an internal error
(a bug in rnnx: the message says so; --debug shows the traceback).
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from rnnx import progress
from rnnx.cli.flags import flagged
from rnnx.cli.groups import CommonArgs
from rnnx.cli.parser import build_parser
from rnnx.errors import ParityError, RNNXError
from rnnx.fileio import remove_partial_outputs

INTERNAL_ERROR = 3
_STEPPED_VERBS = ("convert", "export", "fuse", "lower")
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


def _bus_error_handler() -> tuple[object, object] | None:
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
                libc, previous = bus[1]  # type: ignore[misc]
                libc.signal(signal.SIGBUS, previous)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on usage errors
    if args.command is None:
        parser.print_help()
        return 2
    _running[0] = args.command
    # What a long verb is doing, for a person at a terminal; pipelines and --json get none.
    # verify draws its own bar per case.
    shown = args.command in _STEPPED_VERBS and sys.stderr.isatty() and not getattr(args, "json", False)
    try:
        with CommonArgs.parse(args), progress.shown(f"rnnx {args.command}", shown):
            if args.debug:
                return args.func(args)
            # Other libraries' warnings (torch, onnx, h5py) would add lines to a one-line
            # report or refusal; they are shown with --debug only.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return args.func(args)
    except ParityError as exc:
        if args.debug:
            raise
        print(f"rnnx {args.command}: {exc}", file=sys.stderr)
        return 1
    except RNNXError as exc:
        if args.debug:
            raise
        # The library names its parameters (select=...); the user typed flags (--select ...).
        print(f"rnnx {args.command}: {flagged(' '.join(str(exc).split()), args.command)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our stdout (e.g. `| head`) left; exit quietly as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except MemoryError:
        if args.debug:
            raise
        print(f"rnnx {args.command}: ran out of memory on this input; nothing was written. If the input is trusted, "
              "run it on a machine with more memory", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rnnx {args.command}: interrupted; no output was left behind", file=sys.stderr)
        return 130
    except Exception as exc:  # anything else is a bug in rnnx, not the user's input
        if args.debug:
            raise
        where = exc.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        frame = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where is not None else ""
        print(f"rnnx {args.command}: internal error {type(exc).__name__}{frame}: {' '.join(str(exc).split())[:300]} "
              "(a bug in rnnx; rerun with --debug for the traceback and report it)", file=sys.stderr)
        return INTERNAL_ERROR
