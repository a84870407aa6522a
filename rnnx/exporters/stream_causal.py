"""Which module or operation makes a frame depend on later frames, and the refusal that names it.

The probe's three runs (:class:`rnnx.exporters.stream_probe.Probe`: the example's length T, and
2T twice, differing only after frame T) are read event by event. In a causal model every
tensor's frames that stand for input frames before T agree between the two 2T runs, and a
tensor with no time axis (a state, a mask) agrees whole. The first module whose inputs pass and
whose output does not is refused, named with why and the user's line that calls it. Where the
cause is code in a forward rather than a torch module (``x - x.mean(1)``, a functional pool, an
initial state computed from a mean over the frames), the runs are recorded again with every
torch call made directly in that forward, and the first call whose inputs pass and whose output
does not is named instead: the operation, the forward it is in, its line, and why.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rnnx.errors import RNNXError
from rnnx.exporters.stream_probe import Event, OpCall, Probe, Recorder
from rnnx.exporters.stream_running import time_axis
from rnnx.exporters.stream_source import at, module_calls

# Why an operation along time reads later frames, by the name torch gives it (the rest: it mixes them).
WINDOW = "its window reaches past frame t"
OP_WHY: dict[str, str] = {
    **dict.fromkeys(("conv1d", "conv2d", "avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d", "lp_pool1d", "lp_pool2d",
                     "max_pool1d_with_indices", "max_pool2d_with_indices"), WINDOW),
    "flip": "which reverses the frames",
    **dict.fromkeys(("softmax", "log_softmax", "layer_norm", "instance_norm", "group_norm", "normalize"),
                    "which normalizes over the whole sequence"),
    "scaled_dot_product_attention": "attention over the whole sequence; give it a causal mask (is_causal=True)",
    **dict.fromkeys(("matmul", "bmm", "einsum", "__matmul__"), "a product over the time axis, which mixes every frame into each"),
}
REDUCES = "which reduces the time axis to a summary of the whole sequence, which no chunk has"
MIXES = "which mixes frames after t into frame t"


def same(a: Any, b: Any) -> bool:
    """Equal, up to the rounding of one run against another (float64 runs of the same
    arithmetic on the same frames differ by far less than 1e-9; a frame that saw other input
    differs by the size of the input)."""
    import torch

    if not isinstance(a, torch.Tensor):
        return bool(a == b)
    a, b = a.detach(), b.detach()  # a parameter a module is called with (weight norm's) requires gradients
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    if not a.is_floating_point() and not a.is_complex():
        return bool((a == b).all())
    scale = 1.0 + float(a.abs().max())
    return float((a - b).abs().max()) <= (1e-9 if a.dtype == torch.float64 else 1e-4) * scale


def _judge(values: Sequence[tuple[Any, Any, Any]]) -> tuple[int | None, bool, bool]:
    """For one call's values in the three runs: the time axis of the first that has one (from
    the end), whether their frames before T agree between the 2T runs, and whether the values
    without a time axis agree whole."""
    import torch

    timed, causal, steady = None, True, True
    for a, b, c in values:
        if not isinstance(a, torch.Tensor):
            steady = steady and same(b, c)
            continue
        axis = time_axis(a, b)
        if axis is None:
            if a.shape == b.shape == c.shape:
                steady = steady and same(b, c)
            continue
        if b.shape != c.shape:
            continue
        timed = axis - a.dim() if timed is None else timed
        # Frames standing for input frames before T: as many as the T run has, but no more
        # than the frames the second T added (a conv padded on the right makes extra ones).
        keep = min(a.shape[axis], b.shape[axis] - a.shape[axis])
        if keep and not same(b.narrow(axis, 0, keep), c.narrow(axis, 0, keep)):
            causal = False
    return timed, causal, steady


def verdicts(first: Recorder, second: Recorder, other: Recorder) -> Iterator[tuple[int, Event, int | None, bool, bool]]:
    """Per event of the 2T runs: its index, the event, and :func:`_judge` of its tensors."""
    for index, (e1, e2, e3) in enumerate(zip(_at_t(first, second), second.events, other.events)):
        yield (index, e2, *_judge(list(zip(e1.tensors, e2.tensors, e3.tensors))))


def _at_t(first: Recorder, second: Recorder) -> list[Event]:
    """For each event of a 2T run, the T run's event of the same module, kind and occurrence
    (a cell steps T times there, 2T in the others: its later steps have none, and an empty one)."""
    seen: dict[tuple[str, str], int] = {}
    at_t = {}
    for e in first.events:
        k = seen[(e.module, e.kind)] = seen.get((e.module, e.kind), -1) + 1
        at_t[(e.module, e.kind, k)] = e
    seen.clear()
    out = []
    for e in second.events:
        k = seen[(e.module, e.kind)] = seen.get((e.module, e.kind), -1) + 1
        out.append(at_t.get((e.module, e.kind, k), Event(e.module, e.kind, [])))
    return out


def op_name(func: Any) -> str:
    """``F.avg_pool1d``, ``torch.cumsum``, ``Tensor.mean``: a torch function as the user writes it."""
    import torch
    import torch.nn.functional as F

    name = getattr(func, "__name__", None) or repr(func)
    if getattr(F, name, None) is func:
        return f"F.{name}"
    if getattr(torch, name, None) is func:
        return f"torch.{name}"
    return f"Tensor.{name}"


def _dirty(value: tuple[Any, Any, Any]) -> bool:
    _, causal, steady = _judge([value])
    return not (causal and steady)


def culprit(runs: tuple[Recorder, Recorder, Recorder], start: Sequence[tuple[Any, Any, Any]]) -> tuple[OpCall, str] | None:
    """Walking back from the values ``start`` (each as the three runs have it) through the
    recorded calls that made them: the first call whose inputs agree (frames before T, and values
    without a time axis whole) and whose outputs do not, with why. None where the runs' calls do
    not line up one to one, or the walk meets no such call."""
    import torch

    calls = [r.ops for r in runs]
    if len({len(c) for c in calls}) != 1:
        return None
    made = {id(t): i for i, op in enumerate(calls[1]) for t in op.outputs if isinstance(t, torch.Tensor)}
    todo = [v for v in start if _dirty(v)]
    seen: set[int] = set()
    while todo:
        i = made.get(id(todo.pop(0)[1]))
        if i is None or i in seen:
            continue
        seen.add(i)
        a, b, c = (calls[0][i], calls[1][i], calls[2][i])
        if not (len(a.inputs) == len(b.inputs) == len(c.inputs) and len(a.outputs) == len(b.outputs) == len(c.outputs)):
            return None
        ins = list(zip(a.inputs, b.inputs, c.inputs))
        in_time, in_causal, in_steady = _judge(ins)
        out_time, out_causal, out_steady = _judge(list(zip(a.outputs, b.outputs, c.outputs)))
        if in_causal and in_steady and not (out_causal and out_steady):
            name = getattr(b.func, "__name__", "")
            return b, REDUCES if in_time is not None and out_time is None else OP_WHY.get(name, MIXES)
        todo += [v for v in ins if isinstance(v[1], torch.Tensor) and _dirty(v)]
    return None


def _located(probe: Probe, owner: str, index: int) -> str:
    """``: F.avg_pool1d in the model's forward, at net.py:14 (code), its window reaches...``:
    the call in ``owner``'s forward that made event ``index``'s values read later frames, found
    by recording that forward's calls again; "" where none is found."""
    runs = probe.record(owner)
    first, second, other = runs
    if len(second.events) <= index or len(other.events) <= index:
        return ""
    e1 = _at_t(first, second)[index]
    found = culprit(runs, list(zip(e1.tensors, second.events[index].tensors, other.events[index].tensors)))
    if found is None:
        return ""
    call, why = found
    forward = f"{owner}'s forward" if owner else "the model's forward"
    return f": {op_name(call.func)} in {forward}{at(call.frame)}, {why}"


def _called(probe: Probe, name: str) -> str:
    frames = module_calls(probe.model, probe.runs[0], probe.structure, name)
    return at(frames[0], "called at") if frames else ""


def _torch_class(module: Any) -> bool:
    return type(module).__module__.startswith("torch.")


def refuse_non_causal(first: Recorder, second: Recorder, other: Recorder, probe: Probe) -> None:
    """Refuse, naming it and its line, the first module or operation that makes a frame depend
    on later frames, or that reduces the time axis away; a transposed convolution along time
    (its output overlaps the next chunk, which a cache of its input does not carry)."""
    import torch

    from rnnx.exporters.modules import CELL_MODULES, RECURRENT_MODULES

    model = probe.model
    inputs: dict[str, tuple[bool, bool, int | None, int]] = {}
    for index, event, timed, causal, steady in verdicts(first, second, other):
        name = event.module
        if event.kind == "in":
            inputs.setdefault(name, (causal, steady, timed, index))
            if not causal:
                where = f"the forward of {event.caller}" if event.caller else "the model's forward"
                said = _located(probe, event.caller, index) or _called(probe, name)
                raise RNNXError(f"streaming: expected every frame to depend only on the frames before it, found {name}'s input changing at frame t "
                                f"with frames after t, made by {where} before calling {name}{said}; make that code causal, or export without "
                                "streaming")
            continue
        module = model.get_submodule(name) if name else model
        kind = type(module).__name__
        ins_causal, ins_steady, ins_timed, at_in = inputs.get(name, (True, True, None, index))
        if not causal and ins_causal:
            if not ins_steady:  # a value without frames (a state, a mask) reaching it reads later frames: its caller made it
                said = f" ({_why(module)})" + (_located(probe, event.caller, at_in) or _called(probe, name))
            else:  # the user's own module: the cause is in its forward
                said = "" if _torch_class(module) else _located(probe, name, index)
                said = said or f" ({_why(module)}){_called(probe, name) if name else ''}"
            raise RNNXError(f"streaming: expected every frame to depend only on the frames before it, found {name or 'the model'} ({kind}) whose "
                            f"output at frame t changes with frames after t{said}; make it causal, or export without streaming")
        leaf = not any(True for _ in module.children())
        if name and leaf and ins_timed is not None and timed is None and not isinstance(module, RECURRENT_MODULES + CELL_MODULES):
            raise RNNXError(f"streaming: expected modules that keep the time axis, found {name} ({kind}) reducing it (an output over the whole "
                            f"sequence, which no chunk has){_called(probe, name)}; pool the recurrence's final state instead, or export "
                            "without streaming")
        if (isinstance(module, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)) and ins_timed is not None
                and -ins_timed <= len(module.kernel_size) and module.kernel_size[ins_timed] > 1):
            raise RNNXError(f"streaming: expected convolutions rnnx can cache, found {name} (a {kind} along time: its frames overlap into the "
                            f"next chunk){_called(probe, name)}; give it a kernel of 1 along time, or export without streaming")


def _why(module: Any) -> str:
    import torch

    if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d)):
        return f"{WINDOW}; pad it on the left only, e.g. F.pad(x, ((kernel - 1) * dilation, 0)) and padding=0"
    if isinstance(module, (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.AvgPool1d, torch.nn.AvgPool2d, torch.nn.LPPool1d, torch.nn.LPPool2d)):
        return f"{WINDOW}; pad it on the left only, F.pad(x, (kernel - 1, 0)), with padding=0"
    if isinstance(module, torch.nn.MultiheadAttention):
        return "attention over the whole sequence; give it a causal mask"
    if isinstance(module, (torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.GroupNorm)):
        return "a normalization over time uses statistics of the whole sequence"
    if isinstance(module, (torch.nn.RNNBase, torch.nn.RNNCellBase)):  # its input holds still, so what moves is the state it starts from
        return "it starts from a state that reads the whole sequence (a summary of all frames, such as a mean over time), so the model is not causal"
    return "it mixes frames from later in the sequence"
