"""Which frames are the user's code: not torch's, rnnx's or Python's own library.

A refusal names the user's line (:mod:`rnnx.exporters.stream_source`, :mod:`rnnx.exporters.model_lines`)
and a model that called exit names where (:mod:`rnnx.exporters.model_exit`); both read it from
the running stack or a traceback by this one rule.
"""

from __future__ import annotations

import functools
import os
from types import FrameType, TracebackType


@functools.cache
def _skipped() -> tuple[str, ...]:
    """The folders whose frames are not the user's: torch's, rnnx's, the standard library's."""
    import torch

    rnnx_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return tuple(p + os.sep for p in (os.path.dirname(torch.__file__), rnnx_dir, os.path.dirname(os.__file__)))


def _users(filename: str) -> bool:
    if filename.startswith("<"):  # code made at run time (torch.fx, exec) has no line to show; a notebook cell has
        return filename.startswith("<ipython-input")
    installed = "site-packages" in filename or "dist-packages" in filename  # another package's model is code to name
    return not filename.startswith(_skipped()) or (installed and not filename.startswith(_skipped()[:2]))


def user_code(frame: FrameType | None) -> FrameType | None:
    """``frame`` or the innermost of its callers in the user's code, or None."""
    while frame is not None and not _users(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def raised_in(exc: BaseException) -> TracebackType | None:
    """The innermost entry of the user's code in the traceback of ``exc``: where the model raised."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        found = tb if _users(tb.tb_frame.f_code.co_filename) else found
        tb = tb.tb_next
    return found
