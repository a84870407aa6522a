"""Operations along time that streaming carries across chunks, besides recurrences and convolutions.

Each is one more state in and out of the streaming file, zeros first, found by running the
model (:mod:`rnnx.exporters.stream_context` records the calls) and applied in the streaming
forward by :func:`carry_mode`, a TorchFunctionMode that matches calls by kind and order:

- a **cumulative sum** along time: the last frame's sum comes in and is added;
- a **frame counter**, an arange over the frames: offset by the frames before the chunk;
- a **look-back**, zeros an ``F.pad`` puts before the frames (``x - F.pad(x, (0, 0, 1, 0))[:, :-1]``,
  the previous frame subtracted): the zeros become the last frames of the chunk before, as a
  convolution's cache does. An F.pad that feeds a cached convolution is that convolution's.

The other cumulative operations along time (cumprod, cummax, ...) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rnnx.errors import RNNXError


@dataclass(frozen=True)
class RunningState:
    """A running operation along time carried across chunks. ``order`` counts the calls of
    its kind in one forward (every F.pad call counts for a look-back)."""

    name: str
    kind: str  # "cumsum", "counter" or "lookback"
    order: int
    axis: int  # cumsum, lookback: the time axis of the tensor, from the end; counter: 0
    shape: tuple[int, ...]  # of the state at the example's batch
    dtype: Any  # a torch dtype
    frames: int = 0  # lookback: the zeros F.pad put before the frames, carried from the chunk before

    @property
    def batch_axis(self) -> int | None:
        return 0 if self.kind in ("cumsum", "lookback") and len(self.shape) + self.axis > 0 else None


@dataclass
class RunningCall:
    """A call of a running operation (see :data:`RUNNING`) as the probe saw it."""

    kind: str
    owner: str  # the module whose forward made the call ("" for the model's own)
    input: Any
    dim: Any
    out: Any
    line: str = ""  # ", at net.py:9 (code)": the user's line that made the call, where the probe found it


@dataclass
class PadCall:
    """An F.pad call as the probe saw it (nn.ZeroPad2d's included)."""

    owner: str
    input: Any
    out: Any
    widths: tuple[int, ...]  # F.pad's: the last axis first, (left, right) each
    mode: str
    value: Any

    def around(self, axis: int) -> tuple[int, int]:
        """The (left, right) zeros along ``axis`` (counted from the end, -1 the last)."""
        at = 2 * (-axis - 1)
        return (self.widths[at], self.widths[at + 1]) if len(self.widths) > at + 1 else (0, 0)

    @property
    def zeros(self) -> bool:
        return self.mode == "constant" and self.value in (None, 0, 0.0)


def _running_table() -> dict[Any, str]:
    import torch

    return {torch.cumsum: "cumsum", torch.Tensor.cumsum: "cumsum", torch.arange: "arange",
            torch.cumprod: "cumprod", torch.Tensor.cumprod: "cumprod", torch.cummax: "cummax", torch.Tensor.cummax: "cummax",
            torch.cummin: "cummin", torch.Tensor.cummin: "cummin", torch.logcumsumexp: "logcumsumexp", torch.Tensor.logcumsumexp: "logcumsumexp"}


class _Lazy(dict[Any, str]):
    """:data:`RUNNING`, filled on first use (rnnx imports torch only when it exports)."""

    def get(self, key: Any, default: Any = None) -> Any:
        if not self:
            self.update(_running_table())
        return super().get(key, default)


# The torch functions whose result at frame t depends on every frame before it: cumsum is
# carried (the running sum comes in as a state), an arange over the frames is a counter
# (offset by the frames before the chunk); the others are refused along time.
RUNNING: dict[Any, str] = _Lazy()
CARRIED = ("cumsum", "arange")


def time_axis(a: Any, b: Any) -> int | None:
    """The one axis whose size differs between a tensor at length T (``a``) and at 2T (``b``)."""
    if a.dim() != b.dim():
        return None
    differ = [d for d in range(a.dim()) if a.shape[d] != b.shape[d]]
    return differ[0] if len(differ) == 1 and b.shape[differ[0]] > a.shape[differ[0]] else None


def carry_mode(states: Sequence[tuple[RunningState, Any]], sink: dict[str, Any]) -> Any:
    """A TorchFunctionMode for the streaming forward: the ``order``-th cumsum along time adds
    its state (the sum before the chunk) and leaves its last frame in ``sink``; the
    ``order``-th frame counter adds its offset and leaves the offset after the chunk; the
    ``order``-th F.pad puts the look-back state where its zeros were, and leaves the last
    frames in ``sink``."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    by_call = {(s.kind, s.order): (s, value) for s, value in states}

    class Carry(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: dict[str, int] = {}

        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            kind = "lookback" if func is F.pad else RUNNING.get(func)
            if kind not in (*CARRIED, "lookback"):
                return func(*args, **kwargs)
            kind = "counter" if kind == "arange" else kind
            order = self.seen[kind] = self.seen.get(kind, -1) + 1
            found = by_call.get((kind, order))
            if found is None:
                return func(*args, **kwargs)
            state, value = found
            if kind == "lookback":
                return _looked_back(state, value, sink, args, kwargs)
            out = func(*args, **kwargs)
            out = out + value  # the sum before the chunk, or the frames before it
            if kind == "cumsum":
                sink[state.name] = out.narrow(state.axis, out.shape[state.axis] - 1, 1)
            else:
                sink[state.name] = value + out.shape[0]
            return out

    return Carry()


def _looked_back(state: RunningState, value: Any, sink: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """F.pad with its zeros before the frames replaced by ``value`` (the chunk before's last
    frames, padded on the other axes as this call pads them); its zeros after stay. The last
    ``state.frames`` frames of the joined tensor, ``value`` included (a chunk shorter than the
    look-back keeps older frames), are the next chunk's ``value``."""
    import torch
    import torch.nn.functional as F

    x = args[0] if args else kwargs["input"]
    widths = list(args[1] if len(args) > 1 else kwargs["pad"])
    at = 2 * (-state.axis - 1)
    right = widths[at + 1]
    widths[at] = widths[at + 1] = 0
    out = F.pad(x, widths) if any(widths) else x
    joined = torch.cat([value, out], dim=state.axis)
    sink[state.name] = joined.narrow(state.axis, joined.shape[state.axis] - state.frames, state.frames)
    if right:
        joined = F.pad(joined, [0] * at + [0, right])
    return joined


def plan_running(first: Sequence[RunningCall], second: Sequence[RunningCall], frames: int, dtype: Any, notes: list[str]) -> list[RunningState]:
    """A state for each cumulative sum along time and each arange that counts the frames;
    a refusal for the other cumulative operations along time. ``first`` and ``second``: the
    calls at the example's length and at twice it; ``dtype`` maps a probe tensor's dtype to
    the model's own."""
    import torch

    if [r.kind for r in first] != [r.kind for r in second]:
        notes.append("streaming: the model's cumulative operations differ between lengths, so none is carried; the chunked check stands")
        return []
    states = []
    orders: dict[str, int] = {}
    for a, b in zip(first, second):
        kind = "counter" if a.kind == "arange" else a.kind
        order = orders[kind] = orders.get(kind, -1) + 1
        where = f"{a.owner}'s forward" if a.owner else "the model's forward"
        if a.kind == "arange":
            n1, n2 = a.out.numel(), b.out.numel()
            counts = (a.out.dim() == 1 and n2 - n1 == frames and n1 > 1 and bool((b.out[:n1] == a.out).all())
                      and bool((a.out[1:] - a.out[:-1] == 1).all()))
            if counts:
                states.append(RunningState(f"{a.owner + '.' if a.owner else ''}frames{order}", "counter", order, 0, (1,), dtype(a.out.dtype)))
            continue
        if not isinstance(a.input, torch.Tensor) or not isinstance(a.dim, int):
            continue
        axis = time_axis(a.input, b.input)
        if axis is None or a.dim % a.input.dim() != axis:
            continue  # along another axis: nothing carries from chunk to chunk
        if a.kind != "cumsum":
            raise RNNXError(f"streaming: expected running operations rnnx carries across chunks (cumsum, a frame counter), found {a.kind} along "
                            f"time in {where}{a.line}; carry it yourself as an input and output, or export without streaming")
        shape = list(a.input.shape)
        shape[axis] = 1
        states.append(RunningState(f"{a.owner + '.' if a.owner else ''}cumsum{order}", "cumsum", order, axis - a.input.dim(),
                                   tuple(shape), dtype(a.out.dtype)))
    return states


def plan_lookbacks(first: Sequence[PadCall], second: Sequence[PadCall], cached: Sequence[Any], dtype: Any, notes: list[str]) -> list[RunningState]:
    """A look-back state for each F.pad that puts zeros before the frames, except those whose
    output is a cached convolution's input (``cached``: those inputs, at the example's
    length). A pad with other values there (reflect, replicate, a constant) is left to the
    chunked check, which names it."""
    if len(first) != len(second):
        notes.append("streaming: the model pads a different number of times at different lengths, so no padding is carried; "
                     "the chunked check stands")
        return []
    states = []
    for order, (a, b) in enumerate(zip(first, second)):
        if any(a.out is c for c in cached):
            continue
        axis = time_axis(a.input, b.input)
        if axis is None:
            continue  # not along time: the same zeros in every chunk
        t = axis - a.input.dim()
        left, _ = a.around(t)
        if left <= 0 or not a.zeros:
            continue
        shape = list(a.out.shape)
        shape[axis] = left
        states.append(RunningState(f"{a.owner + '.' if a.owner else ''}lookback{order}", "lookback", order, t, tuple(shape),
                                   dtype(a.out.dtype), left))
    return states
