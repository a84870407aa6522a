"""A Python loop over the frames, streamed: the values each step hands to the next are states.

A loop over time written in Python (a hand-written LSTM cell stepped over ``x[:, t]``, a
layer-normalised cell, an nn.LSTMCell whose h goes through a LayerNorm before the next step, an
exponential moving average over frames) is traced unrolled, and the export makes it one native
node or one ONNX ``Loop`` of any length (:mod:`rnnx.graphs.fuse_steps`, :mod:`rnnx.graphs.reroll`).
To stream it, a chunk's first step must start from the values the chunk before's last step
left: those values are states, inputs and outputs of the file, zeros on a stream's first chunk
(or what the model computes there, as :mod:`rnnx.exporters.streaming` does for a recurrence).

Which values they are is learnt by running the model, as the rest of streaming is, not by
reading its code. rnnx watches the calls the model's own code makes in one forward: each torch
function it calls, and each torch.nn module it calls as one call (what runs inside a module is
the module's), each known by its function and the lines of the model's code it runs from. A loop
over the frames is a block of calls repeated once per frame: T times at T frames and 2T times
at 2T. A value one repetition (a *step*) makes and the next reads is carried; what the first
step reads in its place is its initial value, made before the loop.

The streaming forward walks the same calls as they run (:func:`loop_carry`): where the first
step reads an initial value it reads the state input instead (``where(first_chunk, the model's
value, the state input)`` for one the model computes, not zeros), and each step's value is kept,
so the last step's is the state output. The trace then holds a loop that starts from graph
inputs and ends in graph outputs, which the export fuses or re-rolls as any other.

What cannot stream is refused, naming the call and the line of code: a step that reads a later
frame or a value of the whole sequence (its first steps change when only later frames do, in
the same two runs the causality probe makes), a loop started from such a value, a step that
reads a value made two steps before.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rnnx.check.truths import TorchTruth, as_float64
from rnnx.errors import RNNXError
from rnnx.exporters.stream_calls import Call, Key, Record, at_line, run_calls, watching, what
from rnnx.exporters.stream_causal import same
from rnnx.exporters.stream_probe import doubled
from rnnx.exporters.stream_running import time_axis


@dataclass(frozen=True)
class LoopState:
    """One value a loop's step hands to the next, carried across chunks."""

    name: str  # the state is <name>_in / <name>_out: the variable holding it, after the module whose forward loops
    shape: tuple[int, ...]  # of its initial value, at the example's batch
    dtype: Any  # a torch dtype
    computed: bool  # its initial value is the model's own (not zeros): the file computes it on a stream's first chunk
    batch_axis: int | None


@dataclass(frozen=True)
class Loop:
    """One loop over the frames as the streaming forward walks it."""

    before: tuple[Key, ...]  # the calls made since the loop before (or the forward's start)
    body: tuple[Key, ...]  # one step's calls
    reads: tuple[tuple[int, int, str, bool], ...] = ()  # (call in the step, flattened argument, state, computed): the first step's initial values
    keeps: tuple[tuple[int, int, str], ...] = ()  # (call in the step, flattened output, state): the value the next step reads


@dataclass
class LoopPlan:
    """The loops over the frames a model runs, and what they carry."""

    loops: tuple[Loop, ...] = ()
    states: tuple[LoopState, ...] = ()
    time: tuple[int, int] | None = None  # (flattened input, axis): the frames the loops step over
    covered: frozenset[str] = frozenset()  # recurrent modules called in a loop's step, whose states the loop carries


# --- finding the loops ----------------------------------------------------------------------------


def _repeats(keys: Sequence[Key], start: int, period: int, times: int) -> bool:
    """Whether ``keys`` from ``start`` are one block of ``period`` calls repeated exactly ``times`` times."""
    end = start + period * times
    if end > len(keys) or any(keys[m] != keys[m + period] for m in range(start, end - period)):
        return False
    return list(keys[end:end + period]) != list(keys[start:start + period])


def _blocks(keys: Sequence[Key], times: int) -> list[tuple[int, int]]:
    """(start, period) of each block of calls repeated exactly ``times`` times in a row, in order."""
    found, i = [], 0
    while i < len(keys):
        period = next((j - i for j in range(i + 1, i + (len(keys) - i) // times + 1)
                       if keys[j] == keys[i] and _repeats(keys, i, j - i, times)), None)
        if period is None:
            i += 1
            continue
        found.append((i, period))
        i += period * times
    return found


def _segments(first: Sequence[Key], second: Sequence[Key], frames: int) -> list[tuple[int, int]]:
    """The loops over ``frames`` frames in the calls at that length (``first``), kept where the
    calls at twice it (``second``) are the same with each loop's step twice as many times."""
    bodies = {tuple(second[s:s + p]) for s, p in _blocks(second, 2 * frames)}
    kept = [(s, p) for s, p in _blocks(first, frames) if tuple(first[s:s + p]) in bodies]
    expected: list[Key] = []
    at = 0
    for s, p in kept:
        expected += list(first[at:s]) + list(first[s:s + p]) * (2 * frames)
        at = s + p * frames
    expected += list(first[at:])
    return kept if kept and expected == list(second) else []


def find_loops(model: Any, values: list[Any], structure: Any, recurrent: Sequence[tuple[str, Any]], taken: set[str]) -> LoopPlan:
    """The model's loops over the frames and the states they carry (see the module docstring);
    an empty plan where it has none. ``values``: the flattened example inputs; ``taken``: names
    the states must not take. Refuses a loop that cannot stream."""
    import torch

    first = run_calls(model, values, structure, names=True)
    if first is None:
        return LoopPlan()
    keys = first.keys
    for index, v in enumerate(values):
        for axis in range(v.dim() if isinstance(v, torch.Tensor) else 0):
            frames = int(v.shape[axis])
            if frames < 2 or not _blocks(keys, frames):
                continue
            second = run_calls(model, doubled(values, index, axis, "flip"), structure)
            segments = _segments(keys, second.keys, frames) if second is not None else []
            if segments:
                plan = _plan(first, segments, frames, values, recurrent, taken)
                plan.time = (index, axis)
                _refuse_non_causal(model, values, structure, first, segments, frames, plan)
                return plan
    return LoopPlan()


# --- what a loop carries --------------------------------------------------------------------------


def _carried(calls: Sequence[Call], where: Mapping[int, tuple[int, int, int]], loop: int, start: int, period: int, frames: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(call in the step, argument) -> (call in the step, output): what each step reads of the
    step before, the same at every step; a refusal where a step reads an older step's value."""
    first: dict[tuple[int, int], tuple[int, int]] | None = None
    for k in range(1, frames):
        found = {}
        for q in range(period):
            call = calls[start + k * period + q]
            for arg, (j, o) in call.reads.items():
                at = where.get(j)
                if at is None or at[0] != loop or at[1] == k:
                    continue  # made before the loop, by another loop, or by this step
                if at[1] < k - 1:
                    raise RNNXError(f"streaming: expected each step of the loop over the frames to read the step before's values, found its "
                                    f"{what(call.key)}{at_line(call.key)} reading a value made {k - at[1]} steps before; rnnx carries one step's "
                                    "values to the next: hand the older value on from step to step, or export without streaming")
                found[(q, arg)] = (at[2], o)
        if first is None:
            first = found
        elif found != first:
            q, _ = min(set(found) ^ set(first))
            call = calls[start + k * period + q]
            raise RNNXError(f"streaming: expected every step of the loop over the frames to read the step before's values as the second does, "
                            f"found step {k}'s {what(call.key)}{at_line(call.key)} reading others; make the steps one computation, or export without streaming")
    return first or {}


def _plain_cells(calls: Sequence[Call], segments: Sequence[tuple[int, int]], carried: list[dict[tuple[int, int], list[tuple[int, int]]]],
                 recurrent: Sequence[tuple[str, Any]], where: Mapping[int, Any]) -> tuple[set[tuple[int, tuple[int, int]]], set[str]]:
    """The carried values a stepped cell's own states are (fed back as they come out: its
    streaming slot carries them, as before loops were carried), and the recurrent modules a
    loop's step calls otherwise (a LayerNorm on the h fed back, an nn.GRU stepped a frame at a
    time), whose states the loop carries."""
    import torch

    from rnnx.exporters.modules import CELL_MODULES

    plain: set[tuple[int, tuple[int, int]]] = set()
    covered: set[str] = set()
    for name, m in recurrent:
        label = f"module {name}"
        inside = [(i, q) for i, (s, p) in enumerate(segments) for q in range(p) if calls[s + q].key[0] == label]
        if not inside or any(c.key[0] == label and j not in where for j, c in enumerate(calls)):
            continue  # not in a loop's step, or called outside one too: a module's own rules stand
        if isinstance(m, CELL_MODULES) and len(inside) == 1:
            i, q = inside[0]
            s, period = segments[i]
            own = {src: reads for src, reads in carried[i].items() if src[0] == q or any(r[0] == q for r in reads)}
            states = [p for p, v in enumerate(calls[s + period + q].leaves) if isinstance(v, torch.Tensor)][1:]  # the second step's hx, after the input
            fed = [reads[0][1] for _, reads in sorted(own.items()) if len(reads) == 1 and reads[0][0] == q]
            if own and all(src[0] == q for src in own) and fed == states and [o for _, o in sorted(own)] == list(range(len(own))):
                plain |= {(i, src) for src in own}
                continue
        covered.add(name)
    return plain, covered


def _plan(first: Record, segments: list[tuple[int, int]], frames: int, values: Sequence[Any], recurrent: Sequence[tuple[str, Any]],
          taken: set[str]) -> LoopPlan:
    import torch

    from rnnx.exporters.modules import RECURRENT_MODULES

    calls, keys = first.calls, first.keys
    where = {s + k * p + q: (i, k, q) for i, (s, p) in enumerate(segments) for k in range(frames) for q in range(p)}
    carried: list[dict[tuple[int, int], list[tuple[int, int]]]] = []
    for i, (s, p) in enumerate(segments):
        by_source: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for read, source in sorted(_carried(calls, where, i, s, p, frames).items()):
            by_source.setdefault(source, []).append(read)
        carried.append(by_source)
    plain, covered = _plain_cells(calls, segments, carried, recurrent, where)
    stepped = {name for name, m in recurrent if isinstance(m, RECURRENT_MODULES)}  # an nn.LSTM / GRU / RNN: its states (layers, batch, hidden)
    loops, states, used = [], [], set(taken)
    at = 0
    for i, (s, p) in enumerate(segments):
        reads, keeps = [], []
        for j, (source, at_reads) in enumerate(sorted(carried[i].items())):
            if (i, source) in plain:
                continue
            inits = []
            for q, arg in at_reads:
                step0, step1 = calls[s + q], calls[s + p + q]
                made = step0.reads.get(arg)
                value = step0.leaves[arg] if step0.spec == step1.spec else None
                if not isinstance(value, torch.Tensor) or (made is not None and where.get(made[0], (None,))[0] == i):
                    raise RNNXError(f"streaming: expected the loop over the frames to start each value it carries from one made before it, found "
                                    f"its first step's {what(step0.key)}{at_line(step0.key)} reading other values than later steps (a state started "
                                    "as None, or made by the first step); start it from zeros made before the loop, or export without streaming")
                inits.append(value)
            init = inits[0]
            if any(v is not init and (v.shape != init.shape or not torch.equal(v, init)) for v in inits[1:]):
                raise RNNXError(f"streaming: expected the loop over the frames to start each value it carries from one value, found "
                                f"{what(calls[s + at_reads[0][0]].key)}{at_line(calls[s + at_reads[0][0]].key)} starting from another than the rest of its "
                                "first step; start the value from one tensor, or export without streaming")
            reader = calls[s + p + at_reads[0][0]]
            if any(init is v for v in values):
                raise RNNXError(f"streaming: expected the loop over the frames to start from values the model makes, found it starting from an "
                                f"input{at_line(reader.key)}: the model already streams; export it without streaming (--streaming / streaming=True) and "
                                "check it chunk by chunk with rnnx verify FILE --against CODE --chunks N,N --state IN=OUT")
            var = next((n for q, arg in at_reads for n in [calls[s + p + q].names.get(id(calls[s + p + q].leaves[arg]))] if n), f"loop{i}.state{j}")
            name = _free(f"{reader.owner}.{var}" if reader.owner else var, f"loop{i}", used)
            source_key = keys[s + source[0]][0]
            recurrence = source_key.startswith("module ") and source_key[7:] in stepped
            batch = 1 if recurrence and init.dim() == 3 else 0 if init.dim() >= 2 else None  # a frame's values have the batch first
            state = LoopState(name, tuple(init.shape), init.dtype, bool(init.ne(0).any()), batch)
            states.append(state)
            reads += [(q, arg, name, state.computed) for q, arg in at_reads]
            keeps.append((source[0], source[1], name))
        loops.append(Loop(tuple(keys[at:s]), tuple(keys[s:s + p]), tuple(reads), tuple(keeps)))
        at = s + p * frames
    return LoopPlan(tuple(loops), tuple(states), covered=frozenset(covered))


def _free(name: str, loop: str, used: set[str]) -> str:
    """``name``, or under its loop's name where another state or a module has it."""
    for candidate in (name, f"{loop}.{name}", *(f"{loop}.{name}{k}" for k in range(2, 100))):
        if candidate not in used:
            used.add(candidate)
            return candidate
    raise RuntimeError(f"streaming: no free name for the loop state {name}")  # a bug in rnnx: exit 3


# --- what cannot stream -----------------------------------------------------------------------------


def _refuse_non_causal(model: Any, values: list[Any], structure: Any, first: Record, segments: list[tuple[int, int]], frames: int,
                       plan: LoopPlan) -> None:
    """Run the model twice at 2T frames, on inputs that differ only after frame T, and refuse
    the loop whose steps before T move: naming the first step call that moves, or, where it
    reads a value from outside the loop that moved, the call that value comes from (a mean
    over the frames, an encoder's final state), and the line of code of each."""
    import torch

    assert plan.time is not None
    index, axis = plan.time
    truth = TorchTruth(model, [])  # no note here: stream_context.study, run after, notes a model with no float64 copy that runs
    runs = truth.float64(lambda model64: [run_calls(model64, doubled(as_float64(values), index, axis, t), structure, save=True) for t in ("flip", "noise")])
    if runs is None or None in runs:  # a model that makes tensors of its own dtype (zeros for h) may not run in float64
        runs = [run_calls(model, doubled(values, index, axis, t), structure, save=True) for t in ("flip", "noise")]
    a, b = runs
    place: list[tuple[int | None, int | None, int, int]] = []  # per call at 2T: (the same call at T, or its loop, step and place in the step)
    at = 0
    for i, (s, p) in enumerate(segments):
        place += [(j, None, -1, 0) for j in range(at, s)]
        place += [(None, i, k, q) for k in range(2 * frames) for q in range(p)]
        at = s + p * frames
    place += [(j, None, -1, 0) for j in range(at, len(first.calls))]
    if a is None or b is None or a.keys != b.keys or len(place) != len(a.calls):
        return  # the causality probe says what it can

    @functools.cache
    def moved(n: int) -> bool:
        """Whether call n's output, where it stands for frames before T, differs between the runs."""
        j, loop, step, _ = place[n]
        if loop is not None and step >= frames:
            return False  # a step of the later frames
        ref = first.calls[j].outs if j is not None else []
        for m, (va, vb) in enumerate(zip(a.calls[n].saved, b.calls[n].saved)):
            if va is None or vb is None or va.shape != vb.shape:
                continue
            t = ref[m] if m < len(ref) and isinstance(ref[m], torch.Tensor) else None
            along = time_axis(t, va) if t is not None else None
            keep = min(t.shape[along], va.shape[along] - t.shape[along]) if t is not None and along is not None else None
            if keep is None and not same(va, vb) or keep and not same(va.narrow(along, 0, keep), vb.narrow(along, 0, keep)):
                return True
        return False

    culprit = next((n for n, (_, loop, step, _) in enumerate(place) if loop is not None and step < frames and moved(n)), None)
    if culprit is None:
        return
    _, loop, step, q = place[culprit]
    assert loop is not None
    call = a.calls[culprit]
    outside = [(arg, j) for arg, (j, _) in sorted(call.reads.items()) if place[j][1:3] != (loop, step) and moved(j)]
    if not outside:
        raise RNNXError(f"streaming: expected each step of the loop over the frames to read only the frames up to its own, found its "
                        f"{what(call.key)}{at_line(call.key)} changing at step t with frames after t (it reads a later frame, or the whole sequence, "
                        "which a chunk does not have); make the step read frame t and the values before it, or export without streaming")
    arg, origin = outside[0]
    while True:  # back to the call whose inputs hold still and whose output moves
        earlier = next((j for j, _ in sorted(a.calls[origin].reads.values()) if moved(j)), None)
        if earlier is None:
            break
        origin = earlier
    state = next((name for r, p, name, _ in plan.loops[loop].reads if step == 0 and (r, p) == (q, arg)), None)
    how = f"starting {state} from" if state else "reading"
    raise RNNXError(f"streaming: expected the loop over the frames to read only values of the frames up to its step, found its {what(call.key)}"
                    f"{at_line(call.key)} {how} a value that changes with frames after t: {what(a.calls[origin].key)}{at_line(a.calls[origin].key)}, a value of "
                    "the whole sequence, which a chunk does not have before the sequence ends; compute it from the frames so far, or export "
                    "without streaming")


# --- the streaming forward's side -----------------------------------------------------------------


class _Walk:
    """The model's calls counted against the loops the probe found: where a loop's first step
    reads an initial value it reads the state input, and each step's carried values are kept in
    ``sink`` (the last step's stay: the state outputs)."""

    def __init__(self, loops: Sequence[Loop], given: Mapping[str, Any], first: Any, sink: dict[str, Any]) -> None:
        self.loops, self.given, self.first, self.sink = loops, given, first, sink
        self.loop = self.at = self.step = 0
        self.inside = False
        self.reads = [{q: [(p, n, c) for r, p, n, c in loop.reads if r == q] for q, *_ in loop.reads} for loop in loops]
        self.keeps = [{q: [(o, n) for r, o, n in loop.keeps if r == q] for q, *_ in loop.keeps} for loop in loops]

    def _expect(self, key: Key, expected: Key) -> None:
        if key != expected:
            raise RNNXError(f"streaming: expected the model to make the calls around its loop over the frames that it made on the example, "
                            f"found {what(key)}{at_line(key)} where {what(expected)}{at_line(expected)} ran; a forward whose calls change "
                            "with the length or the values cannot have its loop carried: export without streaming")

    def _advance(self, key: Key) -> tuple[int, int, int] | None:
        """(loop, step, call in the step) of this call; None outside the loops."""
        while self.loop < len(self.loops):
            loop = self.loops[self.loop]
            if not self.inside:
                if self.at < len(loop.before):
                    self._expect(key, loop.before[self.at])
                    self.at += 1
                    return None
                self.inside, self.at, self.step = True, 0, 0
            if self.at == 0 and self.step > 0 and key != loop.body[0]:
                self.loop, self.inside = self.loop + 1, False  # the loop has ended: the calls after it
                continue
            self._expect(key, loop.body[self.at])
            where = (self.loop, self.step, self.at)
            self.at += 1
            if self.at == len(loop.body):
                self.at, self.step = 0, self.step + 1
            return where
        return None

    def before(self, key: Key, owner: str, frame: Any, packed: Any) -> tuple[Any, Any]:
        import torch
        from torch.utils._pytree import tree_flatten, tree_unflatten

        where = self._advance(key)
        if where is None:
            return packed, None
        loop, step, q = where
        reads = self.reads[loop].get(q) if step == 0 else None
        if reads:
            leaves, spec = tree_flatten(packed)
            for p, name, computed in reads:  # the model's own initial value on a stream's first chunk, the carried one after
                leaves[p] = torch.where(self.first, leaves[p], self.given[name]) if computed and self.first is not None else self.given[name]
            packed = tree_unflatten(leaves, spec)
        return packed, (loop, q) if q in self.keeps[loop] else None

    def after(self, token: Any, out: Any) -> None:
        from torch.utils._pytree import tree_flatten

        loop, q = token
        leaves = tree_flatten(out)[0]
        for o, name in self.keeps[loop][q]:
            self.sink[name] = leaves[o]


def loop_carry(model: Any, loops: Sequence[Loop], given: Mapping[str, Any], first: Any, sink: dict[str, Any]) -> Any:
    """A context for the streaming forward of ``model``: its loops start from the state inputs
    ``given`` (by state name; ``first``, the first-chunk flag, where a state is computed) and
    leave their last step's values in ``sink``. Enter it after any other TorchFunctionMode, so
    that it sees the model's calls first."""
    return watching(model, _Walk(loops, given, first, sink))
