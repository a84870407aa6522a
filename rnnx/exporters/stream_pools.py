"""Windows along time: what a convolution's or a pool's windows need to stream, and the pools' plan.

A window of ``reach + 1`` frames every ``stride`` frames, padded by ``left`` zeros before the
sequence, streams in chunks of a multiple of the stride when each chunk makes as many outputs as
the same frames make in the whole sequence: ``floor((left + chunk - reach - 1) / stride) + 1 =
chunk / stride``, that is ``reach + 1 - stride <= left <= reach``. Windows side by side (kernel =
stride, a frame-rate reduction) need no padding and nothing carried; overlapping windows need
the frames they share with the chunk before, which the padding stands for: a convolution's cache
(:mod:`rnnx.exporters.stream_context`), or for a pool the F.pad before it, carried as a look-back
(:mod:`rnnx.exporters.stream_running`). Padded by less, a stream's first chunk gives fewer frames
than the same frames later; by more, the first window reads only padding, and a stream would
repeat it before every chunk. Both are refused with that reason, naming the line.

Pools are watched as torch functions (``nn.MaxPool1d`` and ``F.max_pool1d`` alike): one along
time sets the chunk multiple by its stride; one whose own padding pads time is refused, since
every chunk would pad its first frame again (a centred pool reads later frames and the causality
probe refuses it first).
"""

from __future__ import annotations

from typing import Any

from rnnx.errors import RNNXError
from rnnx.exporters.stream_probe import PoolCall, Recorder
from rnnx.exporters.stream_running import PadCall, time_axis
from rnnx.exporters.stream_source import Frame, at

LEFT_PADDING_FIX = "export without streaming, or train the model with a left padding of {reach} frames (adding one now shifts every window)"


def windows_refusal(name: str, reach: int, stride: int, left: int, where: str) -> RNNXError | None:
    """The refusal of windows of ``reach + 1`` frames every ``stride`` padded by ``left`` zeros
    on the left (see the module docstring), or None where they stream. ``name`` is how the
    message names the operation, ``where`` its line (``, called at net.py:9 (code)``)."""
    span = reach + 1
    if reach + 1 - stride <= left <= reach or (left == 0 and reach < stride):
        return None
    if left > reach:
        return RNNXError(f"streaming: expected {name}'s left padding along time to reach back no further than its window of {span} frames, found "
                         f"{left} frames of padding{where}: its first window reads only padding, which a stream would put before every chunk "
                         f"again; pad it by {reach} frame{'s' if reach > 1 else ''}, or export without streaming")
    shared = span - stride
    if left == 0:
        return RNNXError(f"streaming: expected {name}'s windows of {span} frames, {stride} apart, to be padded on the left or not to overlap, "
                         f"found neither{where}: its first output reads frames 0 to {reach}, and each window shares {shared} with the next, so a "
                         f"stream's first chunk would give fewer frames than the same frames later; {LEFT_PADDING_FIX.format(reach=reach)}")
    return RNNXError(f"streaming: expected {name}'s windows of {span} frames, {stride} apart, to be padded on the left by at least the {shared} "
                     f"frames each shares with the next, found {left}{where}: a stream's first chunk would give fewer frames than the same "
                     f"frames later; {LEFT_PADDING_FIX.format(reach=reach)}")


def pad_refusal(name: str, pad: PadCall, frame: Frame | None) -> RNNXError | None:
    """The refusal of an F.pad before ``name`` that pads time with other than zeros (the frames
    of the chunk before stand for zeros only), or None."""
    if pad.zeros:
        return None
    value = f", value={pad.value!r}" if pad.mode == "constant" else ""
    return RNNXError(f"streaming: expected the F.pad before {name} to pad with zeros, found mode={pad.mode!r}{value}{at(frame)}, "
                     "which a stream cannot carry from the chunk before; pad with zeros, or export without streaming")


def pool_name(call: PoolCall, model: Any) -> tuple[str, str]:
    """How a refusal names a pool, and where: ``pool`` and ``, called at net.py:9 (code)`` for a
    pool module; ``F.avg_pool1d`` and `` in the model's forward, at net.py:9 (code)`` for a call in code."""
    import torch.nn.functional as F

    owner = model.get_submodule(call.owner) if call.owner else model
    if type(owner).__module__.startswith("torch.nn.modules.pooling"):
        return call.owner, at(call.frame, "called at")
    forward = f"{call.owner}'s forward" if call.owner else "the model's forward"
    return (f"F.{call.name}" if hasattr(F, call.name) else f"torch.{call.name}"), f" in {forward}{at(call.frame)}"


def plan_pools(first: Recorder, second: Recorder, model: Any, notes: list[str]) -> int:
    """The chunk multiple the pools along time set (the product of their strides), refusing a
    pool whose windows cannot stream. ``first`` and ``second``: the probe's runs at the
    example's length and at twice it."""
    if len(first.pools) != len(second.pools):
        notes.append("streaming: the model pools a different number of times at different lengths, so the pools set no chunk multiple; "
                     "the chunked check stands")
        return 1
    multiple = 1
    for a, b in zip(first.pools, second.pools):
        axis = time_axis(a.input, b.input)
        if axis is None:
            continue  # over features only: the same in every chunk
        t = axis - a.input.dim()
        if -t > a.spatial:
            continue  # time on a batch or channel axis: each frame pooled on its own
        index = a.spatial + t
        kernel, stride = a.along("kernel_size", index, 1), a.along("stride", index, 1)
        padding, dilation = a.along("padding", index, 0), a.along("dilation", index, 1)
        name, where = pool_name(a, model)
        if padding:
            raise RNNXError(f"streaming: expected {name} to take the frames before the sequence from an F.pad, found its own padding={padding} "
                            f"along time{where}, which every chunk would put before its first frame again; pad with F.pad(x, ({padding}, 0)) "
                            "before it and padding=0 (zeros, which rnnx carries as the chunk before's frames; a max pool then sees zeros "
                            "where it saw -inf), or export without streaming")
        left = 0
        padded = first.pad_of(a.input)
        if padded is not None:
            pad, frame = padded
            left = pad.around(t)[0]
            refused = pad_refusal(name, pad, frame) if left else None
            if refused is not None:
                raise refused
        refused = windows_refusal(name, dilation * (kernel - 1), stride, left, where)
        if refused is not None:
            raise refused
        multiple *= stride
    return multiple
