"""``rnnx.export(..., streaming=True)``: every recurrence's states as graph inputs and outputs, proven chunk by chunk.

The usual model's forward(x) starts each nn.LSTM / GRU / RNN from zero states and drops its
final states; a streaming deployment needs both at the file's boundary. Rather than rewrite
the user's forward, rnnx exports a shallow copy of the model whose class puts
:class:`_StreamingForward` in front: its forward takes the original inputs plus one tensor
per state, installs for that call a pre-hook on each recurrent module that replaces the
``hx`` it is called with (None, or zeros the model made) by the state input, and a hook that
keeps the final states, then returns (the model's output tensors..., the final states...).
Module names, parameters and the recurrent modules' swap to native nodes are untouched, so
the rest of the exporter sees an ordinary model that takes and returns states.

A cell stepped in Python takes the state inputs at its first step of the forward, and its
last step's states are the outputs. Any other Python loop over the frames (a hand-written
cell, a cell whose h is normalised before the next step, a moving average) carries what each
step hands the next: :mod:`rnnx.exporters.stream_loops` finds those values by running the
model, and the streaming forward starts the loop's first step from the state inputs.

A convolution along time keeps the frames its left padding stood for; a cumsum along time
or an arange over the frames their running sum or count; zeros an F.pad put before the frames
(a delta feature's previous frame) the frames they stand for: each is one more state in and
out (:mod:`rnnx.exporters.stream_running`; :mod:`rnnx.exporters.stream_context` finds the
time axis and proves the model causal by running it).

A recurrence the model starts from a state of its own (a learned ``nn.Parameter`` h0
expanded to the batch, ``tanh(Linear(speaker_embedding))``) keeps it for a stream's first
chunk: the streaming forward takes one more input, a boolean scalar ``first_chunk``, and gives
the module ``where(first_chunk, the model's state, the state input)``, so the file computes the
state as the model does on the first chunk and carries it after, in one call per chunk (the
record says ``"initial": "computed"``, see :mod:`rnnx.streaming`). Where that state comes from
is read from autograd (:func:`_state_sources`): computed through another recurrence's weights,
it is that one's final state, a summary of the whole input (a seq2seq decoder started from its
encoder's), and the model is refused as not causal, naming both modules and the line.

What cannot stream is refused before tracing, in one line naming the module: a
bidirectional recurrence (its output at frame t needs the frames after t), a module called
more than once per forward, a state computed from another recurrence's final state, and
whatever the causality probe finds reading later frames (a centered convolution, attention
or a normalization over time, an initial state computed from a mean over the frames). What the probe cannot see (a functional convolution, a loop over frames in forward)
the chunked check catches: the file is run in ONNX Runtime chunk by chunk, feeding each
chunk's state outputs to the next, and must match the torch model run on the whole sequence
(:meth:`rnnx.exporters.stream_plan.StreamPlan.check`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters import shapes
from rnnx.exporters.modules import in_front
from rnnx.exporters.selfcheck import run_eager
from rnnx.exporters.stream_context import cached_conv_forward, study
from rnnx.exporters.stream_loops import find_loops, loop_carry
from rnnx.exporters.stream_plan import ModelRuns, StreamPlan, _Slot
from rnnx.exporters.stream_running import carry_mode
from rnnx.exporters.stream_source import at, called_at, raised_at, user_frame
from rnnx.exporters.user_code import pre_hooks, tensors

# --- the streaming model ---------------------------------------------------------------------


def _feed(hx: Any, chunk_first: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Pre-hook: call the recurrent module with the state inputs as its ``hx``, whatever the
    model passed (None, or the zeros it made). Where the model computes its own initial state
    (``chunk_first``, the first-chunk input, given), it is kept for the first chunk:
    ``where(first_chunk, the model's hx, the state input)``."""
    import torch

    kwargs = dict(kwargs)
    x = args[0] if args else kwargs.pop("input")
    own = args[1] if len(args) > 1 else kwargs.get("hx")
    kwargs.pop("hx", None)
    if chunk_first is not None and own is not None:
        hx = (tuple(torch.where(chunk_first, o, h) for o, h in zip(own, hx)) if isinstance(hx, tuple)
              else torch.where(chunk_first, own, hx))
    return (x, hx, *args[2:]), kwargs


def _feed_first(hx: Any, chunk_first: Any, first: list[bool], module: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """Pre-hook of a stepped cell: its first step of the forward starts from the state inputs;
    the later steps take what the model passes them (the step before's states)."""
    if not first[0]:
        return None
    first[0] = False
    return _feed(hx, chunk_first, module, args, kwargs)


def _keep(sink: dict[str, Any], name: str, cell: bool, module: Any, args: tuple[Any, ...], output: Any) -> None:
    """Hook: keep the module's final states, (h_n, c_n) or h_n; a cell's latest step's (h, c) or h."""
    sink[name] = output if cell else output[1]


class _StreamingForward:
    """Put in front of the user's model class (see the module docstring)."""

    _rnnx_streaming: StreamPlan

    def forward(self, *args: Any) -> tuple[Any, ...]:
        plan = self.__dict__["_rnnx_streaming"]
        inputs, states = args[:plan.n_inputs], args[plan.n_inputs:plan.n_inputs + len(plan.state_inputs)]
        chunk_first = args[-1] if plan.first is not None else None  # true on a stream's first chunk
        sink: dict[str, Any] = {}
        handles = []
        patched = []
        running = []
        looped = {}
        k = 0
        try:
            for slot in plan.slots:
                given = states[k:k + len(slot.inputs)]
                k += len(slot.inputs)
                if slot.running is not None:
                    running.append((slot.running, given[0]))
                    continue
                if slot.loop is not None:
                    looped[slot.loop.name] = given[0]
                    continue
                module = self.get_submodule(slot.module)  # type: ignore[attr-defined]
                if slot.conv is not None:  # where nn.Conv1d/2d.forward (or a subclass's) ends: its input, padded as the model padded it
                    module._conv_forward = functools.partial(cached_conv_forward, module, slot.conv, given[0], sink)
                    patched.append(module)
                    continue
                hx = (given[0], given[1]) if slot.lstm else given[0]
                # prepend: rnnx's own probes (which tensor reaches a module as its state) see the state input
                own = chunk_first if slot.computed else None
                feed = functools.partial(_feed_first, hx, own, [True]) if slot.cell else functools.partial(_feed, hx, own)
                handles.append(module.register_forward_pre_hook(feed, prepend=True, with_kwargs=True))
                handles.append(module.register_forward_hook(functools.partial(_keep, sink, slot.module, slot.cell)))
            # the loops' walk entered last: it sees the model's own calls before carry_mode does
            with (carry_mode(running, sink) if running else contextlib.nullcontext(),
                  loop_carry(self, plan.loops, looped, chunk_first, sink) if looped else contextlib.nullcontext()):
                out = super().forward(*inputs)  # type: ignore[misc]
        finally:
            for handle in handles:
                handle.remove()
            for module in patched:
                del module._conv_forward
        finals = []
        for slot in plan.slots:
            if slot.module not in sink:
                raise RNNXError(f"streaming: expected {slot.module} to be called, as on the example, found it skipped; streaming needs the same "
                                "recurrences on every call")
            finals += list(sink[slot.module]) if slot.lstm else [sink[slot.module]]
        return (*tensors(out), *finals)


@dataclass
class _Call:
    times: int = 0
    x: Any = None
    hx: Any = None


def _refuse(name: str, found: str, why: str, do: str, where: str = "") -> RNNXError:
    return RNNXError(f"streaming: expected recurrences that run frame by frame from zero states, found {found} at {name or '(the model)'} ({why})"
                     f"{where}; {do}")


def prepare_streaming(model: Any, example: Any, options: dict[str, Any], dynamic_axes: Any) -> tuple[Any, tuple[Any, ...], Any, StreamPlan]:
    """The model to export in streaming form, its example with zero states appended, the
    ``dynamic_axes`` with the states' batch axes added (where given), and the plan. Sets
    ``options``' input and output names to cover the states. Refuses what cannot stream."""
    import torch
    from torch.nn.utils.rnn import PackedSequence

    from rnnx.exporters.modules import CELL_MODULES, RECURRENT_MODULES, swappable

    if isinstance(model, torch.jit.ScriptModule) or not isinstance(model, torch.nn.Module):
        raise RNNXError(f"streaming: expected a torch.nn.Module (rnnx wraps its Python forward), found a {type(model).__name__}; "
                        "export the Python model, or pass its states as inputs yourself")
    if isinstance(model, RECURRENT_MODULES + CELL_MODULES):
        raise RNNXError(f"streaming: expected a model around its recurrences, found a bare {type(model).__name__}; it already streams "
                        "when exported with its states: rnnx.export(rnn, (x, hx), path)")
    if options.get("dynamic_shapes") is not None:
        raise RNNXError("streaming: expected dynamic= or dynamic_axes (by input name), found dynamic_shapes (by forward's parameters, "
                        "which the streaming model extends with states); give the axes by name")
    recurrent = []
    for name, m in model.named_modules():
        if isinstance(m, CELL_MODULES):
            recurrent.append((name, m))  # stepped in Python: its first call's state comes in, its last call's goes out
        if isinstance(m, RECURRENT_MODULES):
            if m.bidirectional:
                raise _refuse(name, f"a bidirectional nn.{type(m).__name__}", "its output at frame t needs the frames after t, which a chunk "
                              "does not have", "make it unidirectional, or export without streaming", called_at(model, example, name))
            if not swappable(m):
                base = next(b for b in RECURRENT_MODULES if isinstance(m, b)).__name__
                raise _refuse(name, f"a {type(m).__name__} (an nn.{base} subclass) with a forward of its own",
                              "rnnx cannot tell which of its arguments are the states", "use the plain module, or pass the states as inputs yourself",
                              called_at(model, example, name))
            recurrent.append((name, m))
    args = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    from torch.utils._pytree import tree_flatten

    flat, structure = tree_flatten(args)
    notes: list[str] = []
    leaves, _ = shapes.leaves_of(model, args)
    taken = {name for name, _ in model.named_modules()} | {leaf.name for leaf in leaves}
    loops = find_loops(model, flat, structure, recurrent, taken)  # a Python loop over the frames: what each step hands the next
    if not recurrent and not loops.states:
        raise RNNXError("streaming: expected at least one nn.LSTM, nn.GRU or nn.RNN, a cell, or a Python loop over the frames that hands a "
                        "value from step to step, found none; a model without recurrences has no state to carry: export it without streaming")
    calls, out = _probe(model, args, recurrent)
    example_ids = {id(a) for a in flat}
    slots, zeros = [], []
    sources: dict[str, _Source] | None = None  # where each recurrence's own initial state comes from, found once where one has one
    for name, m in recurrent:
        call = calls[name]
        if call.times == 0 or name in loops.covered:
            continue  # not on this model's path: it holds no state to carry; or stepped in a loop that carries its states
        cell = isinstance(m, CELL_MODULES)
        if call.times > 1 and not cell:
            raise _refuse(name, f"a module called {call.times} times in one forward", "streaming carries one state per module", "call it once per forward",
                          called_at(model, args, name, 2))
        if isinstance(call.x, PackedSequence):
            raise _refuse(name, "a PackedSequence input", "per-sequence lengths end the sequences at different frames", "feed it padded chunks",
                          called_at(model, args, name))
        given = [h for h in (call.hx if isinstance(call.hx, (tuple, list)) else (call.hx,)) if isinstance(h, torch.Tensor)]
        if any(id(h) in example_ids for h in given):
            raise _refuse(name, "initial states taken from the inputs", "the model already streams",
                          "export it without streaming (--streaming / streaming=True) and check it chunk by chunk with "
                          "rnnx verify FILE --against CODE --chunks N,N --state IN=OUT", called_at(model, args, name))
        computed = False
        if given:  # the model starts it from a state of its own: zeros it made, a learned h0, one computed from an input or another state
            if sources is None:
                sources = _state_sources(model, args, recurrent)
            source = sources.get(name, _Source())
            if source.through is not None:
                kind = type(m).__name__
                raise RNNXError(f"streaming: expected every frame to depend only on the frames before it, found {name} ({kind}) starting from a "
                                f"state computed from {source.through}'s final state{source.line}: {name} reads the whole input's summary before "
                                f"its first frame, so the model is not causal; stream {source.through} alone and run {name} once the input has "
                                "ended, or export without streaming")
            computed = source.reads or any(bool(h.detach().ne(0).any()) for h in given)
        lstm = isinstance(m, (torch.nn.LSTM, torch.nn.LSTMCell))
        if cell:  # states (batch, hidden), or (hidden,) for an unbatched step
            weight = m.weight_ih
            shape: tuple[int, ...] = (int(call.x.shape[0]), m.hidden_size) if call.x.dim() == 2 else (m.hidden_size,)
            zeros += [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(2 if lstm else 1)]
        else:
            weight = m.weight_ih_l0
            batch = () if call.x.dim() == 2 else (int(call.x.shape[0 if m.batch_first else 1]),)
            h_size = getattr(m, "proj_size", 0) or m.hidden_size
            zeros.append(torch.zeros((m.num_layers, *batch, h_size), dtype=weight.dtype, device=weight.device))
            if lstm:
                zeros.append(torch.zeros((m.num_layers, *batch, m.hidden_size), dtype=weight.dtype, device=weight.device))
        kinds = ("h", "c") if lstm else ("h",)
        slots.append(_Slot(name, lstm, tuple(f"{name}.{k}_in" for k in kinds), tuple(f"{name}.{k}_out" for k in kinds), cell=cell,
                           computed=computed))
    for state in loops.states:
        zeros.append(torch.zeros(state.shape, dtype=state.dtype))
        slots.append(_Slot(state.name, False, (f"{state.name}_in",), (f"{state.name}_out",), computed=state.computed, loop=state))
    context = study(model, flat, structure, [(name, m) for name, m in recurrent if calls[name].times], notes,
                    time=loops.time if loops.states else None)
    for cache in context.caches:
        weight = model.get_submodule(cache.module).weight
        zeros.append(torch.zeros(cache.shape, dtype=weight.dtype, device=weight.device))
        slots.append(_Slot(cache.module, False, (f"{cache.module}.cache_in",), (f"{cache.module}.cache_out",), cache))
    for run in context.running:
        zeros.append(torch.zeros(run.shape, dtype=run.dtype))
        slots.append(_Slot(run.name, False, (f"{run.name}_in",), (f"{run.name}_out",), running=run))
    plan = StreamPlan(len(args), slots, context.multiple, context.output_axes, notes=notes + context.notes,
                      loops=loops.loops if loops.states else ())

    # Names: the user's (or forward's) for the original inputs and outputs, then the states'.
    tensors = [leaf.name for leaf in leaves if leaf.is_tensor]
    given_in = list(options.get("input_names") or [])
    if len(given_in) > len(tensors):
        raise RNNXError(f"input names: expected at most {len(tensors)} (the model's tensor inputs; rnnx names the states), found {given_in}")
    if any(slot.computed for slot in slots):  # one boolean scalar after the states: true on a stream's first chunk
        plan.first = next(n for n in ("first_chunk", "rnnx.first_chunk", "rnnx.stream_first_chunk") if n not in {*tensors, *given_in})
    options["input_names"] = given_in + tensors[len(given_in):] + plan.state_inputs + ([plan.first] if plan.first else [])
    graph_names = options["input_names"][:len(tensors)]  # the user's tensor inputs, as the graph names them
    plan.runs = ModelRuns(model, flat, structure, dict(zip(graph_names, (leaf.index for leaf in leaves if leaf.is_tensor))))
    names_out = _output_names(out)
    given_out = list(options.get("output_names") or [])
    if given_out and len(given_out) != len(names_out) and given_out[len(names_out):] != plan.state_outputs:  # the record names the states so
        raise RNNXError(f"output names: expected {len(names_out)} (the model's output tensors; rnnx names the states "
                        f"{', '.join(plan.state_outputs)}), found {given_out}")
    options["output_names"] = given_out if len(given_out) > len(names_out) else (given_out or names_out) + plan.state_outputs
    caches = {f"{c.module}.cache_in": [c.axis % len(c.shape)] for c in context.caches}
    caches |= {f"{r.name}_in": [r.axis % len(r.shape)] for r in context.running}
    if caches and dynamic_axes is None:  # a cache holds a fixed number of frames (torch would make its size a dimension)
        static = dict(options.get("static") or {})
        options["static"] = {**static, **{name: sorted({*static.get(name, []), *axes}) for name, axes in caches.items()}}
    if isinstance(dynamic_axes, Mapping):
        # torch.onnx's dynamic_axes makes every axis it does not list static: list the states' batch axes.
        # A recurrence's batched states are (layers, batch, hidden); a cache has the batch first, as its conv's input.
        owners = [slot for slot in slots for _ in slot.inputs]  # the zeros are in the states' order
        axes = [slot.conv.batch_axis if slot.conv is not None else slot.running.batch_axis if slot.running is not None
                else slot.loop.batch_axis if slot.loop is not None
                else (0 if z.dim() == 2 else None) if slot.cell else (1 if z.dim() == 3 else None) for slot, z in zip(owners, zeros)]
        label = _batch_label(dynamic_axes, context.time, [leaf.name for leaf in leaves], given_in)
        dynamic_axes = {**dynamic_axes, **{name: {axis: label} for name, axis in zip(plan.state_inputs, axes) if axis is not None}}

    streaming = copy.copy(model)  # shares the modules and parameters; only the class of the copy changes
    streaming.__class__ = in_front(_StreamingForward, type(model))
    streaming.__dict__["_rnnx_streaming"] = plan
    first = (torch.tensor(True),) if plan.first else ()  # the example is a first chunk: the model's own initial states
    return streaming, (*args, *zeros, *first), dynamic_axes, plan


def _batch_label(dynamic_axes: Mapping[str, Any], time: tuple[int, int] | None, names: list[str], given: list[str]) -> str | None:
    """The user's label for the batch axis of the input the frames come in: its one other
    named axis in ``dynamic_axes``. The states' batch axes take it, since torch requires them
    equal to it; None (rnnx names it) where there is no single such label."""
    if time is None or time[0] >= len(names):
        return None
    index, axis = time
    keys = [names[index]] + ([given[index]] if index < len(given) else [])
    entry = next((dynamic_axes[k] for k in keys if k in dynamic_axes), None)
    if not isinstance(entry, Mapping):
        return None
    labels = {label for a, label in entry.items() if a != axis and isinstance(label, str)}
    return labels.pop() if len(labels) == 1 else None


def _probe(model: Any, args: tuple[Any, ...], recurrent: list[tuple[str, Any]]) -> tuple[dict[str, _Call], Any]:
    """Run the model once on the example, recording each recurrent module's calls: how many,
    its input and the ``hx`` it was given. Also returns the model's output."""
    from torch.utils._pytree import tree_flatten

    calls = {name: _Call() for name, _ in recurrent}

    def record(name: str, module: Any, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        call = calls[name]
        call.times += 1
        if call.times == 1:  # a cell's later steps take the states its earlier ones made
            call.x = a[0] if a else kw.get("input")
            call.hx = a[1] if len(a) > 1 else kw.get("hx")

    flat, structure = tree_flatten(args)
    try:
        with pre_hooks(recurrent, record):
            out = run_eager(model, flat, structure)
    except Exception as exc:  # noqa: BLE001  the user's model may raise anything
        raise RNNXError(f"streaming: expected the model to run on the example, found it raised {type(exc).__name__}: "
                        f"{one_line(exc, CAUSE_CHARS)}{at(raised_at(exc))}; check the example inputs") from exc
    return calls, out


@dataclass
class _Source:
    """Where a recurrence's own initial state comes from, as autograd traced it."""

    reads: bool = False  # computed from parameters or float inputs (a learned h0, a speaker embedding through a Linear)
    through: str | None = None  # another recurrence whose weights made it: its final state, a summary of the whole input
    line: str = ""  # ", at file.py:N: code", the line of forward that calls the module with it, where found

_MAX_WALK = 200_000  # autograd nodes walked back from one state (an unrolled loop over thousands of steps stays under it)


def _state_sources(model: Any, args: tuple[Any, ...], recurrent: list[tuple[str, Any]]) -> dict[str, _Source]:
    """Run the model once with gradients on (its float inputs requiring them) and, for each
    recurrence's first call, walk its ``hx`` back through autograd: a state whose history holds
    another recurrence's weights was computed from that one's final state (a seq2seq decoder
    started from its encoder's), which no chunk has before the input ends; one that holds
    parameters or inputs otherwise is computed by the model, and the file computes it the same
    way for a stream's first chunk. Empty where the model does not run so (the causality probe
    still names a state that reads later frames)."""
    import contextlib
    import io
    import warnings

    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    owner: dict[int, str] = {}
    for name, m in recurrent:
        for p in m.parameters():
            owner.setdefault(id(p), name)
    found: dict[str, _Source] = {}

    def walk(name: str, module: Any, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if name in found:
            return
        hx = a[1] if len(a) > 1 else kw.get("hx")
        tensors = [h for h in (hx if isinstance(hx, (tuple, list)) else (hx,)) if isinstance(h, torch.Tensor)]
        source = found[name] = _Source(reads=any(h.requires_grad for h in tensors), line=_caller())
        todo = [h.grad_fn for h in tensors if h.grad_fn is not None]
        seen: set[Any] = set()
        while todo and len(seen) < _MAX_WALK and source.through is None:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            variable = getattr(fn, "variable", None)  # AccumulateGrad: a parameter or an input
            if variable is not None and owner.get(id(variable)) not in (None, name):
                source.through = owner[id(variable)]
            todo += [f for f, _ in fn.next_functions]

    flat, structure = tree_flatten(args)
    leaves = [v.detach().clone().requires_grad_() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in flat]
    was_training = model.training
    model.eval()
    try:
        with pre_hooks(recurrent, walk), torch.enable_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            model(*tree_unflatten(leaves, structure))
    except Exception:  # noqa: BLE001  the model ran without gradients in _probe; what it does with them is its own affair
        return {}
    finally:
        model.train(was_training)
    return found


def _caller() -> str:
    """", at file.py:N (code)" for the user's line that is running (the forward calling a
    module), or "" where there is none."""
    return at(user_frame())


def _output_names(out: Any) -> list[str]:
    """Names of the model's output tensors, as rnnx names a model's outputs (dict keys and
    namedtuple fields where it has them, ``output_<i>`` otherwise, ``output`` for one)."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    paths = [p for p, v in tree_flatten_with_path(out)[0] if isinstance(v, torch.Tensor)]
    names = []
    for path in paths:
        keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
        names.append("output" if not keys else "output_" + "_".join(keys) if all(k.isdigit() for k in keys) else "_".join(keys))
    return names if len(set(names)) == len(names) else [f"output_{i}" for i in range(len(names))]
