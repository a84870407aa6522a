"""Left context that streams: convolution caches, and the probe that names what cannot stream.

A streaming file cuts the sequence into chunks. A recurrence carries its states
(:mod:`rnnx.exporters.streaming`); a convolution along time needs the frames before the
chunk. Its left padding, zeros before the whole sequence, must be the last frames of the
chunk before: each such ``nn.Conv1d`` / ``nn.Conv2d`` keeps a cache of that many frames of
its input, one more state in and out, zeros first. Its right padding stays zeros; what the
model does with the frames it makes (a causal model drops them, as a TCN's chomp does) is
then the same in every chunk.

Which axis is time, which convolutions need a cache, and what stops a model streaming are
learnt by running the model (its float64 copy, eagerly), not by reading its code:

- the inputs' time axis is the one whose doubling lengthens the recurrences' sequences;
- a tensor's time axis is its one axis whose size differs between a run at the example's
  length T and one at 2T;
- the model is run twice at 2T on inputs that differ only after frame T. In a causal model,
  every tensor's frames that stand for input frames before T (its first ``T x`` its frames
  per input frame) are the same in both runs. The first module whose inputs pass that test
  and whose output does not is named in the refusal (a centered convolution, attention or a
  normalization over time); where a module's input already fails it, the code of the module
  that called it is named;
- a convolution's left padding is its own ``padding`` plus the zeros an ``F.pad`` put on the
  left of its input, watched with a TorchFunctionMode. rnnx hooks ``_conv_forward``, where
  both ``nn.Conv1d.forward`` and a subclass's own forward end, so a ``CausalConv1d`` that
  pads inside its forward is seen as it runs.

Cumulative sums, frame counters and the zeros an F.pad puts before the frames are carried by
:mod:`rnnx.exporters.stream_running`. What this cannot see (a functional convolution, the
previous frame made by concatenating zeros) the chunked check still catches, naming the first
operation whose chunked output differs.

One module, though just over 450 lines: the probe's recorder, the causality verdicts and the
cache plan read the same recorded runs, event by event.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters.stream_running import RUNNING, PadCall, RunningCall, RunningState, plan_lookbacks, plan_running, time_axis


@dataclass(frozen=True)
class ConvCache:
    """How one convolution streams: its input's time axis and paddings, and the cache it keeps."""

    module: str
    axis: int  # the time axis of the convolution's input, counted from the end (-1 or -2)
    pads: tuple[tuple[int, int], ...]  # the conv's own zeros (left, right) per spatial axis, in order
    fpad: tuple[int, int]  # the zeros an F.pad put on the time axis of its input (left, right)
    stride: int  # along time
    shape: tuple[int, ...]  # the cache at the example's batch: the input's shape, time = frames

    @property
    def frames(self) -> int:
        """Frames cached: the whole left padding on the time axis (the model's and the conv's)."""
        return self.fpad[0] + self.pads[self.spatial_index][0]

    @property
    def spatial_index(self) -> int:
        return len(self.pads) + self.axis  # axis -1 of a Conv2d is its spatial axis 1

    @property
    def batch_axis(self) -> int | None:
        return 0 if len(self.shape) == len(self.pads) + 2 else None


@dataclass
class StreamContext:
    """What the probe found: the convolutions to cache, and the chunk length's multiple."""

    caches: list[ConvCache] = field(default_factory=list)
    multiple: int = 1  # chunks must be a multiple of this many frames: the total stride along time
    running: list[RunningState] = field(default_factory=list)
    output_axes: list[int | None] | None = None  # the time axis of each of the model's output tensors, as run
    time: tuple[int, int] | None = None  # (flattened input, axis): the frames
    notes: list[str] = field(default_factory=list)


# --- the streaming call of a cached convolution ---------------------------------------------


def cached_conv_forward(conv: Any, spec: ConvCache, cache: Any, sink: dict[str, Any], x: Any, weight: Any, bias: Any) -> Any:
    """Stands in for ``conv._conv_forward`` in the streaming model: ``x`` (with any zeros an
    F.pad put around it on the time axis) has its left zeros replaced by ``cache``; the last
    :attr:`ConvCache.frames` frames of the joined input become the next cache (in ``sink``).
    Right padding stays zeros, and the conv's padding on other axes is kept."""
    import torch
    import torch.nn.functional as F

    t = spec.axis
    left, right = spec.fpad
    if left or right:
        x = x.narrow(t, left, x.shape[t] - left - right)
    joined = torch.cat([cache, x], dim=t)
    sink[spec.module] = kept(joined, spec)
    pads = [(0, p[1] + right) if i == spec.spatial_index else p for i, p in enumerate(spec.pads)]
    widths = [w for p in reversed(pads) for w in p]  # F.pad lists the last axis first
    if any(widths):  # not F.pad: the streaming forward's carry_mode counts the model's own F.pad calls
        joined = torch.constant_pad_nd(joined, widths, 0.0)
    fn = F.conv1d if len(spec.pads) == 1 else F.conv2d
    return fn(joined, weight, bias, conv.stride, 0, conv.dilation, conv.groups)


def kept(joined: Any, spec: ConvCache) -> Any:
    """The next chunk's cache: the last frames of this chunk's input, the cache before it
    included (so a chunk shorter than the cache keeps older frames). One function, so that a
    test can plant a cache one frame short and see the chunked check fail."""
    t = spec.axis
    return joined.narrow(t, joined.shape[t] - spec.frames, spec.frames)


def own_pads(conv: Any) -> tuple[tuple[int, int], ...]:
    """The conv's own zero padding (left, right) per spatial axis, its string forms included
    ('same' puts the odd frame on the right, as torch does)."""
    kernel = conv.kernel_size
    if conv.padding == "valid":
        return tuple((0, 0) for _ in kernel)
    if conv.padding == "same":
        total = [d * (k - 1) for d, k in zip(conv.dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in total)
    return tuple((p, p) for p in conv.padding)


# --- the probe --------------------------------------------------------------------------------


@dataclass
class _Event:
    module: str
    kind: str  # "in" or "out"
    tensors: list[Any]


class _Recorder:
    """Hooks every module (inputs and outputs, in the order they run), each conv's
    ``_conv_forward`` input, and every F.pad."""

    def __init__(self, model: Any, convs: Sequence[tuple[str, Any]]) -> None:
        self.model, self.convs = model, convs
        self.events: list[_Event] = []
        self.conv_inputs: dict[str, Any] = {}
        self.conv_calls: dict[str, int] = {}
        self.running: list[RunningCall] = []  # cumulative ops and aranges, in the order they ran
        self.stack: list[str] = []  # the modules running now, innermost last
        self.pads: list[PadCall] = []

    @staticmethod
    def _tensors(value: Any) -> list[Any]:
        import torch
        from torch.utils._pytree import tree_flatten

        return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]

    def run(self, values: Sequence[Any], structure: Any) -> Any:
        import torch.nn.functional as F
        from torch.overrides import TorchFunctionMode

        from rnnx.exporters.selfcheck import run_eager

        recorder = self

        class Watch(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if func is F.pad:
                    widths = tuple(args[1] if len(args) > 1 else kwargs["pad"])
                    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
                    value = args[3] if len(args) > 3 else kwargs.get("value")
                    recorder.pads.append(PadCall(recorder.stack[-1] if recorder.stack else "", args[0] if args else kwargs["input"], out,
                                                 widths, mode, value))
                kind = RUNNING.get(func)
                if kind is not None:
                    dim = args[1] if len(args) > 1 else kwargs.get("dim")
                    recorder.running.append(RunningCall(kind, recorder.stack[-1] if recorder.stack else "", args[0] if args else None, dim, out))
                return out

        def pre(name: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            recorder.events.append(_Event(name, "in", recorder._tensors((args, kwargs))))
            recorder.stack.append(name)

        def post(name: str, module: Any, args: tuple[Any, ...], out: Any) -> None:
            recorder.events.append(_Event(name, "out", recorder._tensors(out)))
            recorder.stack.pop()

        def conv_input(name: str, original: Any, x: Any, weight: Any, bias: Any) -> Any:
            recorder.conv_inputs.setdefault(name, x)
            recorder.conv_calls[name] = recorder.conv_calls.get(name, 0) + 1
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

    def pad_of(self, x: Any) -> PadCall | None:
        return next((p for p in self.pads if p.out is x), None)


# The lengths the model is asked whether it runs at, to find the multiple its frames come in (a
# reshape that stacks 2, 3 or 4 frames into one shows within them).
LENGTHS_ASKED = tuple(range(1, 9))


def _length_multiple(model: Any, convs: Sequence[tuple[str, Any]], values: list[Any], index: int, axis: int, structure: Any) -> int:
    """The largest number every length the model runs at is a multiple of, asked at
    :data:`LENGTHS_ASKED` frames (1 where it runs at every one, or at none of them)."""
    runs = []
    for n in LENGTHS_ASKED:
        try:
            _Recorder(model, convs).run(_resized(values, index, axis, n), structure)
        except Exception:  # noqa: BLE001  a length the model does not take is what this asks
            continue
        runs.append(n)
    multiple = functools.reduce(math.gcd, runs, 0) or 1
    return multiple if all(n in runs for n in LENGTHS_ASKED if n % multiple == 0) else 1


def _resized(values: Sequence[Any], index: int, axis: int, frames: int) -> list[Any]:
    """The inputs with every input's frames (as :func:`_shared_axis` finds them) cut or repeated to ``frames``."""
    import torch

    size = values[index].shape[axis]
    out = list(values)
    for i, v in enumerate(values):
        at = _shared_axis(v, i == index, values[index].dim(), axis, size)
        if at is not None:
            out[i] = torch.cat([v] * (frames // size + 1), dim=at).narrow(at, 0, frames)
    return out


def _doubled(values: Sequence[Any], index: int, axis: int, tail: str) -> list[Any]:
    """The inputs with ``axis`` of every input shaped like input ``index`` there doubled: the
    first half as given, the second half ``tail`` ("flip": the frames reversed; "noise": new
    values), so that two doublings differ only after frame T."""
    import torch

    size = values[index].shape[axis]
    out = list(values)
    gen = torch.Generator().manual_seed(1234)
    for i, v in enumerate(values):
        at = _shared_axis(v, i == index, values[index].dim(), axis, size)
        if at is None:
            continue
        if tail == "flip" or not v.is_floating_point():
            second = v.flip(at) if tail == "flip" else v.roll(1, at)
        else:
            second = torch.randn(v.shape, generator=gen, dtype=v.dtype) * (v.std() if v.numel() > 1 else 1.0) + v.mean()
        out[i] = torch.cat([v, second], dim=at)
    return out


def _shared_axis(v: Any, itself: bool, rank: int, axis: int, size: int) -> int | None:
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


def _lengths(recorder: _Recorder, recurrent: Sequence[tuple[str, Any]]) -> list[int]:
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


def study(model: Any, values: list[Any], structure: Any, recurrent: Sequence[tuple[str, Any]], notes: list[str]) -> StreamContext:
    """Find the inputs' time axis, prove the model causal frame by frame (or refuse, naming the
    module), and plan the convolutions' caches. ``values`` are the flattened example inputs."""
    import torch

    from rnnx.exporters.selfcheck import as_float64, float64_copy

    context = StreamContext()
    model64 = float64_copy(model, notes, without="the causality probe run in the model's own dtype")
    probe_model = model64 if model64 is not None else model
    base = as_float64(values) if model64 is not None else list(values)
    convs = [(name, m) for name, m in probe_model.named_modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d))]
    progress.step("finding the time axis and proving the model causal")
    first = _Recorder(probe_model, convs)
    try:
        first.run(base, structure)
    except Exception:  # noqa: BLE001  a model that makes float32 tensors of its own (zeros for h0) may not run in float64
        if probe_model is model:
            raise
        notes.append("streaming: the model does not run in float64, so its causality was probed in its own dtype")
        probe_model, base = model, list(values)
        convs = [(name, m) for name, m in model.named_modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d))]
        first = _Recorder(probe_model, convs)
        first.run(base, structure)
    lengths = _lengths(first, recurrent)
    found = None
    for index, v in enumerate(base):
        if not isinstance(v, torch.Tensor):
            continue
        for axis in range(v.dim()):
            if v.shape[axis] < 1:
                continue
            trial = _Recorder(probe_model, convs)
            try:
                trial.run(_doubled(base, index, axis, "flip"), structure)
            except Exception:  # noqa: BLE001  an axis the model cannot double is not its time axis
                continue
            longer = _lengths(trial, recurrent)
            if len(longer) == len(lengths) and longer and all(n > m for n, m in zip(longer, lengths)):
                found = (index, axis, trial)
                break
        if found:
            break
    if found is None:
        raise RNNXError("streaming: expected an input axis whose length sets the recurrences' sequence length (the frames), found none "
                        "that the model runs with doubled; give an example with at least 2 frames, or export without streaming")
    index, axis, second = found
    context.time = (index, axis)
    other = _Recorder(probe_model, convs)
    other.run(_doubled(base, index, axis, "noise"), structure)
    if len(second.events) != len(other.events):
        notes.append("streaming: the model runs different modules on different frames of the same length, so its causality was not probed; "
                     "the chunked check stands")
        return context
    _refuse_non_causal(first, second, other, probe_model)
    outs = [[e for e in r.events if e.module == "" and e.kind == "out"] for r in (first, second)]
    if outs[0] and outs[1]:  # the model's own outputs: where a graph leaves their frames unnamed, this is where they are
        context.output_axes = [time_axis(x, y) for x, y in zip(outs[0][-1].tensors, outs[1][-1].tensors)]
    _plan_caches(context, first, second, convs, model)
    stacked = _length_multiple(probe_model, convs, base, index, axis, structure)
    if stacked > 1 and context.multiple % stacked:
        context.multiple = context.multiple * stacked // math.gcd(context.multiple, stacked)
        context.notes.append(f"streaming: the model runs only at lengths that are multiples of {stacked} frames (asked at 1 to "
                             f"{LENGTHS_ASKED[-1]}: a reshape that stacks frames, say), so chunks are a multiple of {context.multiple}")
    own = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    def dtype(d: Any) -> Any:  # the probe's float64 is the model's own dtype
        return own if probe_model is not model and d == torch.float64 else d

    context.running = plan_running(first.running, second.running, int(base[index].shape[axis]), dtype, context.notes)
    cached = [first.conv_inputs[c.module] for c in context.caches]
    context.running += plan_lookbacks(first.pads, second.pads, cached, dtype, context.notes)
    return context


def _same(a: Any, b: Any) -> bool:
    """Equal, up to the rounding of one run against another (float64 runs of the same
    arithmetic on the same frames differ by far less than 1e-9; a frame that saw other input
    differs by the size of the input)."""
    import torch

    if a.numel() == 0:
        return True
    if not a.is_floating_point():
        return bool((a == b).all())
    scale = 1.0 + float(a.abs().max())
    return float((a - b).abs().max()) <= (1e-9 if a.dtype == torch.float64 else 1e-4) * scale


def _verdicts(first: _Recorder, second: _Recorder, other: _Recorder) -> Iterator[tuple[_Event, int | None, bool]]:
    """Per event: the time axis of its first tensor that has one (None if none has), and
    whether every such tensor's frames standing for input frames before T agree between the
    two 2T runs."""
    seen: dict[tuple[str, str], int] = {}
    at_t = {}
    for e in first.events:  # the T run's events by module, kind and occurrence (a cell steps T times there, 2T in the others)
        k = seen[(e.module, e.kind)] = seen.get((e.module, e.kind), -1) + 1
        at_t[(e.module, e.kind, k)] = e
    seen.clear()
    for e2, e3 in zip(second.events, other.events):
        k = seen[(e2.module, e2.kind)] = seen.get((e2.module, e2.kind), -1) + 1
        e1 = at_t.get((e2.module, e2.kind, k), _Event(e2.module, e2.kind, []))
        timed, causal = None, True
        for a, b, c in zip(e1.tensors, e2.tensors, e3.tensors):
            axis = time_axis(a, b)
            if axis is None or b.shape != c.shape:
                continue
            timed = axis - a.dim() if timed is None else timed
            # Frames standing for input frames before T: as many as the T run has, but no more
            # than the frames the second T added (a conv padded on the right makes extra ones).
            keep = min(a.shape[axis], b.shape[axis] - a.shape[axis])
            if keep and not _same(b.narrow(axis, 0, keep), c.narrow(axis, 0, keep)):
                causal = False
        yield e2, timed, causal


def _refuse_non_causal(first: _Recorder, second: _Recorder, other: _Recorder, model: Any) -> None:
    """Refuse, naming it, the first module that makes a frame depend on later frames, or that
    reduces the time axis away; a transposed convolution along time (its output overlaps the
    next chunk, which a cache of its input does not carry)."""
    import torch

    from rnnx.exporters.modules import CELL_MODULES, RECURRENT_MODULES

    inputs_ok: dict[str, bool] = {}
    inputs_timed: dict[str, int | None] = {}
    for event, timed, causal in _verdicts(first, second, other):
        name = event.module
        if event.kind == "in":
            inputs_ok.setdefault(name, causal)
            inputs_timed.setdefault(name, timed)
            if not causal:
                parent, _, _ = name.rpartition(".")
                where = f"the forward of {parent}" if parent else "the model's forward"
                raise RNNXError(f"streaming: expected every frame to depend only on the frames before it, found {name}'s input changing at frame t "
                                f"with frames after t, made by {where} before calling {name}; make that code causal, or export without streaming")
            continue
        module = model.get_submodule(name) if name else model
        if not causal and inputs_ok.get(name, True):
            kind = type(module).__name__
            raise RNNXError(f"streaming: expected every frame to depend only on the frames before it, found {name or 'the model'} ({kind}) whose "
                            f"output at frame t changes with frames after t ({_why(module)}); make it causal, or export without streaming")
        leaf = not any(True for _ in module.children())
        if name and leaf and inputs_timed.get(name) is not None and timed is None and not isinstance(module, RECURRENT_MODULES + CELL_MODULES):
            raise RNNXError(f"streaming: expected modules that keep the time axis, found {name} ({type(module).__name__}) reducing it "
                            "(an output over the whole sequence, which no chunk has); pool the recurrence's final state instead, or export "
                            "without streaming")
        along = inputs_timed.get(name)
        if (isinstance(module, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)) and along is not None
                and -along <= len(module.kernel_size) and module.kernel_size[along] > 1):
            raise RNNXError(f"streaming: expected convolutions rnnx can cache, found {name} (a {type(module).__name__} along time: its "
                            "frames overlap into the next chunk); give it a kernel of 1 along time, or export without streaming")


def _why(module: Any) -> str:
    import torch

    if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d)):
        return "its window reaches past frame t; pad it on the left only, e.g. F.pad(x, ((kernel - 1) * dilation, 0)) and padding=0"
    if isinstance(module, torch.nn.MultiheadAttention):
        return "attention over the whole sequence; give it a causal mask"
    if isinstance(module, (torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.GroupNorm)):
        return "a normalization over time uses statistics of the whole sequence"
    if isinstance(module, (torch.nn.RNNBase, torch.nn.RNNCellBase)):  # its input holds still, so what moves is the state it starts from
        return "it starts from a state that reads the whole sequence (a summary of all frames, such as a mean over time), so the model is not causal"
    return "it mixes frames from later in the sequence"


def _plan_caches(context: StreamContext, first: _Recorder, second: _Recorder, convs: Sequence[tuple[str, Any]], model: Any) -> None:
    """A cache for each convolution with left context along time; the chunk length's multiple
    from the strides. ``model`` is the user's (its dtype and device make the caches)."""
    for name, conv in convs:
        a, b = first.conv_inputs.get(name), second.conv_inputs.get(name)
        if a is None or b is None:
            continue  # not on this model's path
        axis = time_axis(a, b)
        if axis is None:
            continue  # no time axis through it (over features only): nothing to carry
        if first.conv_calls[name] > 1:
            raise RNNXError(f"streaming: expected each convolution along time called once per forward, found {name} called "
                            f"{first.conv_calls[name]} times; streaming keeps one cache per module: use one module per call")
        spatial = len(conv.kernel_size)
        if axis < a.dim() - spatial:
            raise RNNXError(f"streaming: expected the time axis of {name}'s input among its convolved axes, found it at dim {axis} "
                            f"(a channel or batch axis); export without streaming")
        t = axis - a.dim()
        index = spatial + t
        if conv.padding_mode != "zeros":
            raise RNNXError(f"streaming: expected {name} to pad with zeros, found padding_mode={conv.padding_mode!r}, which reads frames the chunk "
                            "does not have at its edges; pad with zeros on the left, or export without streaming")
        fpad = (0, 0)
        padded = first.pad_of(a)
        if padded is not None:
            fpad = padded.around(t)
            if fpad != (0, 0) and not padded.zeros:
                raise RNNXError(f"streaming: expected the F.pad before {name} to pad with zeros, found mode={padded.mode!r}, "
                                f"value={padded.value!r}; pad with zeros, or export without streaming")
        pads = own_pads(conv)
        reach = conv.dilation[index] * (conv.kernel_size[index] - 1)
        stride = conv.stride[index]
        context.multiple *= stride
        left = fpad[0] + pads[index][0]
        if reach == 0:
            continue  # one frame at a time: nothing to cache
        if left == 0 and reach < stride:
            continue  # windows side by side (kernel = stride, a frame-rate reduction): chunks of the stride's multiple line up, no cache
        if left == 0:
            raise RNNXError(f"streaming: expected {name}'s windows of {reach + 1} frames, {stride} apart, to be padded on the left or not to "
                            f"overlap, found neither: its first output reads frames 0 to {reach}, and each window shares {reach + 1 - stride} "
                            "with the next, so a stream's first chunk would give fewer frames than the same frames later; export without "
                            f"streaming, or train the model with a left padding of {reach} frames (adding one now shifts every window)")
        shape = list(a.shape)
        shape[axis] = left
        context.caches.append(ConvCache(name, t, pads, fpad, stride, tuple(shape)))
    if context.multiple > 1:
        context.notes.append(f"streaming: chunks must be a multiple of {context.multiple} frames (the strides along time)")
