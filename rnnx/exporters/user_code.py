"""The user's code as rnnx watches it run: which frames are the user's (not torch's, rnnx's or
Python's own library), and hooks on the user's modules for one run (:func:`pre_hooks`).

A refusal names the user's line (:mod:`rnnx.exporters.stream_source`, :mod:`rnnx.exporters.model_lines`)
and a model that called exit names where (:mod:`rnnx.exporters.model_exit`); both read it from
the running stack or a traceback by this one rule.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator
from types import FrameType, TracebackType
from typing import Any


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


def tensors(value: Any) -> list[Any]:
    """The tensors in ``value`` (a model's output, a call's arguments), flattened in order."""
    import torch
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


@contextlib.contextmanager
def pre_hooks(modules: Iterable[tuple[str, Any]], hook: Callable[[str, Any, tuple[Any, ...], dict[str, Any]], Any]) -> Iterator[None]:
    """Inside, ``hook(name, module, args, kwargs)`` runs before each call of each of ``modules``
    ((name, module) pairs): how rnnx watches what a run of the user's model hands its modules."""
    handles = [m.register_forward_pre_hook(functools.partial(hook, name), with_kwargs=True) for name, m in modules]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
