"""``rnnx verify FILE --against code.py:NAME --chunks 1,7,32``: a streaming file run chunk by chunk.

The file takes its recurrent states as graph inputs and returns them as graph outputs (one
``rnnx export --streaming`` wrote, or one made by hand). It is run in ONNX Runtime chunk by
chunk, each chunk's state outputs fed to the next chunk's state inputs (zeros for the first;
where the record names a first-chunk input, it is fed true with the first chunk, false after,
and the file computes the states its record calls computed),
at batch 1 and a larger batch; the outputs joined along the time axis are held against the
torch model run once on the whole sequence (it takes only the non-state inputs and starts from
zeros), under the calibrated rule (:func:`rnnx.tolerance.compare_calibrated`: the torch model's
float64 copy is the reference, its float32 run the honest one).

States are paired by the file's ``rnnx.streaming`` record (:mod:`rnnx.streaming`); else by
their names (``X_in``/``X_out``, ``*.h_in``/``*.h_out``; an input ``state`` with an output
``stateN``, ``state_out`` or ``new_state``); ``--state IN=OUT`` (repeatable) pairs them
explicitly and wins over both. The time axis is the record's, else the input dimension named
like a length (as :mod:`rnnx.shapes.file_dims` reads roles). An output holding the time label is
joined along it; an output that holds no frames (a final state) is compared as it stands after
the last chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.check import Row, Rule, Verdict, judge
from rnnx.check.runners import Subject, close, make, running
from rnnx.check.truths import TorchTruth
from rnnx.engines.chunk_divergence import first_divergence
from rnnx.errors import RNNXError
from rnnx.exporters.call_record import read_call
from rnnx.exporters.stream_plan import GUESS, run_in_chunks
from rnnx.formats.onnx_lazy import for_runtime
from rnnx.formats.onnx_read import value_dims
from rnnx.shapes.file_dims import read_file_dims
from rnnx.shapes.roles import BATCH, LENGTH
from rnnx.shapes.sizes import STREAM_BATCHES, VERIFY_CHUNKS, multiple_of
from rnnx.streaming import graph_ranks, read_streaming
from rnnx.tolerance import Tolerances
from rnnx.verify.cases import plan_cases
from rnnx.verify.feeds import make_feed

MIN_FRAMES = 19  # the sequence is at least this long, and longer than the largest chunk so that it is cut


@dataclass(frozen=True)
class Pair:
    input: str
    output: str


#: A row's fields in the JSON report (rnnx/cli/schema/verify.json): its labels, the verdict, why it did
#: not run (a chunk ONNX Runtime refused), and its statistics (null where it did not run).
ROW_FIELDS = ("frames", "batch", "chunk", "output", "passed", "error", "stats")


@dataclass
class ChunkedReport(Verdict):
    model: str
    against: str
    time: str
    pairs: list[Pair]
    paired_by: str
    chunks: list[int]
    rows: list[Row] = field(default_factory=list)  # labelled frames, batch, chunk and output
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "against": self.against, "check": "chunked", "time": self.time, "paired_by": self.paired_by,
                "states": [{"input": p.input, "output": p.output} for p in self.pairs], "chunks": self.chunks,
                "passed": self.passed, "rows": [r.to_json(ROW_FIELDS) for r in self.rows], "notes": self.notes}

    def __str__(self) -> str:
        lines = [f"{self.model}, chunk by chunk, against {self.against} on the whole sequence",
                 f"time axis {self.time}; states ({self.paired_by}): " + ", ".join(f"{p.input} -> {p.output}" for p in self.pairs), ""]
        lines.append(f"{'chunk':>6}  {'frames':>6}  {'batch':>5}  {'output':<20} {'max abs':>10}  {'x floor':>8}  result")
        for chunk in self.chunks:
            for r in (r for r in self.rows if r.chunk == chunk):
                batch = "-" if r.batch is None else str(r.batch)
                if r.error:
                    lines.append(f"{chunk:>6}  {r.frames:>6}  {batch:>5}  {r.output:<20} {'':>10}  {'':>8}  FAIL: {r.error}")
                    continue
                assert r.stats is not None
                ratio = "" if r.stats.ratio is None else f"{r.stats.ratio:.3g}"
                lines.append(f"{chunk:>6}  {r.frames:>6}  {batch:>5}  {r.output:<20} {r.stats.max_abs:>10.3e}  {ratio:>8}  "
                             f"{'ok' if r.stats.passed else 'FAIL'} ({r.stats.rule})" + (f"; {r.stats.note}" if r.stats.note else ""))
        lines += [f"note: {n}" for n in self.notes]
        lines.append("")
        by_chunk = {c: all(r.passed for r in self.rows if r.chunk == c) for c in self.chunks}
        lines.append("per chunk size: " + ", ".join(f"{c}: {'PASS' if ok else 'FAIL'}" for c, ok in by_chunk.items()))
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)


# --- pairing the states -----------------------------------------------------------------------


def parse_state(text: str) -> tuple[str, str]:
    """``--state IN=OUT``."""
    name_in, sep, name_out = text.partition("=")
    if not sep or not name_in.strip() or not name_out.strip():
        raise RNNXError(f"--state {text!r}: expected IN=OUT, a state input and the output that carries it to the next chunk (e.g. h0=hn)")
    return name_in.strip(), name_out.strip()


def _by_name(inputs: list[str], outputs: list[str]) -> list[Pair]:
    """Pairs read from names: ``X_in``/``X_out`` (``*.h_in``/``*.h_out``); ``state`` with ``stateN``,
    ``state_out`` or ``new_state``."""
    pairs = []
    taken: set[str] = set()
    for name in inputs:
        candidates = []
        if name.endswith("_in"):
            candidates.append(name[:-3] + "_out")
        candidates += [name + "N", name + "_out", "new_" + name]
        found = next((c for c in candidates if c in outputs and c not in taken), None)
        if found is not None:
            taken.add(found)
            pairs.append(Pair(name, found))
    return pairs


def pair_states(proto: Any, given: list[tuple[str, str]] | None, record: Any) -> tuple[list[Pair], str]:
    """The state pairs and what paired them (see the module docstring)."""
    inits = {i.name for i in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in inits]
    outputs = [o.name for o in proto.graph.output]
    if given:
        pairs = []
        for name_in, name_out in given:
            if name_in not in inputs:
                raise RNNXError(f"--state {name_in}={name_out}: expected a graph input named {name_in!r}, found inputs {', '.join(inputs)}; "
                                "name the input the state is fed through")
            if name_out not in outputs:
                raise RNNXError(f"--state {name_in}={name_out}: expected a graph output named {name_out!r}, found outputs {', '.join(outputs)}; "
                                "name the output that returns the new state")
            pairs.append(Pair(name_in, name_out))
        for what, names in (("input", [p.input for p in pairs]), ("output", [p.output for p in pairs])):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise RNNXError(f"--state: expected each state {what} once, found {twice[0]!r} in several pairings; pair each state once")
        return pairs, "--state"
    if record is not None:
        pairs = [Pair(s.input, s.output) for s in record.states]
        missing = [n for p in pairs for n in (p.input, p.output) if n not in inputs + outputs]
        if missing:
            raise RNNXError(f"rnnx.streaming: expected the states it pairs to be graph inputs and outputs, found no {missing[0]!r}; "
                            "re-export with streaming=True or pair them with --state IN=OUT")
        if pairs:
            return pairs, "the file's rnnx.streaming record"
    pairs = _by_name(inputs, outputs)
    if not pairs:
        raise RNNXError(f"--chunks: expected state inputs and outputs to carry from chunk to chunk, found none the file's metadata or names pair "
                        f"(inputs {', '.join(inputs)}; outputs {', '.join(outputs)}); pair them with --state IN=OUT, repeated "
                        "(e.g. --state h0=hn --state c0=cn)")
    return pairs, "their names"


# --- running ----------------------------------------------------------------------------------


def verify_chunked(model_path: Path, against: str, chunks: list[int] | None, checkpoint: Path | None = None, states: list[tuple[str, str]] | None = None,
                   seq_lens: list[int] | None = None, batches: list[int] | None = None, dims: dict[str, int] | None = None, seed: int = 0,
                   tolerances: Tolerances | None = None) -> ChunkedReport:
    """The streaming file at ``model_path`` run chunk by chunk, against the torch model ``against``."""
    from rnnx.verify.models import load_torch_model

    if chunks is not None:
        check_chunks(chunks)
    model_path = Path(model_path)
    proto, pairs, paired_by, record = _plan(model_path, states)  # refused before the torch model is loaded
    torch_model, example = load_torch_model(against, checkpoint)
    return verify_chunked_loaded(model_path, torch_model, example, str(against), chunks, states, seq_lens, batches, dims, seed, tolerances,
                                 planned=(proto, pairs, paired_by, record))


def check_chunks(chunks: list[int]) -> None:
    if not chunks:
        raise RNNXError("--chunks: expected chunk sizes in frames, like 1,7,32, found none")
    bad = [c for c in chunks if c < 1]
    if bad:
        raise RNNXError(f"--chunks: expected chunks of at least 1 frame, found a chunk of {bad[0]} frames; give sizes like 1,7,32")


def _plan(model_path: Path, states: list[tuple[str, str]] | None) -> tuple[Any, list[Pair], str, Any]:
    from rnnx.formats.onnx_read import load_model as load_onnx

    proto = load_onnx(model_path, lazy=True)
    record = read_streaming({p.key: p.value for p in proto.metadata_props}, *graph_ranks(proto))
    pairs, paired_by = pair_states(proto, states, record)
    return proto, pairs, paired_by, record


def verify_chunked_loaded(model_path: Path, torch_model: Any, example: Any, against: str, chunks: list[int] | None,
                          states: list[tuple[str, str]] | None = None, seq_lens: list[int] | None = None, batches: list[int] | None = None,
                          dims: dict[str, int] | None = None, seed: int = 0, tolerances: Tolerances | None = None,
                          planned: tuple[Any, list[Pair], str, Any] | None = None) -> ChunkedReport:
    import torch

    from rnnx.verify.calls import plan_call, torch_outputs

    model_path = Path(model_path)
    proto, pairs, paired_by, record = planned or _plan(model_path, states)
    multiple = record.multiple if record is not None else 1
    chunks = list(chunks) if chunks is not None else [c * multiple for c in VERIFY_CHUNKS]  # by default, in the strides' units
    check_chunks(chunks)
    if record is not None:
        for chunk in chunks:
            record.check_chunk(chunk, "--chunks")
    read = read_file_dims(proto)
    specs, roles = read.specs, read.roles
    state_in = {p.input for p in pairs}
    state_out = {p.output for p in pairs}
    first = record.first if record is not None else None  # true on a stream's first chunk: the file computes its initial states
    streamed = [s for s in specs if s.name not in state_in and s.name != first]
    if not streamed:
        raise RNNXError(f"{model_path}: expected an input other than the states (the frames to cut into chunks), found only {', '.join(state_in)}")
    time, time_axes = _time_axes(record, streamed, roles, model_path)
    roles[time] = LENGTH
    output_dims = {o.name: value_dims(o, unnamed=None) for o in proto.graph.output}
    graph_outputs = list(output_dims)
    plain_outputs = [o for o in graph_outputs if o not in state_out]
    out_axes: dict[str, int | None] = {}
    for name in graph_outputs:
        info = (record.outputs.get(name) if record is not None else None) or {}
        if "time_axis" in info:
            out_axes[name] = info["time_axis"]
        else:
            found = next((d for d, v in enumerate(output_dims[name]) if v == time), None)
            if found is None and name not in state_out and record is None:
                found = GUESS  # a hand-made file whose output's dims are unnamed: joined where its frames are, if they are
            out_axes[name] = None if name in state_out else found

    names = [s.name for s in streamed]
    recorded, _ = read_call(proto)
    # a model that already streams takes its states as parameters (forward(tokens, h, c)): it
    # is called on the whole sequence with them at zeros, where the stream starts
    everything = [s.name for s in specs]
    # (a --streaming file's call record is its wrapper's, which appends the states: not the forward's)
    takes_states = (record is None and recorded is not None and len(everything) > len(names)
                    and sorted(recorded.tensors()) == sorted(everything))
    called = everything if takes_states else names
    try:
        call = plan_call(proto, torch_model, example, called, against)
    except RNNXError as exc:
        if takes_states:
            raise
        try:
            call, called = plan_call(proto, torch_model, example, everything, against), everything
        except RNNXError:
            raise exc from None
    call.notes = [n for n in call.notes if "call record feeds graph inputs" not in n]  # a streaming record feeds the states too
    shapes = {**read.example, **{k: list(v.shape) for k, v in call.example_arrays.items()}}
    shortest = max(MIN_FRAMES, max(chunks) + max(chunks) // 2 + 1)
    frames_list = list(seq_lens or [multiple_of(shortest, multiple)])  # whole chunks of the strides' multiple
    for frames in frames_list:
        if frames % multiple:
            raise RNNXError(f"--seq-len: expected a multiple of {multiple} frames (the model's strides along time), found {frames}; give one")
    # A chunk no length exceeds runs each sequence whole: no state is ever carried, and a broken stream passed.
    uncarried = [c for c in chunks if all(f <= c for f in frames_list)]
    carry_note = ""
    if uncarried:
        frames_list.append(multiple_of(shortest, multiple))  # longer than every chunk
        carry_note = (f"no length asked ({', '.join(map(str, frames_list[:-1]))} frames) is longer than the chunk of {max(uncarried)} frames, so no state "
                      f"would be carried from one chunk to the next: {frames_list[-1]} frames added, which every chunk size cuts")
    has_batch = any(r == BATCH for r in roles.values())
    batch_list = list(batches or STREAM_BATCHES) if has_batch else [None]
    report = ChunkedReport(str(model_path), against, time, pairs, paired_by, list(chunks), notes=list(call.notes))
    report.notes += [carry_note] if carry_note else []
    if not has_batch:
        report.notes.append("no dimension of the file reads as a batch: run at its one batch size")
    torch64 = TorchTruth(torch_model, report.notes, "outputs compared with torch in float32 only")
    tolerances = tolerances or Tolerances()
    spec_of = {s.name: s for s in specs}
    failed: tuple[dict[str, np.ndarray], int] | None = None  # the first chunked run that failed: its inputs and chunk
    with running("ort", Subject(model=model_path, proto=proto)) as runner:  # a file from elsewhere: isolated
        for k, (frames, batch) in enumerate((f, b) for f in frames_list for b in batch_list):
            case = plan_cases(specs, roles, shapes, [frames], [batch] if batch is not None else None, dims or {})[0]
            feed = make_feed(specs, case, call.example_arrays, seed + k)
            for p in pairs:  # a stream starts from zeros
                feed[p.input] = np.zeros(case.shapes[p.input], dtype=spec_of[p.input].dtype)
            whole = {n: feed[n] for n in called}
            used = {n: feed[n] for n in (*names, *(p.input for p in pairs))}
            want32 = torch_outputs(torch_model, call, whole)
            want64 = torch64.float64(lambda model64: torch_outputs(model64, call, whole, dtype=torch.float64))
            if len(want32) == len(plain_outputs):
                compared = plain_outputs
            elif len(want32) == len(graph_outputs):
                compared = graph_outputs  # the torch model returns its final states too: held against the last chunk's
            else:
                raise RNNXError(f"the torch model returned {len(want32)} tensors, the file has {len(plain_outputs)} outputs besides the states "
                                f"({', '.join(plain_outputs)}); is this the model the file was exported from, and are the states paired right?")
            for chunk in chunks:
                got, error = run_in_chunks(runner, used, time_axes, out_axes, frames, chunk, lambda out: _carried(out, pairs, spec_of, case.shapes), first)
                for i, out in enumerate(compared):
                    where = {"frames": frames, "batch": batch, "chunk": chunk, "output": out}
                    if error:
                        report.rows.append(Row(where, None, error=error))
                    elif want64 is not None:  # torch in float32 is the honest run, its float64 copy the truth
                        rule = Rule.of(tolerances, out, np.asarray(want32[i]).dtype.name, want32[i], fixed_in="float32")
                        report.rows.append(judge(got.get(out), want64[i], rule, **where))
                    else:
                        report.rows.append(judge(got.get(out), want32[i], Rule(tolerances.get(out, "float32")), **where))
                if failed is None and chunk < frames and any(not r.passed for r in report.rows if r.chunk == chunk):
                    failed = (used, chunk)
    if failed is not None and first is None:  # the walk feeds every chunk alike: each would recompute the initial states
        parts = _divergence(proto, model_path, failed[0], time_axes, pairs, failed[1])
        if parts:
            report.notes.append(f"the file's chunks part from its own run on the whole sequence: {parts}")
    return report


def _divergence(proto: Any, model_path: Path, used: dict[str, np.ndarray], time_axes: dict[str, int | None], pairs: list[Pair], chunk: int) -> str | None:
    """The operation where the file's chunked run first parts from its whole run (run isolated,
    as the check ran it)."""
    runners: list[Any] = []

    def isolated(exposed: Any) -> Any:
        runners.append(make("ort", Subject(model=model_path, proto=exposed)))
        return runners[-1]

    runnable = for_runtime(proto, model_path.resolve().parent)
    try:
        return first_divergence(runnable, used, time_axes, [(p.input, p.output) for p in pairs], chunk, isolated)
    finally:
        for r in runners:
            close(r)


def _time_axes(record: Any, streamed: list[Any], roles: dict[str, str], model_path: Path) -> tuple[str, dict[str, int | None]]:
    """The time label and each non-state input's time axis (None: fed whole with every chunk)."""
    if record is not None:
        axes = {s.name: (record.inputs.get(s.name) or {}).get("time_axis") for s in streamed}
        if any(a is not None for a in axes.values()):
            return record.time, axes
    labels = sorted({d for s in streamed for d in s.dims if isinstance(d, str) and roles.get(d) == LENGTH})
    if len(labels) != 1:
        found = "none" if not labels else f"{len(labels)} ({', '.join(labels)})"
        raise RNNXError(f"{model_path}: expected one input dimension named like a length (seq, time, frames, ...) to cut into chunks, found {found}; "
                        "export the frames axis as a dynamic dimension named seq or frames")
    return labels[0], {s.name: (s.dims.index(labels[0]) if labels[0] in s.dims else None) for s in streamed}


def _carried(out: Mapping[str, np.ndarray], pairs: list[Pair], spec_of: dict[str, Any], shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """The next chunk's state inputs: this chunk's state outputs, refused where one does not fit its input."""
    for p in pairs:
        value, want = np.asarray(out[p.output]), tuple(shapes[p.input])
        if value.shape != want or value.dtype != spec_of[p.input].dtype:
            raise RNNXError(f"state output {p.output} is {value.dtype}{list(value.shape)}, its input {p.input} takes "
                            f"{spec_of[p.input].dtype}{list(want)}; are the states paired right?")
    return {p.input: np.asarray(out[p.output]) for p in pairs}
