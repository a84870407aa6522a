"""The model's own calls in one forward, as :mod:`rnnx.exporters.stream_loops` reads a loop over the frames from them.

Each torch function the model's code calls, and each torch.nn module it calls as one call
(what runs inside a module is the module's: an nn.Linear is one call, not its F.linear), is
seen by a TorchFunctionMode and module hooks, and known by a *key*: its function's name (or
``module <name>``) and the lines of the model's code it runs from, innermost first, up to the
rnnx frame that runs the model. Calls that rnnx's own code makes (a streaming hook's
``where``) are not the model's and are not seen. The same forward gives the same keys in
order whether run eagerly, under torch.export or under the TorchScript tracer, so a walk the
probe learnt on one run can be followed on another.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rnnx.exporters.stream_source import shown

Site = tuple[str, int]  # (file, line) of the model's code
Key = tuple[str, tuple[Site, ...]]  # what runs (a torch function's name, or "module <name>") and the lines it runs from, innermost first

_RNNX = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # rnnx's own frames: a hook's, or the frame that runs the model


def _sites(frame: Any, torch_dir: str) -> tuple[tuple[Site, ...], Any] | None:
    """The lines of the model's code a call runs from (innermost first, up to rnnx's frame
    that runs the model) and the innermost one's frame; None for a call rnnx's own code makes
    (a streaming hook's ``where``)."""
    sites: list[Site] = []
    inner = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_RNNX):
            break
        if not name.startswith(torch_dir):
            sites.append((name, frame.f_lineno))
            inner = inner or frame
        frame = frame.f_back
    return (tuple(sites), inner) if sites else None


def _opaque(module: Any) -> bool:
    """Whether a module is one call: one of torch.nn's (or a subclass of one), or an rnnx stand-in."""
    import torch

    return any(c.__module__.startswith(("torch.", "rnnx.")) for c in type(module).__mro__ if c not in (torch.nn.Module, object))


# Calls that read a tensor's shape or turn it into a Python value: no call of a loop's step. The
# TorchScript tracer makes x.size(1) a tensor that range() then calls __index__ on, which an
# eager run never does, so they are not counted in any run.
_SHAPE_CALLS = frozenset({"size", "dim", "numel", "stride", "storage_offset", "is_contiguous", "is_floating_point", "is_complex",
                          "element_size", "get_device", "__index__", "__int__", "__float__", "__bool__", "__len__", "__format__",
                          "__repr__", "__str__", "__hash__", "item", "tolist"})


def _named(func: Any) -> str:
    return str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func))


@contextlib.contextmanager
def watching(model: Any, handler: Any) -> Iterator[None]:
    """Around each of the model's own calls in the forward run inside: ``handler.before(key,
    owner, frame, (args, kwargs))`` returns the (args, kwargs) to call with and a token for
    ``handler.after(token, output)``. ``owner``: the module whose forward makes the call."""
    import torch
    from torch.overrides import TorchFunctionMode

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    depth = [0]  # inside a module that is one call
    owners = [""]
    tokens: list[Any] = []

    def pre(name: str, opaque: bool, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not opaque:
            owners.append(name)
            return None
        depth[0] += 1
        if depth[0] > 1:
            return None
        found = _sites(sys._getframe(1), torch_dir)
        if found is None:
            tokens.append(None)
            return None
        packed, token = handler.before((f"module {name}", found[0]), owners[-1], found[1], (args, kwargs))
        tokens.append(token)
        return packed

    def post(name: str, opaque: bool, module: Any, args: Any, out: Any) -> None:
        if not opaque:
            owners.pop()
            return
        depth[0] -= 1
        if depth[0] == 0:
            token = tokens.pop()
            if token is not None:
                handler.after(token, out)

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            name = _named(func)
            found = None if depth[0] or name.rsplit(".", 1)[-1] in _SHAPE_CALLS else _sites(sys._getframe(1), torch_dir)
            if found is None:  # inside a module, rnnx's own, or a shape read
                return func(*args, **kwargs)
            (args, kwargs), token = handler.before((name, found[0]), owners[-1], found[1], (args, kwargs))
            out = func(*args, **kwargs)
            if token is not None:
                handler.after(token, out)
            return out

    handles = []
    try:
        for name, m in model.named_modules():
            if name:
                opaque = _opaque(m)
                handles.append(m.register_forward_pre_hook(functools.partial(pre, name, opaque), with_kwargs=True))
                handles.append(m.register_forward_hook(functools.partial(post, name, opaque)))
        with Watch():
            yield
    finally:
        for h in handles:
            h.remove()


@dataclass
class Call:
    key: Key
    owner: str
    leaves: list[Any]  # its arguments, flattened
    spec: Any
    reads: dict[int, tuple[int, int]]  # argument -> (call, output) that made it, for each tensor a recorded call made
    names: dict[int, str]  # id(tensor) -> the model's local variable holding it, where asked
    outs: list[Any] = field(default_factory=list)  # its output, flattened
    saved: list[Any] = field(default_factory=list)  # the output's values as made (a later in-place call may change them), where asked


class Record:
    """Every call of one forward, with where each tensor it reads was made."""

    def __init__(self, names: bool = False, save: bool = False) -> None:
        self.calls: list[Call] = []
        self.made: dict[int, tuple[int, int]] = {}
        self.names, self.save = names, save

    def before(self, key: Key, owner: str, frame: Any, packed: Any) -> tuple[Any, Call]:
        import torch
        from torch.utils._pytree import tree_flatten

        leaves, spec = tree_flatten(packed)
        reads = {p: self.made[id(v)] for p, v in enumerate(leaves) if isinstance(v, torch.Tensor) and id(v) in self.made}
        names = {id(v): k for k, v in frame.f_locals.items() if isinstance(v, torch.Tensor)} if self.names and frame is not None else {}
        call = Call(key, owner, leaves, spec, reads, names)
        self.calls.append(call)
        return packed, call

    def after(self, call: Call, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        index = len(self.calls) - 1
        call.outs = tree_flatten(out)[0]
        for o, v in enumerate(call.outs):
            if isinstance(v, torch.Tensor):
                self.made[id(v)] = (index, o)
        if self.save:
            call.saved = [v.detach().clone() if isinstance(v, torch.Tensor) else None for v in call.outs]

    @property
    def keys(self) -> list[Key]:
        return [c.key for c in self.calls]


def run_calls(model: Any, values: Sequence[Any], structure: Any, names: bool = False, save: bool = False) -> Record | None:
    """The model's calls on these inputs; None where it raises (a length it does not take)."""
    from rnnx.exporters.selfcheck import run_eager

    record = Record(names, save)
    try:
        with watching(model, record):
            run_eager(model, values, structure)
    except Exception:  # noqa: BLE001  the user's model may raise anything; _probe reports the example's failure
        return None
    return record



def at_line(key: Key) -> str:
    """``' at net.py:14 (code)'``: the line of the model's code that makes the call; "" where none."""
    return f" at {shown(key[1][0])}" if key[1] else ""


def what(key: Key) -> str:
    """The function a key calls (``mean``, ``__getitem__``), or ``module <name>``."""
    return key[0] if key[0].startswith("module ") else key[0].rsplit(".", 1)[-1]
