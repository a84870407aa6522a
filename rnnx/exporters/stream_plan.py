"""The plan of a streaming export: which states the streaming model takes and returns, the
``rnnx.streaming`` record written from the translated graph, and the chunked check.

:mod:`rnnx.exporters.streaming` makes the plan (running the model, with
:mod:`rnnx.exporters.stream_context`'s study of its time axis and caches) and the streaming
model it describes; this module annotates the written file and proves it chunk by chunk: the
file run in ONNX Runtime chunk after chunk, each chunk's state outputs fed to the next, against
the torch model on the whole sequence. Where the whole matches and the chunks do not, the
operation where they part is named (:mod:`rnnx.engines.chunk_divergence`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import progress
from rnnx.check import Case
from rnnx.check.truths import TorchTruth, as_float64
from rnnx.engines.chunk_divergence import first_divergence
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters import shapes
from rnnx.exporters.selfcheck import SelfCheck, compare_output, example_sizes, fresh_inputs, run_eager
from rnnx.exporters.stream_context import ConvCache
from rnnx.exporters.stream_loops import Loop, LoopState
from rnnx.exporters.stream_running import RunningState
from rnnx.exporters.stream_source import at, raised_at
from rnnx.exporters.user_code import tensors
from rnnx.formats.onnx_metadata import read_metadata, set_metadata
from rnnx.shapes.roles import BATCH, LENGTH
from rnnx.shapes.sizes import STREAM_BATCHES, STREAM_CHUNKS, STREAM_FRAMES
from rnnx.streaming import STREAMING_KEY, StatePair, StreamingRecord

# The chunked check: sequences of STREAM_FRAMES frames cut into chunks of each size (and run
# whole), at each batch size, all in units of the chunk multiple (the strides along time). 7 is
# odd and does not divide 19, so the last chunk is short (5).

# The plan of the streaming export under way, read by writing.write_checked (which records it
# in the file and runs its chunked check before the file is renamed into place).
STREAMING: ContextVar[StreamPlan | None] = ContextVar("rnnx_streaming", default=None)


@dataclass(frozen=True)
class _Slot:
    """One module's states as inputs and outputs: a recurrence's h (then c for an LSTM), or a
    convolution's cache (``conv`` set)."""

    module: str
    lstm: bool
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    conv: ConvCache | None = None
    cell: bool = False  # a cell stepped in Python: the state of its first step comes in, its last step's goes out
    running: RunningState | None = None  # a cumulative sum or a frame counter along time
    computed: bool = False  # its first chunk's states are the model's own (a learned h0, one computed from an input), not zeros
    loop: LoopState | None = None  # a value a Python loop over the frames hands from step to step


@dataclass
class StreamPlan:
    """What the streaming model takes and returns, and how the file is annotated and checked."""

    n_inputs: int  # positional inputs of the user's forward; the states follow them
    slots: list[_Slot]
    multiple: int = 1  # chunk lengths must be a multiple of this (the strides along time)
    output_axes: list[int | None] | None = None  # each model output's time axis, as the probe ran it
    record: StreamingRecord | None = None  # set by annotate, from the translated graph
    notes: list[str] = field(default_factory=list)
    first: str | None = None  # the boolean input true on a stream's first chunk, where a slot's states are computed
    loops: tuple[Loop, ...] = ()  # the Python loops over the frames the streaming forward walks, where one carries a value
    runs: ModelRuns | None = None  # the user's model on its example, resized: what the record's dims are asked of

    @property
    def state_inputs(self) -> list[str]:
        return [n for s in self.slots for n in s.inputs]

    @property
    def state_outputs(self) -> list[str]:
        return [n for s in self.slots for n in s.outputs]

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        token = STREAMING.set(self)
        try:
            yield
        finally:
            STREAMING.reset(token)

    def annotate(self, proto: Any, report: Any = None) -> None:
        """Write the ``rnnx.streaming`` record (see :mod:`rnnx.streaming`) from the graph's
        named dimensions; refuse a graph with no single dynamic time axis to cut."""
        import onnx

        export, _ = read_metadata(proto)
        if export is None:
            raise RuntimeError("streaming: the graph has no rnnx.export record to read its axes from")  # a bug in rnnx: exit 3
        roles: dict[str, str] = export.get("roles") or {}
        in_dims: dict[str, list[Any]] = export.get("inputs") or {}
        out_dims: dict[str, list[Any]] = export.get("outputs") or {}
        states_in, states_out = {*self.state_inputs, *([self.first] if self.first else [])}, set(self.state_outputs)
        for slot in self.slots:  # a loop's state has the batch where a frame's values have it: a label no nn module reached is that batch
            at = slot.loop.batch_axis if slot.loop is not None else None
            label = in_dims.get(slot.inputs[0], [])[at] if at is not None and len(in_dims.get(slot.inputs[0], [])) > at else None
            if isinstance(label, str) and roles.get(label) != LENGTH:
                roles = {**roles, label: BATCH}
        times = sorted({d for name, dims in in_dims.items() if name not in states_in for d in dims if isinstance(d, str) and roles.get(d) == LENGTH})
        if len(times) != 1:
            found = "none (the time axis is static)" if not times else f"{len(times)} independent ones ({', '.join(times)})"
            cells = [s.module for s in self.slots if s.cell]
            if not times and (cells or self.loops):  # the trace unrolled a Python loop at the example's length, and it stayed so
                stepping = f" stepping {cells[0]}" if cells else ""
                raise RNNXError(f"streaming: expected one dynamic time axis in the inputs to cut into chunks, found none: the Python loop over "
                                f"the frames{stepping} was traced at the example's length and stays unrolled there ({_unrolled(report)}); "
                                "make its steps one computation and its length dynamic, use nn.LSTM/GRU/RNN, or export without streaming")
            raise RNNXError(f"streaming: expected one dynamic time axis in the inputs to cut into chunks, found {found}; "
                            "make the frames axis dynamic (dynamic={'x': {1: 'frames'}} / --dynamic x:1=frames) or export without streaming")
        time = times[0]

        def axis(dims: list[Any], role: str) -> int | None:
            return next((d for d, v in enumerate(dims) if isinstance(v, str) and (_reads(v, time) if role == LENGTH else roles.get(v) == role)), None)

        def named(dims: list[Any]) -> list[Any]:  # the batch is "batch" in the record, whatever the graph calls it (x_dim0)
            return [BATCH_LABEL if isinstance(d, str) and roles.get(d) == BATCH else d for d in dims]

        elem = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input}
        pairs = []
        for slot in self.slots:
            for name_in, name_out in zip(slot.inputs, slot.outputs):
                dims = in_dims[name_in]
                pairs.append(StatePair(slot.module, name_in, name_out, tuple(named(dims)), axis(dims, BATCH),
                                       str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem[name_in]))), "computed" if slot.computed else "zeros"))
        inputs = {name: {"dims": named(dims), "time_axis": axis(dims, LENGTH), "batch_axis": axis(dims, BATCH)}
                  for name, dims in in_dims.items() if name not in states_in}
        outputs = {name: {"dims": named(dims), "time_axis": axis(dims, LENGTH)} for name, dims in out_dims.items() if name not in states_out}
        for k, info in enumerate(outputs.values()):  # frames a graph left unnamed (TorchScript's Add178_dim_0): where the probe saw them
            if info["time_axis"] is None and self.output_axes is not None and k < len(self.output_axes):
                info["time_axis"] = self.output_axes[k]
        if self.runs is not None:
            example = {name: list(v) for name, v in (export.get("example") or {}).items()}
            self.runs.name_output_dims(time, list(outputs.values()), {n: d for n, d in in_dims.items() if n not in states_in}, roles, example)
        self.record = StreamingRecord(time, tuple(pairs), inputs, outputs, self.multiple, self.first)
        set_metadata(proto, {STREAMING_KEY: self.record.to_json()})
        if report is not None:
            report.notes.append("streaming: states carried chunk to chunk, zeros first: "
                                + ", ".join(f"{p.input} -> {p.output}" for p in pairs) + f"; time axis {time}")
            if self.first:
                report.notes.append(f"streaming: the file computes the initial states of {', '.join(p.input for p in pairs if p.initial == 'computed')} "
                                    f"as the model does where {self.first} is true (feed it true with a stream's first chunk, false after)")
            report.notes += self.notes

    def check(self, check: SelfCheck, path: Path, model: Any, leaves: Sequence[shapes.Leaf], structure: Any, naming: Any, seed: int = 0) -> None:
        """Run the file at ``path`` in ONNX Runtime chunk by chunk (chunks of
        :data:`~rnnx.shapes.sizes.STREAM_CHUNKS` frames, batches :data:`~rnnx.shapes.sizes.STREAM_BATCHES`), each chunk's state outputs fed to the next, and hold
        the joined outputs to the torch model run on the whole sequence from zero states, by
        the self-check's rule (calibrated against the model's float64 copy). Each run is a case
        of ``check``, so a failure fails the export and names the chunk size and batch."""
        import torch

        from rnnx.engines.onnxruntime import OnnxRuntimeRunner

        record = self.record
        if record is None:
            return
        runner = OnnxRuntimeRunner(path)
        truth = TorchTruth(model, check.notes)  # the float64 copy, dropped with a note (once) where it cannot be made or run
        base = example_sizes(naming, leaves)
        batches = [label for label in base if naming.roles.get(label) == BATCH]
        states = {s.input for s in record.states}
        frames = STREAM_FRAMES * record.multiple
        failed: tuple[list[Any], int] | None = None  # the first chunked case that failed: its inputs and chunk
        for k, batch in enumerate(STREAM_BATCHES if batches else (None,)):
            sizes = {**base, record.time: frames, **(dict.fromkeys(batches, batch) if batch is not None else {})}  # None: no batch label
            values = fresh_inputs(leaves, naming, sizes, seed + 1000 + k)
            values = [torch.zeros_like(v) if leaf.name in states else v for leaf, v in zip(leaves, values)]  # a stream starts at zeros
            values = [torch.tensor(True) if leaf.name == record.first else v for leaf, v in zip(leaves, values)]  # ...or the model's own states
            shown = {leaf.name: list(v.shape) for leaf, v in zip(leaves, values)
                     if isinstance(v, torch.Tensor) and leaf.name not in states and leaf.name != record.first}
            want: list[Any] | None = None
            want64: list[Any] | None = None
            try:
                want = tensors(run_eager(model, values, structure))
                want64 = truth.float64(lambda m: tensors(run_eager(m, as_float64(values), structure)))
            except Exception as exc:  # noqa: BLE001  the user's model may raise anything; a model that cannot run whole cannot be proven
                if want is None:
                    error = f"the torch model raised {one_line(exc, CAUSE_CHARS, typed=True)} on the whole sequence"
                    for chunk in STREAM_CHUNKS:
                        check.cases.append(Case(_case_name(chunk * record.multiple, frames, batch), sizes, shown, error=error))
                    continue
            for chunk in (c * record.multiple for c in STREAM_CHUNKS):
                progress.step(f"checking streaming in chunks of {chunk}" + (f" at batch {batch}" if batch else ""))
                case = Case(_case_name(chunk, frames, batch), sizes, shown)
                check.cases.append(case)
                self._run_chunks(case, check, runner, leaves, values, chunk, frames, want, want64)
                if failed is None and not case.passed and chunk < frames:
                    failed = (values, chunk)
        streamed = [c for c in check.cases if c.name.startswith("streamed")]
        whole_ok = all(c.passed for c in check.cases if c not in streamed or "whole" in c.name)
        if whole_ok and failed is not None:
            values, chunk = failed
            check.hint = ("the whole sequence matches but chunks do not: the model keeps context along time that rnnx does not carry; "
                          "rnnx carries recurrent states, nn.Conv1d/Conv2d caches, the zeros an F.pad puts before the frames, cumsum, "
                          "frame counters and the values a Python loop over the frames hands from step to step")
            where = self._divergence(path, leaves, values, chunk)
            check.hint += f"; {where}" if where else " (a functional convolution, a loop over frames, a state kept in an attribute)"

    def _divergence(self, path: Path, leaves: Sequence[shapes.Leaf], values: list[Any], chunk: int) -> str | None:
        """The operation of the file at ``path`` where its chunks first part from its whole run."""
        import onnx
        import torch

        from rnnx.engines.onnxruntime import OnnxRuntimeRunner

        record = self.record
        assert record is not None
        if record.first is not None:  # the walk feeds every chunk alike, so each would recompute the initial states: no true answer
            return None
        feed = {leaf.name: v.numpy() for leaf, v in zip(leaves, values) if isinstance(v, torch.Tensor)}
        axes = {name: info.get("time_axis") for name, info in record.inputs.items() if name in feed}
        pairs = [(s.input, s.output) for s in record.states]
        return first_divergence(onnx.load(str(path)), feed, axes, pairs, chunk, OnnxRuntimeRunner)

    def _run_chunks(self, case: Case, check: SelfCheck, runner: Any, leaves: Sequence[shapes.Leaf], values: list[Any], chunk: int,
                    frames: int, want: list[Any], want64: list[Any] | None) -> None:
        import torch

        record = self.record
        assert record is not None
        states = {s.input for s in record.states}
        feed = {leaf.name: v.numpy() for leaf, v in zip(leaves, values) if isinstance(v, torch.Tensor)}
        axes = {name: record.inputs.get(name, {}).get("time_axis") for name in feed if name not in states}
        # Frames are joined along the time axis; a state, or an output that holds no frames,
        # is compared as it stands after the last chunk.
        out_axes = {name: record.outputs.get(name, {}).get("time_axis") for name in runner.output_names}
        got, case.error = run_in_chunks(runner, feed, axes, out_axes, frames, chunk, lambda out: _carried(out, record), record.first)
        if not case.error and len(runner.output_names) != len(want):
            case.error = f"the ONNX model has {len(runner.output_names)} outputs, the torch model returned {len(want)} tensors"
        for i, name in enumerate(runner.output_names if not case.error else ()):
            case.rows.append(compare_output(name, got[name], want[i], check, want64[i] if want64 is not None and len(want64) == len(want) else None))


GUESS = -1  # an output's time axis read from the chunks' sizes (its dims are not named)


def run_in_chunks(runner: Any, feed: Mapping[str, np.ndarray], time_axes: Mapping[str, int | None], out_axes: Mapping[str, int | None],
                  frames: int, chunk: int, carry: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
                  first: str | None = None) -> tuple[dict[str, np.ndarray], str]:
    """A streaming file's ``runner`` over ``frames`` frames of ``feed`` in chunks of ``chunk``,
    each input cut along its axis in ``time_axes`` (None or absent: fed whole), the states in
    ``feed`` fed to the first chunk and ``carry(outputs)`` to each next, ``first`` (the record's
    first-chunk input) true with the first chunk only. Returns the outputs joined along
    ``out_axes`` (None or absent: as after the last chunk; :data:`GUESS`: the first cut input's
    axis, where every chunk's output holds that chunk's frames) and an error, or "" where every
    chunk ran (the self-check's and ``rnnx verify --chunks``' one chunk loop)."""
    carried: dict[str, np.ndarray] = {}
    pieces: dict[str, list[np.ndarray]] = {}
    for start in range(0, frames, chunk):
        stop = min(start + chunk, frames)
        step = {n: v if time_axes.get(n) is None else np.take(v, np.arange(start, stop), axis=time_axes[n]) for n, v in feed.items()}
        step.update(carried)
        if first is not None:
            step[first] = np.array(start == 0)
        try:
            out = runner(step)
            carried = carry(out)
        except RNNXError as exc:
            return {}, f"frames {start}..{stop}: {one_line(exc, CAUSE_CHARS)}"
        for name, value in out.items():
            pieces.setdefault(name, []).append(np.asarray(value))
    lead = next((a for a in time_axes.values() if a is not None), None)
    sizes = [min(chunk, frames - start) for start in range(0, frames, chunk)]
    got = {}
    for name, parts in pieces.items():
        axis = out_axes.get(name)
        if axis == GUESS:
            axis = lead if lead is not None and all(p.ndim > lead and p.shape[lead] == n for p, n in zip(parts, sizes)) else None
        got[name] = parts[-1] if axis is None else np.concatenate(parts, axis=axis)
    return got, ""


BATCH_LABEL = "batch"  # the record's name for the batch axis, which a runtime replaces by its batch size


@dataclass
class ModelRuns:
    """The user's model run on its example with some input axes resized (frames repeated),
    as :meth:`StreamPlan.annotate` asks it: how each output's dims follow the chunk's frames and
    the batch, where the graph leaves them unnamed (a Loop's stacked output: no label at all),
    and whether the model runs with the time axis the file cuts grown alone."""

    model: Any
    values: list[Any]  # the flattened example
    structure: Any
    index: dict[str, int]  # graph input name -> its place in ``values``

    def shapes(self, sizes: Mapping[str, Mapping[int, int]]) -> list[tuple[int, ...]]:
        """The model's output tensors' shapes with ``sizes`` (input -> axis -> size); raises what the model raises."""
        import torch

        values = list(self.values)
        for name, axes in sizes.items():
            v = values[self.index[name]]
            for a, size in axes.items():
                v = torch.cat([v] * (size // v.shape[a] + 1), dim=a).narrow(a, 0, size)
            values[self.index[name]] = v
        with torch.no_grad():
            out = run_eager(self.model, values, self.structure)
        return [tuple(t.shape) for t in tensors(out)]

    def name_output_dims(self, time: str, outputs: list[dict[str, Any]], in_dims: Mapping[str, list[Any]], roles: Mapping[str, str],
                         example: Mapping[str, list[int]]) -> None:
        """Rewrite each output's record dims the graph leaves unnamed or named after a node
        (``0``, ``Add188_dim_0``): the time axis as the chunk's label or an expression of it
        (``seq // 4``), the batch as ``"batch"``, as the model's outputs grow with each; null
        where neither (a size the model does not say). Refuses a file whose time axis the model
        does not take grown alone: the inputs the model steps through together that the file
        gives different lengths (a loop over one input's frames slicing another's)."""
        timed = {n: {a: 2 * example[n][a] for a, d in enumerate(dims) if d == time} for n, dims in in_dims.items() if n in example and n in self.index}
        timed = {n: axes for n, axes in timed.items() if axes}
        batched = {n: {a: example[n][a] + 2 for a, d in enumerate(dims) if isinstance(d, str) and roles.get(d) == BATCH}
                   for n, dims in in_dims.items() if n in example and n in self.index}
        batched = {n: axes for n, axes in batched.items() if axes}
        if not timed:
            return
        first = next(iter(timed))
        t1 = example[first][next(iter(timed[first]))]
        try:
            base = self.shapes({})
        except Exception:  # noqa: BLE001  the model ran on its example in the probe; a model that does not now says nothing new
            return
        try:
            longer = self.shapes(timed)
        except Exception as exc:  # noqa: BLE001  the user's model may raise anything: here, that the file cuts the wrong inputs
            cut = ", ".join(f"{n} dim {a}" for n, axes in timed.items() for a in axes)
            # an input of as many frames on an axis the file does not cut: what the model steps through with them
            held = ", ".join(f"{n} dim {a} ({'static' if isinstance(d, int) else d})" for n, dims in in_dims.items() if n in self.index and n in example and n not in timed
                             for a, d in enumerate(dims) if a < len(example[n]) and example[n][a] == t1 and not (isinstance(d, str) and roles.get(d) == BATCH))
            raise RNNXError(f"streaming: expected the model to run with only the inputs the file cuts into chunks lengthened ({cut}, labelled {time}), "
                            f"found it raised {one_line(exc, CAUSE_CHARS, typed=True)}{at(raised_at(exc))}"
                            + (f": it steps through {held} with them, which the file gives a length of its own" if held else "")
                            + "; feed the frames in one input (the others as its channels), or export without streaming") from None
        try:
            wider = self.shapes(batched) if batched else None
        except Exception:  # noqa: BLE001  a batch the model does not take: the graph's names stand
            wider = None
        b1, b2 = next(((example[n][a], size) for n, axes in batched.items() for a, size in axes.items()), (None, None))
        for k, info in enumerate(outputs):
            if k >= len(base) or k >= len(longer) or len(base[k]) != len(info["dims"]):
                continue
            dims = list(info["dims"])
            for d, dim in enumerate(dims):
                if isinstance(dim, str) and (dim == BATCH_LABEL or _reads(dim, time)):
                    continue
                if d == info["time_axis"]:  # a static size here is the example's frames, traced (torch.onnx's, freed once checked)
                    dims[d] = _frames(time, t1, base[k][d], longer[k][d]) or (dim if isinstance(dim, int) and dim > 0 else None)
                    continue
                if isinstance(dim, int) and dim > 0:
                    continue  # a size the graph fixes
                elif wider is not None and k < len(wider) and (base[k][d], wider[k][d]) == (b1, b2) and longer[k][d] == b1:
                    dims[d] = BATCH_LABEL
                elif not isinstance(dim, str):
                    dims[d] = None
            info["dims"] = dims


def _frames(time: str, frames: int, before: int, after: int) -> str | None:
    """An output's frames as an expression of the chunk's label: ``seq``, ``seq // 4``,
    ``seq * 2``, from its sizes at ``frames`` and twice as many; None where they are not in
    proportion (no chunk gives its frames)."""
    rate = Fraction(after - before, frames)
    if rate <= 0 or rate * frames != before:
        return None
    if rate == 1:
        return time
    if rate.numerator == 1:
        return f"{time} // {rate.denominator}"
    return f"{time} * {rate.numerator}" if rate.denominator == 1 else f"{time} * {rate.numerator} // {rate.denominator}"


def _reads(dim: str, label: str) -> bool:
    """Whether a dimension is the time label or computed from it (``(frames + 4)//4 - 1`` after
    strides): the outputs' frames, joined chunk after chunk."""
    return re.search(rf"(?<![\w.]){re.escape(label)}(?![\w.])", dim) is not None


def _unrolled(report: Any) -> str:
    """Why the trace's loop over the frames stayed one node per step, as the export's notes
    say it (the re-roll's and the step fuser's reasons)."""
    reasons = [note.split(marker, 1)[1].removesuffix(")") for note in getattr(report, "notes", None) or []
               for marker in ("is not re-rolled (", "fixed at the example's (") if marker in note]
    return "; ".join(dict.fromkeys(reasons)) or "rnnx found no loop to make one node or Loop"


def _case_name(chunk: int, frames: int, batch: int | None) -> str:
    what = "whole, as one chunk" if chunk >= frames else f"in chunks of {chunk} frame{'s' if chunk > 1 else ''}"
    return f"streamed {what}" + (f", batch {batch}" if batch is not None else "")


def _carried(out: Mapping[str, np.ndarray], record: StreamingRecord) -> dict[str, np.ndarray]:
    """The next chunk's state inputs: this chunk's state outputs (one function, so that a test
    can plant a stream that drops its states and see the check fail)."""
    return {s.input: out[s.output] for s in record.states}
