"""Where in the model's Python code a refusal points: a branch on an input's values, a loop over a length.

Both are things a trace cannot record, so the file alone cannot say where they are; the model
is run and watched. Every torch call it makes is recorded with the user's line that made it
(the innermost frame outside torch, rnnx and Python's library) and the module whose forward
that line is in:

- ``if episode_starts[t]:`` turns a tensor into a Python bool. A trace records only the branch
  the example took, the file then ignores the input, and the dimension audit finds that torch's
  outputs move with it. :func:`branch_at` runs the model on the example and on the values that
  moved its outputs; the first line whose conversions (``bool``, ``int``, ``float``, ``.item()``,
  ``.tolist()``) differ is the branch.
- ``for t in range(x.size(1)):`` runs its body once per step. :func:`loop_at` runs the model at
  the example's length and at another the model takes; the first line whose torch calls are
  counted differently is the loop's body, and the ``for`` above it the loop. Why the loop is
  not one ONNX Loop is the re-roll's own reason (:func:`rnnx.graphs.reroll.unrolled`).
"""

from __future__ import annotations

import collections
import linecache
import sys
from collections.abc import Sequence
from typing import Any

from rnnx.exporters.bounded import Bounds, bounded
from rnnx.exporters.selfcheck import run_eager
from rnnx.exporters.stream_source import shown
from rnnx.exporters.user_code import user_code
from rnnx.graphs.reroll import unrolled

_CONVERSIONS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist"}

Call = tuple[str, int, str, str, str]  # file, line, owner ("rnn's forward (Policy)"), torch function, what a conversion gave


def _calls(model: Any, values: Sequence[Any], structure: Any) -> list[Call]:
    """Every torch call one run of the model makes, in order, with the user's line that made it."""
    from torch.overrides import TorchFunctionMode

    names = {id(m): n for n, m in model.named_modules()}
    found: list[Call] = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", "")
            frame = user_code(sys._getframe(1))
            if frame is not None:
                me = frame.f_locals.get("self")
                owner = names.get(id(me)) if me is not None else None
                # a module's forward by the module's name; other code (a staticmethod) by its function's
                label = f"{owner or 'the model'}'s forward ({type(me).__name__})" if owner is not None else getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
                found.append((frame.f_code.co_filename, frame.f_lineno, label, name, repr(out)[:64] if name in _CONVERSIONS else ""))
            return out

    try:
        with Record():
            run_eager(model, values, structure)
    except Exception:  # noqa: BLE001  what the model raises at these values: the calls before it still say where
        pass
    return found


def _runs(audit: Any, moved: Sequence[Any], what: str) -> tuple[list[Call], list[Call]]:
    """The calls of a run on the audit's example and of one on ``moved``, in a bounded child."""
    model, structure = audit.model, audit.structure
    example = [leaf.value for leaf in audit.leaves]
    bounds: Bounds = audit.bounds
    return bounded(lambda: (_calls(model, example, structure), _calls(model, moved, structure)),
                   f"the dimension audit's run of the model {what} (where in its code)", bounds)


def branch_at(audit: Any, moved: Sequence[Any], what: str) -> str:
    """``": a Python branch on its values in the model's forward (Policy) at net.py:14 (if starts[t]:)"``:
    the first line whose conversions differ between a run of the audit's model on its example and
    one on ``moved`` (``what``: which values, for a stop's message); "" where none differ (the
    values reach the outputs some other way)."""
    a, b = ([c for c in run if c[3] in _CONVERSIONS] for run in _runs(audit, moved, what))
    for x, y in zip(a + [None] * (len(b) - len(a)), b + [None] * (len(a) - len(b))):
        if x != y:
            differs = x or y
            assert differs is not None  # x != y, so not both are the padding None
            file, line, owner, _, _ = differs
            return f": a Python branch on its values{f' in {owner}' if owner else ''} at {shown((file, line))}"
    return ""


def _loop_line(file: str, body: int) -> int:
    """The ``for``/``while`` line above ``body`` that holds it (less indented), else ``body``."""
    text = linecache.getline(file, body)
    indent = len(text) - len(text.lstrip())
    for line in range(body - 1, max(body - 200, 0), -1):
        above = linecache.getline(file, line)
        if above.strip() and len(above) - len(above.lstrip()) < indent:
            if above.lstrip().startswith(("for ", "while ")):
                return line
            indent = len(above) - len(above.lstrip())
    return body


def loop_at(audit: Any, proto: Any, leaf: Any, d: int, probe: Any) -> str:
    """``", the loop at net.py:12 (for t in range(x.size(1)):) in the model's forward (Net), which
    rnnx could not re-roll into an ONNX Loop: <why>"``, for input ``leaf``'s dimension ``d``, a
    length the model runs at ``probe.accepted`` and the file fixes; "" where the model runs no
    line more often at that size (no Python loop over it)."""
    cache = audit.__dict__.setdefault("_loop_lines", {})  # one pair of runs per dimension, whichever routes ask
    key = (leaf.index, d)
    if key not in cache:
        a, b = _runs(audit, probe.values, f"with {leaf.name} dim {d} at {probe.accepted}")
        counts_a, counts_b = collections.Counter(c[:3] for c in a), collections.Counter(c[:3] for c in b)
        body = next((c[:3] for c in a + b if counts_a[c[:3]] != counts_b[c[:3]]), None)
        cache[key] = body
    body = cache[key]
    why = [r for r in unrolled(proto) if leaf.name in r.node.split(", ")]
    reason = why[0].reason if why else f"its steps read no step of {leaf.name} in a form rnnx re-rolls ({leaf.name}[:, t], .unbind, [:, i:i + S] of a graph input)"
    if body is None:
        return f"; the trace unrolled a loop over it, which rnnx could not re-roll into an ONNX Loop: {reason}" if why else ""
    file, line, owner = body
    return (f", the loop at {shown((file, _loop_line(file, line)))}{f' in {owner}' if owner else ''}, which rnnx could not re-roll "
            f"into an ONNX Loop: {reason}")
