"""Where the model branches in Python on an input's values: the line a refusal names.

``if episode_starts[t]:`` turns a tensor into a Python bool. A trace records only the branch the
example took, and no exporter can record the other: the file then ignores the input, and the
dimension audit finds that torch's outputs move with it. This module says where: the model runs
twice (on the example and on the values that moved its outputs) with every conversion of a
tensor to a Python value (``bool``, ``int``, ``float``, ``.item()``, ``.tolist()``) recorded with
the user's line that made it; the first line whose conversions differ between the two runs is
the branch.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Sequence
from typing import Any

from rnnx.exporters.bounded import Bounds, bounded
from rnnx.exporters.selfcheck import run_eager

_CONVERSIONS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist"}
_CODE_SHOWN = 100  # characters of the branch's line a message shows

Conversion = tuple[str, int, str, Any]  # file, line, module, the value Python got


def _user_frame() -> tuple[str, int, Any] | None:
    """The innermost frame outside torch, rnnx and Python's library: (file, line, its ``self``)."""
    import torch

    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, os) if m.__file__)
    skip += (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(skip) and not name.startswith("<"):
            return name, frame.f_lineno, frame.f_locals.get("self")
        frame = frame.f_back
    return None


def _conversions(model: Any, values: Sequence[Any], structure: Any) -> list[Conversion]:
    """Every tensor-to-Python conversion one run of the model makes, in order, with its line."""
    from torch.overrides import TorchFunctionMode

    names = {id(m): n for n, m in model.named_modules()}
    found: list[Conversion] = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in _CONVERSIONS:
                where = _user_frame()
                if where is not None:
                    owner = names.get(id(where[2])) if where[2] is not None else None
                    label = f"{owner or 'the model'}'s forward ({type(where[2]).__name__})" if owner is not None else ""
                    found.append((where[0], where[1], label, repr(out)[:64]))
            return out

    try:
        with Record():
            run_eager(model, values, structure)
    except Exception:  # noqa: BLE001  what the model raises at these values: the conversions before it still say where
        pass
    return found


def branch_at(audit: Any, moved: Sequence[Any], what: str) -> str:
    """``": a Python branch on its values in the model's forward (Policy) at net.py:14 (if starts[t]:)"``:
    the first line whose conversions differ between a run of the audit's model on its example and
    one on ``moved`` (``what``: which values, for a stop's message); "" where none differ (the
    values reach the outputs some other way)."""
    model, structure = audit.model, audit.structure
    example = [leaf.value for leaf in audit.leaves]
    bounds: Bounds = audit.bounds
    runs = bounded(lambda: (_conversions(model, example, structure), _conversions(model, moved, structure)),
                   f"the dimension audit's run of the model {what} (where it branches)", bounds)
    a, b = runs
    for x, y in zip(a + [None] * (len(b) - len(a)), b + [None] * (len(a) - len(b))):
        if x == y:
            continue
        file, line, owner, _ = x or y
        code = linecache.getline(file, line).split("  #")[0].strip()
        code = "".join(c if c.isprintable() else " " for c in code)[:_CODE_SHOWN]
        return f": a Python branch on its values{f' in {owner}' if owner else ''} at {os.path.basename(file)}:{line}" + (f" ({code})" if code else "")
    return ""
