"""Where in the user's code a streaming refusal's operation runs: the line it names.

A refusal names the operation, the module whose forward runs it, and the user's line of code.
That line is read from the running stack when the operation runs (its innermost frame outside
torch, rnnx and Python's own library: the forward that calls the module or makes the torch
call), never from the class or a fixed place, so a line that moves in the source moves in the
message. Frames are kept as (file, line) and read as text only when a message shows one.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Sequence
from typing import Any

from rnnx.exporters.user_code import pre_hooks, raised_in, user_code

Frame = tuple[str, int]  # (file, line)

CODE_SHOWN = 120  # characters of the line's code a message shows


def user_frame() -> Frame | None:
    """The innermost frame of the running stack in the user's code, or None."""
    frame = user_code(sys._getframe(1))
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def raised_at(exc: BaseException) -> Frame | None:
    """(file, line) of :func:`raised_in`."""
    tb = raised_in(exc)
    return (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else None


def shown(frame: Frame | None) -> str:
    """``net.py:14 (return self.rnn(x))``: the file's name, the line, and its code without a
    trailing comment; "" for no frame."""
    if frame is None:
        return ""
    filename, line = frame
    code = linecache.getline(filename, line).split("  #")[0].strip()
    code = "".join(c if c.isprintable() else repr(c)[1:-1] for c in code)  # one line, whatever the file holds
    code = code if len(code) <= CODE_SHOWN else code[:CODE_SHOWN] + "..."
    return f"{os.path.basename(filename)}:{line}" + (f" ({code})" if code else "")


def at(frame: Frame | None, word: str = "at") -> str:
    """``, at net.py:14 (code)`` to put after what a message names; "" for no frame."""
    return f", {word} {shown(frame)}" if frame is not None else ""


def module_calls(model: Any, values: Sequence[Any], structure: Any, name: str, calls: int = 1) -> list[Frame | None]:
    """Where the user's code calls the submodule ``name``: the frames of its first ``calls``
    calls, running the model once on the flattened ``values`` (eval, no gradients). Empty where
    the model does not run so: the refusal that asks still stands, without its line."""
    from rnnx.exporters.selfcheck import run_eager

    found: list[Frame | None] = []

    def hook(n: str, m: Any, a: Any, kw: Any) -> None:
        if len(found) < calls:
            found.append(user_frame())

    try:
        with pre_hooks([(name, model.get_submodule(name) if name else model)], hook):
            run_eager(model, values, structure)
    except Exception:  # noqa: BLE001  the user's model may raise anything; the line is a courtesy of the refusal
        pass
    return found


def called_at(model: Any, example: Any, name: str, calls: int = 1) -> str:
    """``, called at net.py:14 (code)`` (``... and net.py:15 (code)`` for ``calls=2``): where the
    user's code calls the submodule ``name``, running the model once on ``example`` (its
    forward's arguments); "" where it does not run so."""
    from torch.utils._pytree import tree_flatten

    flat, structure = tree_flatten(tuple(example) if isinstance(example, (tuple, list)) else (example,))
    frames = [f for f in module_calls(model, flat, structure, name, calls) if f is not None]
    return ", called at " + " and ".join(shown(f) for f in frames) if frames else ""
