"""The streaming probe's recorder: the model run eagerly with every module, convolution, pool,
F.pad and running operation watched, and the inputs it is run on.

:mod:`rnnx.exporters.stream_context` runs the model (its float64 copy) at the example's length
T and twice at 2T on inputs that differ only after frame T, and reads these recordings event by
event: which axis is time, which modules and operations read later frames, what each
convolution and pool needs carried. Each watched call keeps the user's frame that made it
(:mod:`rnnx.exporters.stream_source`), so a refusal names the line.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rnnx.exporters.stream_running import RUNNING, PadCall, RunningCall
from rnnx.exporters.stream_source import Frame, at, user_frame
from rnnx.exporters.user_code import tensors

# torch's pools by name (nn.MaxPool1d and F.max_pool1d arrive as the same function), with their
# parameters in the order the functions take them after the input.
POOLS: dict[str, tuple[str, ...]] = {
    "max_pool1d": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "max_pool2d": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "max_pool1d_with_indices": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "max_pool2d_with_indices": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "_max_pool1d": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "_max_pool2d": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "avg_pool1d": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"),
    "avg_pool2d": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
    "lp_pool1d": ("norm_type", "kernel_size", "stride", "ceil_mode"),
    "lp_pool2d": ("norm_type", "kernel_size", "stride", "ceil_mode"),
}


@dataclass
class Event:
    module: str
    kind: str  # "in" or "out"
    tensors: list[Any]
    caller: str = ""  # the module whose forward made the call ("" for the model's own)


@dataclass
class PoolCall:
    """A pool as the probe saw it: the module whose forward called it ("" for the model's own),
    its input and output, its parameters by name, and the user's line that made it."""

    owner: str
    name: str
    input: Any
    out: Any
    params: dict[str, Any]
    frame: Frame | None

    def along(self, key: str, index: int, default: int) -> int:
        """A parameter (kernel_size, stride, padding, dilation) on spatial axis ``index``."""
        value = self.params.get(key)
        if value is None or value == () or value == []:
            return self.along("kernel_size", index, 1) if key == "stride" else default
        return int(value[index] if isinstance(value, (tuple, list)) else value)

    @property
    def spatial(self) -> int:
        return 2 if self.name.removesuffix("_with_indices").endswith("2d") else 1


@dataclass
class OpCall:
    """A torch call made directly in one module's forward (the one a refusal looks into)."""

    func: Any
    inputs: list[Any]  # its tensor and number arguments, flattened
    outputs: list[Any]
    frame: Frame | None


def _values(value: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0] if isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool)]


@dataclass
class Recorder:
    """Hooks every module (inputs and outputs, in the order they run), each conv's
    ``_conv_forward`` input, and watches F.pad, the pools and the running operations; with
    ``target`` set, also every torch call made directly in that module's forward."""

    model: Any
    convs: Sequence[tuple[str, Any]]
    target: str | None = None
    events: list[Event] = field(default_factory=list)
    conv_inputs: dict[str, Any] = field(default_factory=dict)
    conv_calls: dict[str, list[Frame | None]] = field(default_factory=dict)  # the user's line of each call
    running: list[RunningCall] = field(default_factory=list)  # cumulative ops and aranges, in the order they ran
    stack: list[str] = field(default_factory=list)  # the modules running now, innermost last
    pads: list[PadCall] = field(default_factory=list)
    pad_frames: list[Frame | None] = field(default_factory=list)  # the user's line of each F.pad, as ``pads``
    pools: list[PoolCall] = field(default_factory=list)
    ops: list[OpCall] = field(default_factory=list)

    def run(self, values: Sequence[Any], structure: Any) -> Any:
        import torch.nn.functional as F
        from torch.overrides import TorchFunctionMode

        from rnnx.exporters.selfcheck import run_eager

        recorder = self

        class Watch(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                owner = recorder.stack[-1] if recorder.stack else ""
                first = args[0] if args else kwargs.get("input")
                if func is F.pad:
                    widths = tuple(args[1] if len(args) > 1 else kwargs["pad"])
                    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
                    value = args[3] if len(args) > 3 else kwargs.get("value")
                    recorder.pads.append(PadCall(owner, first, out, widths, mode, value))
                    recorder.pad_frames.append(user_frame())
                name = getattr(func, "__name__", "")
                if name in POOLS and getattr(func, "__module__", "").startswith("torch"):
                    params = {**dict(zip(POOLS[name], args[1:])), **kwargs}
                    recorder.pools.append(PoolCall(owner, name, first, out[0] if isinstance(out, tuple) else out, params, user_frame()))
                kind = RUNNING.get(func)
                if kind is not None:
                    dim = args[1] if len(args) > 1 else kwargs.get("dim")
                    recorder.running.append(RunningCall(kind, owner, first, dim, out, at(user_frame())))
                if recorder.target is not None and owner == recorder.target:
                    recorder.ops.append(OpCall(func, _values((args, kwargs)), _values(out), user_frame()))
                return out

        def pre(name: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            recorder.events.append(Event(name, "in", tensors((args, kwargs)), recorder.stack[-1] if recorder.stack else ""))
            recorder.stack.append(name)

        def post(name: str, module: Any, args: tuple[Any, ...], out: Any) -> None:
            recorder.events.append(Event(name, "out", tensors(out), recorder.stack[-2] if len(recorder.stack) > 1 else ""))
            recorder.stack.pop()

        def conv_input(name: str, original: Any, x: Any, weight: Any, bias: Any) -> Any:
            recorder.conv_inputs.setdefault(name, x)
            recorder.conv_calls.setdefault(name, []).append(user_frame())
            return original(x, weight, bias)

        handles = []
        patched = []
        try:
            for name, m in self.model.named_modules():
                handles.append(m.register_forward_pre_hook(functools.partial(pre, name), with_kwargs=True))
                handles.append(m.register_forward_hook(functools.partial(post, name)))
            for name, m in self.convs:
                m._conv_forward = functools.partial(conv_input, name, m._conv_forward)
                patched.append(m)
            with Watch():
                return run_eager(self.model, values, structure)
        finally:
            for h in handles:
                h.remove()
            for m in patched:
                del m._conv_forward

    def pad_of(self, x: Any) -> tuple[PadCall, Frame | None] | None:
        """The F.pad call that made ``x``, and its line."""
        return next(((p, f) for p, f in zip(self.pads, self.pad_frames) if p.out is x), None)


@dataclass
class Probe:
    """The model the probe runs (the float64 copy where it has one), its convolutions, and the
    three runs' inputs: at the example's length T, and at 2T twice (the frames after T
    reversed, then new), which differ only after frame T."""

    model: Any
    convs: Sequence[tuple[str, Any]]
    structure: Any
    runs: tuple[list[Any], list[Any], list[Any]]

    def record(self, target: str | None = None) -> tuple[Recorder, Recorder, Recorder]:
        """The three runs recorded again, with every torch call made directly in ``target``'s forward."""
        out = []
        for values in self.runs:
            recorder = Recorder(self.model, self.convs, target)
            recorder.run(values, self.structure)
            out.append(recorder)
        return out[0], out[1], out[2]


def resized(values: Sequence[Any], index: int, axis: int, frames: int) -> list[Any]:
    """The inputs with every input's frames (as :func:`shared_axis` finds them) cut or repeated to ``frames``."""
    import torch

    size = values[index].shape[axis]
    out = list(values)
    for i, v in enumerate(values):
        at_ = shared_axis(v, i == index, values[index].dim(), axis, size)
        if at_ is not None:
            out[i] = torch.cat([v] * (frames // size + 1), dim=at_).narrow(at_, 0, frames)
    return out


def doubled(values: Sequence[Any], index: int, axis: int, tail: str) -> list[Any]:
    """The inputs with ``axis`` of every input shaped like input ``index`` there doubled: the
    first half as given, the second half ``tail`` ("flip": the frames reversed; "noise": new
    values), so that two doublings differ only after frame T."""
    import torch

    size = values[index].shape[axis]
    out = list(values)
    gen = torch.Generator().manual_seed(1234)
    for i, v in enumerate(values):
        at_ = shared_axis(v, i == index, values[index].dim(), axis, size)
        if at_ is None:
            continue
        if tail == "flip" or not v.is_floating_point():
            second = v.flip(at_) if tail == "flip" else v.roll(1, at_)
        else:
            second = torch.randn(v.shape, generator=gen, dtype=v.dtype) * (v.std() if v.numel() > 1 else 1.0) + v.mean()
        out[i] = torch.cat([v, second], dim=at_)
    return out


def shared_axis(v: Any, itself: bool, rank: int, axis: int, size: int) -> int | None:
    """The axis of input ``v`` that holds the same frames as the time axis found (``axis`` of
    a rank-``rank`` input, ``size`` frames): the same axis in an input of that rank; in an
    input of another rank (features beside a spectrum, ``(B, 1, T, 32)`` and ``(B, 1, T, 96,
    2)``), the same axis where it has ``size`` there, else its one axis of that size."""
    import torch

    if not isinstance(v, torch.Tensor):
        return None
    if itself or v.dim() == rank:
        return axis if v.dim() > axis and v.shape[axis] == size else None
    if v.dim() > axis and v.shape[axis] == size:
        return axis
    matching = [a for a in range(v.dim()) if v.shape[a] == size]
    return matching[0] if len(matching) == 1 else None


def sequence_lengths(recorder: Recorder, recurrent: Sequence[tuple[str, Any]]) -> list[int]:
    """The recurrences' sequence lengths: a module's from its first input (and batch_first),
    a cell's as the steps it took."""
    from rnnx.exporters.modules import CELL_MODULES

    lengths = []
    for name, m in recurrent:
        calls = [e for e in recorder.events if e.kind == "in" and e.module == name and e.tensors]
        if isinstance(m, CELL_MODULES):
            lengths.append(len(calls))
        elif calls:
            x = calls[0].tensors[0]
            lengths.append(int(x.shape[1 if getattr(m, "batch_first", False) and x.dim() == 3 else 0]))
    return lengths
