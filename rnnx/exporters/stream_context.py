"""Left context that streams: convolution caches, the chunk multiple, and the probe that names what cannot stream.

A streaming file cuts the sequence into chunks. A recurrence carries its states
(:mod:`rnnx.exporters.streaming`); a convolution along time needs the frames before the
chunk. Its left padding, zeros before the whole sequence, must be the last frames of the
chunk before: each such ``nn.Conv1d`` / ``nn.Conv2d`` keeps a cache of that many frames of
its input, one more state in and out, zeros first. Its right padding stays zeros; what the
model does with the frames it makes (a causal model drops them, as a TCN's chomp does) is
then the same in every chunk.

Which axis is time, which convolutions need a cache, what stops a model streaming and the
chunk multiple are learnt by running the model (its float64 copy, eagerly, recorded by
:mod:`rnnx.exporters.stream_probe`), not by reading its code:

- the inputs' time axis is the one whose doubling lengthens the recurrences' sequences;
- a tensor's time axis is its one axis whose size differs between a run at the example's
  length T and one at 2T;
- the model is run twice at 2T on inputs that differ only after frame T: the first module or
  operation that makes a frame depend on later ones is refused, naming its line
  (:mod:`rnnx.exporters.stream_causal`);
- a convolution's left padding is its own ``padding`` plus the zeros an ``F.pad`` put on the
  left of its input, watched with a TorchFunctionMode. rnnx hooks ``_conv_forward``, where
  both ``nn.Conv1d.forward`` and a subclass's own forward end, so a ``CausalConv1d`` that
  pads inside its forward is seen as it runs. Its windows, like a pool's, must stream
  (:mod:`rnnx.exporters.stream_pools`);
- the chunk multiple starts from the strides along time (convolutions and pools), and is
  asked of the model at lengths of each candidate (:mod:`rnnx.exporters.stream_lengths`): a
  reshape that stacks frames shows there.

Cumulative sums, frame counters and the zeros an F.pad puts before the frames (a pool's left
padding among them) are carried by :mod:`rnnx.exporters.stream_running`. What this cannot see
(a functional convolution, the previous frame made by concatenating zeros) the chunked check
still catches, naming the first operation whose chunked output differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rnnx import progress
from rnnx.check.truths import TorchTruth, as_float64
from rnnx.errors import RNNXError
from rnnx.exporters.stream_causal import refuse_non_causal
from rnnx.exporters.stream_lengths import CANDIDATES, CHUNKS_ASKED, chunk_multiple, timed
from rnnx.exporters.stream_pools import pad_refusal, plan_pools, windows_refusal
from rnnx.exporters.stream_probe import Probe, Recorder, doubled, resized, sequence_lengths
from rnnx.exporters.stream_running import RunningState, plan_lookbacks, plan_running, time_axis
from rnnx.exporters.stream_source import at, shown


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


# --- the probe ---------------------------------------------------------------------------------


def study(model: Any, values: list[Any], structure: Any, recurrent: Sequence[tuple[str, Any]], notes: list[str],
          time: tuple[int, int] | None = None) -> StreamContext:
    """Find the inputs' time axis, prove the model causal frame by frame (or refuse, naming the
    module or operation and its line), plan the convolutions' caches and find the chunk
    multiple. ``values`` are the flattened example inputs; ``time``: the frames' (input, axis)
    where the caller found them (a Python loop over the frames, rnnx.exporters.stream_loops)."""
    import torch

    def recorded(probe_model: Any, base: list[Any]) -> Recorder:
        recorder = Recorder(probe_model, [(name, m) for name, m in probe_model.named_modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d))])
        recorder.run(base, structure)
        return recorder

    context = StreamContext()
    # The probe runs in float64 where the model copies and runs so; else in its own dtype, the harness's note
    # saying why (an exception there is the model's own, and stops the export).
    truth = TorchTruth(model, notes, without="the causality probe run in the model's own dtype")
    progress.step("finding the time axis and proving the model causal")
    wide = as_float64(values) if truth.model64 is not None else []
    first = truth.float64(lambda model64: recorded(model64, wide))
    probe_model, base = (truth.model64, wide) if first is not None else (model, list(values))
    if first is None:
        first = recorded(model, base)
    convs = first.convs
    lengths = sequence_lengths(first, recurrent)
    found = None
    for index, v in enumerate(base):
        if not isinstance(v, torch.Tensor):
            continue
        for axis in range(v.dim()):
            if v.shape[axis] < 1 or time not in (None, (index, axis)):
                continue
            trial = Recorder(probe_model, convs)
            try:
                trial.run(doubled(base, index, axis, "flip"), structure)
            except Exception:  # noqa: BLE001  an axis the model cannot double is not its time axis
                continue
            longer = sequence_lengths(trial, recurrent)
            if time is not None or (len(longer) == len(lengths) and longer and all(n > m for n, m in zip(longer, lengths))):
                found = (index, axis, trial)
                break
        if found:
            break
    if found is None:
        raise RNNXError("streaming: expected an input axis whose length sets the recurrences' sequence length (the frames), found none: "
                        "no input axis the model runs with doubled lengthens every recurrence's sequence; give an example with at least 2 "
                        "frames, or export without streaming")
    index, axis, second = found
    context.time = (index, axis)
    noise = doubled(base, index, axis, "noise")
    other = Recorder(probe_model, convs)
    other.run(noise, structure)
    if len(second.events) != len(other.events):
        notes.append("streaming: the model runs different modules on different frames of the same length, so its causality was not probed; "
                     "the chunked check stands")
        return context
    probe = Probe(probe_model, convs, structure, (base, doubled(base, index, axis, "flip"), noise))
    refuse_non_causal(first, second, other, probe)
    outs = [[e for e in r.events if e.module == "" and e.kind == "out"] for r in (first, second)]
    if outs[0] and outs[1]:  # the model's own outputs: where a graph leaves their frames unnamed, this is where they are
        context.output_axes = [time_axis(x, y) for x, y in zip(outs[0][-1].tensors, outs[1][-1].tensors)]
    _plan_caches(context, first, second, convs, model)
    strides = context.multiple * plan_pools(first, second, probe_model, context.notes)
    context.multiple = _multiple(probe, first, second, strides, index, axis, context.notes)
    own = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    def dtype(d: Any) -> Any:  # the probe's float64 is the model's own dtype
        return own if probe_model is not model and d == torch.float64 else d

    context.running = plan_running(first.running, second.running, int(base[index].shape[axis]), dtype, context.notes)
    cached = [first.conv_inputs[c.module] for c in context.caches]
    context.running += plan_lookbacks(first.pads, second.pads, cached, dtype, context.notes)
    return context


def _multiple(probe: Probe, first: Recorder, second: Recorder, strides: int, index: int, axis: int, notes: list[str]) -> int:
    """The chunk multiple asked of the model (:mod:`rnnx.exporters.stream_lengths`), the strides'
    where no candidate gives whole frames at every stage (the chunked check then says why)."""
    base = probe.runs[0]

    def run(frames: int) -> Recorder | None:
        recorder = Recorder(probe.model, probe.convs)
        try:
            recorder.run(resized(base, index, axis, frames), probe.structure)
        except Exception:  # noqa: BLE001  a length the model does not take is what this asks
            return None
        return recorder

    found = chunk_multiple(run, timed(first, second), strides)
    tried = ", ".join(str(strides * j) for j in range(1, CANDIDATES + 1))
    if found is None:
        notes.append(f"streaming: no chunk of {tried} frames gives whole frames at every stage of the model (asked at 1 to {CHUNKS_ASKED} "
                     f"chunks of each), so chunks are a multiple of {strides} (the strides along time); the chunked check stands")
        return strides
    if found > 1:
        notes.append(f"streaming: chunks must be a multiple of {found} frames: the model gives whole frames at every stage (the strides "
                     f"along time, its pools, frames stacked by a reshape) only at multiples of {found} frames (asked at {tried})")
    return found


def _plan_caches(context: StreamContext, first: Recorder, second: Recorder, convs: Sequence[tuple[str, Any]], model: Any) -> None:
    """A cache for each convolution with left context along time; the chunk length's multiple
    from the strides. ``model`` is the user's (its dtype and device make the caches)."""
    for name, conv in convs:
        a, b = first.conv_inputs.get(name), second.conv_inputs.get(name)
        if a is None or b is None:
            continue  # not on this model's path
        axis = time_axis(a, b)
        if axis is None:
            continue  # no time axis through it (over features only): nothing to carry
        calls = first.conv_calls[name]
        where = at(calls[0], "called at")
        if len(calls) > 1:
            lines = " and ".join(shown(f) for f in calls[:2] if f is not None)
            raise RNNXError(f"streaming: expected each convolution along time called once per forward, found {name} called {len(calls)} times"
                            f"{', at ' + lines if lines else ''}; streaming keeps one cache per module: use one module per call")
        spatial = len(conv.kernel_size)
        if axis < a.dim() - spatial:
            continue  # time folded into the batch (each frame convolved on its own): nothing to carry
        t = axis - a.dim()
        index = spatial + t
        if conv.padding_mode != "zeros":
            raise RNNXError(f"streaming: expected {name} to pad with zeros, found padding_mode={conv.padding_mode!r}{where}, which reads frames the "
                            "chunk does not have at its edges; pad with zeros on the left, or export without streaming")
        fpad = (0, 0)
        padded = first.pad_of(a)
        if padded is not None:
            fpad = padded[0].around(t)
            refused = pad_refusal(name, *padded) if fpad != (0, 0) else None
            if refused is not None:
                raise refused
        pads = own_pads(conv)
        reach = conv.dilation[index] * (conv.kernel_size[index] - 1)
        stride = conv.stride[index]
        context.multiple *= stride
        left = fpad[0] + pads[index][0]
        refused = windows_refusal(name, reach, stride, left, where)
        if refused is not None:
            raise refused
        if reach == 0 or left == 0:
            continue  # one frame at a time, or windows side by side (kernel = stride, a frame-rate reduction): nothing to cache
        shape = list(a.shape)
        shape[axis] = left
        context.caches.append(ConvCache(name, t, pads, fpad, stride, tuple(shape)))
