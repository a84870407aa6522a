"""Running a streaming file: chunks in, outputs out, the recurrent states carried between calls.

``rnnx.export(model, example, path, streaming=True)`` writes a file whose every nn.LSTM /
GRU / RNN takes its initial states as graph inputs and returns its final states as graph
outputs, and records the pairs in ``metadata_props`` under :data:`STREAMING_KEY`, as JSON::

    {"version": 1,
     "time": "seq",                                    # the label of the time axis
     "states": [{"module": "encoder.rnn", "input": "encoder.rnn.h_in", "output": "encoder.rnn.h_out",
                 "dims": [2, "batch", 64], "batch_axis": 1, "dtype": "float32", "initial": "zeros"}, ...],
     "inputs": {"x": {"dims": ["batch", "seq", 40], "time_axis": 1, "batch_axis": 0}},
     "outputs": {"prob": {"dims": ["batch", "seq", 1], "time_axis": 1}},
     "chunk_multiple": 1}                              # chunks must be a multiple of this many frames

so that any runtime can loop without reading code: feed each state input zeros of its dims
(the batch label at the batch size) for the first chunk, then the paired output of the chunk
before. Every batch axis is ``"batch"`` (whatever the graph's label); an output's frames are the time label or an expression of it (``"seq // 4"``), else null.

Version 2 adds a state the model computes for itself (``h0 = tanh(Linear(speaker))``, a
learned ``nn.Parameter`` h0): its ``"initial"`` is ``"computed"``, and the record names a
boolean scalar graph input, ``"first": "first_chunk"``, true for a stream's first chunk. The
file computes that state as the model does and takes ``Where(first_chunk, computed, h_in)``,
so a runtime feeds ``first_chunk`` true with the first chunk (its state inputs zeros, unread)
and false after, carrying the states as before. One call per chunk, rather than a first call
for an extra ``h_init`` output: a runtime needs no second code path, and a state computed from
an input fed with every chunk (a speaker embedding) is computed from the chunk's own value.
A file whose states all start at zeros is still written as version 1, which readers before
version 2 read; both versions are read here. A convolution's cache is a state like any other (``"module": "frontend.conv"``,
``.cache_in`` / ``.cache_out``), and so is a value a Python loop over the frames hands from step to step
(``"module": "h"``, the variable holding it, ``h_in`` / ``h_out``); a model with strides along time takes chunks of a multiple
of ``chunk_multiple`` frames. A null ``time_axis`` is an input fed whole with every chunk,
or an output that holds no frames (its value after the last chunk is the whole sequence's).


:class:`StreamingSession` does exactly that over ONNX Runtime. It imports onnxruntime on
first use only, so that ``import rnnx`` stays light.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.engines.ort_options import session_options
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.graphs.precision import computes_in_float16

STREAMING_KEY = "rnnx.streaming"
STREAMING_VERSION = 1  # a file whose states all start at zeros
COMPUTED_VERSION = 2  # a file with a state the model computes for its first chunk (the record's "first" input)
INITIALS = ("zeros", "computed")


@dataclass(frozen=True)
class StatePair:
    """One state carried between chunks: fed from ``input``, returned as ``output``."""

    module: str
    input: str
    output: str
    dims: tuple[int | str, ...]
    batch_axis: int | None
    dtype: str
    initial: str = "zeros"  # or "computed": the file computes it when the record's first input is true

    def zeros(self, batch: int | None, inferred: Mapping[int, int] | None = None) -> np.ndarray:
        """The initial value (zeros) at this batch size; ``inferred``: sizes of its other labelled
        dims, as the first chunk's shapes make them (a cache whose width follows a feature axis)."""
        shape = []
        for d, size in enumerate(self.dims):
            if isinstance(size, int):
                shape.append(size)
            elif d == self.batch_axis and batch is not None:
                shape.append(batch)
            elif inferred and d in inferred:
                shape.append(inferred[d])
            else:
                raise RNNXError(f"state {self.input}: expected its dims to be sizes, the batch, or sizes the first chunk's shapes decide, "
                                f"found {size!r} at dim {d}, which they do not; feed this state yourself (process(..., {self.input}=...))")
        return np.zeros(shape, dtype=self.dtype)

    def check(self, value: np.ndarray, batch: int | None, where: str) -> None:
        """Refuse a state value whose shape or dtype is not this state's (its dims, the batch label
        at ``batch``): ONNX Runtime would say only that some shape differs, or run a wrong one."""
        want = [size if isinstance(size, int) else (batch if d == self.batch_axis and batch is not None else None)
                for d, size in enumerate(self.dims)]
        shape_ok = value.ndim == len(want) and all(w is None or w == n for w, n in zip(want, value.shape))
        if not shape_ok or str(value.dtype) != self.dtype:
            shown = "[" + ", ".join("?" if w is None else str(w) for w in want) + "]"
            raise RNNXError(f"state {self.input} ({where}): expected {self.dtype} of shape {shown}, found {value.dtype} of shape {list(value.shape)}; "
                            f"give it as the file's rnnx.streaming record says, or call reset() to start from zeros")


@dataclass(frozen=True)
class StreamingRecord:
    """The ``rnnx.streaming`` entry of a file (see the module docstring)."""

    time: str
    states: tuple[StatePair, ...]
    inputs: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    multiple: int = 1  # chunks are a multiple of this many frames (the strides along time)
    first: str | None = None  # the boolean input true for a stream's first chunk, where a state's initial is "computed"

    def to_json(self) -> str:
        states = [{"module": s.module, "input": s.input, "output": s.output, "dims": list(s.dims), "batch_axis": s.batch_axis,
                   "dtype": s.dtype, "initial": s.initial} for s in self.states]
        extra = {"first": self.first} if self.first is not None else {}
        return json.dumps({"version": COMPUTED_VERSION if self.first is not None else STREAMING_VERSION, "time": self.time, "states": states,
                           "inputs": self.inputs, "outputs": self.outputs, "chunk_multiple": self.multiple, **extra})

    def check_chunk(self, frames: int, where: str) -> None:
        """Refuse a chunk the model's strides do not allow (its frames would not line up with
        the whole sequence's), or an empty one."""
        if frames < 1 or frames % self.multiple:
            need = "at least 1 frame" if self.multiple == 1 else f"a multiple of {self.multiple} frames (the model's strides along time)"
            raise RNNXError(f"{where}: expected a chunk of {need}, found {frames}; cut the stream into such chunks")

    def describe(self) -> list[str]:
        """Lines for ``rnnx inspect``: what the file carries from chunk to chunk."""
        start = "states start at zeros" if self.first is None else f"states start at zeros or as the model computes them where {self.first} is true"
        lines = [f"streaming: chunks along {self.time}, a multiple of {self.multiple} frame(s); {start}"]
        for name, info in self.inputs.items():
            if info.get("time_axis") is not None:
                lines.append(f"  streamed input {name}: time axis {info['time_axis']}" + (f", batch axis {info['batch_axis']}" if info.get("batch_axis") is not None else ""))
        for s in self.states:  # recurrent states and causal convolutions' caches alike
            shape = ", ".join(str(d) for d in s.dims)
            lines.append(f"  carried for {s.module or '(the model)'}: {s.input} -> {s.output} ({shape}) {s.dtype}"
                         + (", computed by the model for the first chunk" if s.initial == "computed" else ""))
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The record as ``rnnx inspect --json`` shows it."""
        return json.loads(self.to_json())

    @property
    def streamed_inputs(self) -> list[str]:
        """The inputs cut into chunks along their time axis, in graph order."""
        return [name for name, info in self.inputs.items() if info.get("time_axis") is not None]


_MAX_RECORD = 1 << 20  # characters: a record lists a few states and inputs
_ORT_TYPES: dict[str, np.dtype[Any]] = {"tensor(float)": np.dtype(np.float32), "tensor(float16)": np.dtype(np.float16), "tensor(double)": np.dtype(np.float64),
              "tensor(int64)": np.dtype(np.int64), "tensor(int32)": np.dtype(np.int32), "tensor(int8)": np.dtype(np.int8),
              "tensor(uint8)": np.dtype(np.uint8), "tensor(bool)": np.dtype(np.bool_)}
_MAX_NAMES = 4096  # states, inputs or outputs in one record
_MAX_RANK = 16
_MAX_SIZE = 1 << 31  # a state dimension's size
_MAX_MULTIPLE = 1 << 20  # frames in the smallest chunk
_DTYPES = ("float32", "float16", "float64", "bfloat16")


def read_streaming(metadata: Mapping[str, str], inputs: Mapping[str, int] | None = None,
                   outputs: Mapping[str, int] | None = None) -> StreamingRecord | None:
    """The record in a file's metadata map (ONNX Runtime's ``custom_metadata_map`` or
    ``{p.key: p.value}``); None where there is none. Files are untrusted, and a wrong state
    pairing would run silently wrong, so the record is read against a schema with bounds: sizes,
    axes and the chunk multiple are integers in range, names are strings, and, where the
    graph's ``inputs`` and ``outputs`` are given (name -> rank), every name the record uses is
    one of the graph's and every axis is within that tensor's rank. A record that breaks any of
    it is refused in one line naming the field."""
    text = metadata.get(STREAMING_KEY)
    if text is None:
        return None
    try:
        if len(text) > _MAX_RECORD:
            raise ValueError(f"it is {len(text)} characters long, more than a record holds ({_MAX_RECORD})")
        try:
            raw = json.loads(text)
        except RecursionError:
            raise ValueError("it is nested deeper than JSON can be read") from None
        _field(isinstance(raw, dict), "the record", "an object", raw)
        version = raw.get("version")
        _field(version in (STREAMING_VERSION, COMPUTED_VERSION) and _int(version), "version", f"{STREAMING_VERSION} or {COMPUTED_VERSION}", version)
        _field(isinstance(raw.get("states"), list) and len(raw["states"]) <= _MAX_NAMES, "states", "a list of states", raw.get("states"))
        states = tuple(_state(s, k, inputs, outputs) for k, s in enumerate(raw["states"]))
        first = _first(raw, version, states, inputs)
        multiple = raw.get("chunk_multiple", 1)
        _field(_int(multiple) and 1 <= multiple <= _MAX_MULTIPLE, "chunk_multiple", f"an integer from 1 to {_MAX_MULTIPLE}", multiple)
        _field(isinstance(raw.get("time"), str), "time", "the time axis's label", raw.get("time"))
        streamed = _axes(raw.get("inputs"), "inputs", inputs)
        returned = _axes(raw.get("outputs"), "outputs", outputs)
        _field(first is None or first not in streamed, f"inputs.{first}", "no entry for the first input (the record's first names it)", first)
        record = StreamingRecord(raw["time"], states, streamed, returned, multiple, first)
    except ValueError as exc:
        raise RNNXError(f"{STREAMING_KEY}: expected rnnx's streaming record (version {STREAMING_VERSION} or {COMPUTED_VERSION}), found one that does not read "
                        f"({exc}); re-export with streaming=True") from None
    return record


def graph_ranks(proto: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Each graph input's and output's rank, as its declared shape says (initializers left
    out): what a streaming record is read against."""
    skip = {t.name for t in proto.graph.initializer}
    return ({v.name: len(v.type.tensor_type.shape.dim) for v in proto.graph.input if v.name not in skip},
            {v.name: len(v.type.tensor_type.shape.dim) for v in proto.graph.output})


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(ok: bool, where: str, expected: str, found: Any) -> None:
    if not ok:
        shown = repr(found)
        raise ValueError(f"{where}: expected {expected}, found {shown[:60] + '...' if len(shown) > 60 else shown}")


def _state(s: Any, k: int, inputs: Mapping[str, int] | None, outputs: Mapping[str, int] | None) -> StatePair:
    where = f"states[{k}]"
    _field(isinstance(s, dict), where, "an object", s)
    for key in ("module", "input", "output"):
        _field(isinstance(s.get(key), str), f"{where}.{key}", "a name", s.get(key))
    _field(inputs is None or s["input"] in inputs, f"{where}.input", f"one of the graph's inputs ({', '.join(sorted(inputs or []))})", s["input"])
    _field(outputs is None or s["output"] in outputs, f"{where}.output", f"one of the graph's outputs ({', '.join(sorted(outputs or []))})", s["output"])
    dims = s.get("dims")
    _field(isinstance(dims, list) and len(dims) <= _MAX_RANK, f"{where}.dims", f"a list of at most {_MAX_RANK} dimensions", dims)
    for d, size in enumerate(dims):
        _field((_int(size) and 0 <= size <= _MAX_SIZE) or (isinstance(size, str) and 0 < len(size) <= 256 and size.isprintable()),
               f"{where}.dims[{d}]", f"a size from 0 to {_MAX_SIZE} or a label", size)
    _field(inputs is None or inputs[s["input"]] == len(dims), f"{where}.dims", f"{inputs[s['input']] if inputs else 0} dimensions (the input's rank)", dims)
    batch_axis = s.get("batch_axis")
    _field(batch_axis is None or (_int(batch_axis) and 0 <= batch_axis < len(dims)), f"{where}.batch_axis", f"an axis from 0 to {len(dims) - 1} or null",
           batch_axis)
    _field(s.get("dtype") in _DTYPES, f"{where}.dtype", f"one of {', '.join(_DTYPES)}", s.get("dtype"))
    dtype = str(np.dtype(s["dtype"])) if s["dtype"] != "bfloat16" else "bfloat16"
    initial = s.get("initial", "zeros")  # version 1 files all say zeros
    _field(initial in INITIALS, f"{where}.initial", " or ".join(INITIALS), initial)
    return StatePair(s["module"], s["input"], s["output"], tuple(dims), batch_axis, dtype, initial)


def _first(raw: dict[str, Any], version: Any, states: tuple[StatePair, ...], inputs: Mapping[str, int] | None) -> str | None:
    """The record's first-chunk input: in a version 2 record, a scalar graph input that some
    computed state needs; none in version 1, whose states all start at zeros."""
    computed = [s.input for s in states if s.initial == "computed"]
    if version == STREAMING_VERSION:
        _field(not computed and "first" not in raw, "initial", "zeros in a version 1 record", computed[0] if computed else raw.get("first"))
        return None
    first: Any = raw.get("first")  # JSON: its type checked below
    _field(isinstance(first, str) and 0 < len(first) <= 256, "first", "the name of the first-chunk input", first)
    _field(inputs is None or inputs.get(first) == 0, "first", "one of the graph's inputs, a scalar", first)
    _field(bool(computed), "states", "a state whose initial is computed (version 2)", "none")
    _field(first not in {s.input for s in states}, "first", "an input other than the states", first)
    return first


def _axes(entry: Any, where: str, ranks: Mapping[str, int] | None) -> dict[str, dict[str, Any]]:
    _field(isinstance(entry, dict) and len(entry) <= _MAX_NAMES, where, "an object of names", entry)
    for name, info in entry.items():
        _field(ranks is None or name in ranks, f"{where}.{name}", f"one of the graph's {where}", name)
        _field(isinstance(info, dict), f"{where}.{name}", "an object", info)
        rank = ranks[name] if ranks is not None else _MAX_RANK
        for key in ("time_axis", "batch_axis"):
            axis = info.get(key)
            _field(axis is None or (_int(axis) and 0 <= axis < rank), f"{where}.{name}.{key}", f"an axis from 0 to {rank - 1} or null", axis)
    return dict(entry)


class StreamingSession:
    """A streaming file run chunk by chunk in ONNX Runtime, the states held between calls.

    >>> session = rnnx.StreamingSession("vad.onnx")
    >>> for chunk in chunks:               # (batch, frames, features), any number of frames
    ...     prob = session.process(chunk)["prob"]
    >>> session.reset()                    # the next call starts a new stream, from zeros

    ``process(chunk, **other_inputs)``: ``chunk`` feeds the first input with a time axis;
    other inputs are given by name (cut into chunks by the caller, as ``chunk`` is); a state
    input given by name replaces the carried state (the stream goes on from it; on a first chunk,
    a computed state given so replaces the one the file would compute). Each state
    is checked against the record's dims and dtype before the run. Returns the graph's
    outputs other than the states, by name.
    """

    def __init__(self, path: str | Path, providers: list[str] | None = None, threads: int = 0) -> None:
        """``threads``: ONNX Runtime's intra-op threads (0: its default, or RNNX_ORT_THREADS);
        1 suits a device running several streams, each in its own session."""
        from rnnx.engines.onnxruntime import OnnxRuntimeRunner

        self.runner = OnnxRuntimeRunner(path, providers=providers, threads=threads)
        session = self.runner.session
        record = read_streaming(session.get_modelmeta().custom_metadata_map, {i.name: len(i.shape) for i in session.get_inputs()},
                                {o.name: len(o.shape) for o in session.get_outputs()})
        if record is None:
            raise RNNXError(f"{path}: expected a file exported with streaming=True (its {STREAMING_KEY} metadata), found none; "
                            "export it with rnnx.export(..., streaming=True) or rnnx export --streaming")
        self.record = record
        self._outputs = {s.output for s in record.states}
        # Read once, so that a chunk costs little beyond ONNX Runtime's run: the names the
        # session takes and returns, each streamed input's time axis, the state pairs.
        self._known = frozenset(self.runner.input_names)
        self._names = list(self.runner.output_names)
        self._time_axes = [(name, record.inputs[name].get("time_axis")) for name in record.streamed_inputs]
        self._pairs = [(s.input, s.output) for s in record.states]
        self._returned = [name for name in self._names if name not in self._outputs]
        self._types = {i.name: _ORT_TYPES.get(i.type) for i in session.get_inputs()}
        self._path = path
        self.states: dict[str, np.ndarray] | None = None  # by state input name; None before the first chunk
        self.batch: int | None = None  # the stream's batch size, set by its first chunk that ran

    def reset(self) -> None:
        """Forget the states: the next chunk starts a new stream from its initial states (zeros,
        or those the file computes on a first chunk), at any batch."""
        self.states = None
        self.batch = None

    def process(self, chunk: Any = None, /, **inputs: Any) -> dict[str, np.ndarray]:
        unknown = [name for name in inputs if name not in self._known]
        if unknown:  # a typo'd state would otherwise be dropped, and the stream go on from its own
            raise RNNXError(f"process: expected inputs among {', '.join(sorted(self._known))}, found {unknown[0]!r}")
        feed = {name: self._as_input(name, value) for name, value in inputs.items()}
        given = {s.input: feed.pop(s.input) for s in self.record.states if s.input in feed}  # a state given by name: the stream goes on from it
        if chunk is not None:
            if not self._time_axes:
                raise RNNXError("process: expected inputs by name (this file has no input with a time axis), found a positional chunk")
            feed[self._time_axes[0][0]] = self._as_input(self._time_axes[0][0], chunk)
        for name, axis in self._time_axes:
            if name in feed and axis is not None and feed[name].ndim > axis:
                self.record.check_chunk(int(feed[name].shape[axis]), f"process ({name})")
        batch = self._batch(feed)
        fresh = self.states is None
        first = self.record.first
        if first is not None and first not in feed:
            # a computed state given by name on a first chunk is where the stream goes on from: the file then reads the state inputs
            feed[first] = np.array(fresh and not any(s.initial == "computed" and s.input in given for s in self.record.states))
        if fresh:  # the stream's batch and states are fixed only once this chunk has run (a chunk ONNX Runtime refuses fixes nothing)
            inferred = self._inferred_dims(feed, given)
            carried = {s.input: given[s.input] if s.input in given else s.zeros(batch, inferred.get(s.input)) for s in self.record.states}
        elif batch != self.batch:  # ONNX Runtime would say only that two shapes differ
            raise RNNXError(f"process: expected batch {self.batch}, as in this stream's chunks so far, found {batch}; call reset() to start a stream at another batch")
        else:
            carried = self.states  # type: ignore[assignment]
        states = {**carried, **given} if given else carried
        for s in self.record.states:  # before running: a wrong state would fail in ONNX Runtime's words, or run
            if fresh or s.input in given:  # those carried from the last chunk are ONNX Runtime's own outputs at this batch
                s.check(states[s.input], batch, "given" if s.input in given else "carried from the chunk before")
        missing = [n for n in self._known if n not in feed and n not in states]
        if missing:
            raise RNNXError(f"process: expected inputs {', '.join(sorted(self._known))}, missing {', '.join(sorted(missing))}")
        try:
            values = self.runner.session.run(self._names, {**feed, **states})
        except Exception as exc:  # onnxruntime's InvalidArgument / Fail: shapes or types the model does not take
            raise RNNXError(f"ONNX Runtime could not run the model: {one_line(exc, CAUSE_CHARS)}") from None
        out = dict(zip(self._names, values))
        self.states = {i: out[o] for i, o in self._pairs}
        self.batch = batch
        return {name: out[name] for name in self._returned}

    def _as_input(self, name: str, value: Any) -> np.ndarray:
        """``value`` (an array, a list, a scalar) as the input's element type, where that loses
        nothing a model cares about: floats to the file's float type (a float64 or float32 chunk
        for a float16 file), integers to its integer type when they fit. Anything else is refused
        in one line: ONNX Runtime's own type error names neither the input nor what to do."""
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        want = self._types.get(name)
        if want is None or array.dtype == want:
            return array
        if array.dtype.kind == "f" and want.kind == "f":
            with np.errstate(over="ignore"):  # values past the range are refused below, in one line
                cast = array.astype(want)
            if not np.isfinite(cast[np.isfinite(array)]).all():
                raise RNNXError(f"process ({name}): expected values {want.name} holds, found some past its range "
                                f"(largest {float(np.nanmax(np.abs(array))):.3g}); scale the input as the model was trained")
            return cast
        if array.dtype.kind in "iub" and want.kind in "iu":
            info = np.iinfo(want)
            if array.size == 0 or (int(array.min()) >= info.min and int(array.max()) <= info.max):
                return array.astype(want)
        raise RNNXError(f"process ({name}): expected {want.name} (the file's input type), found {array.dtype.name}, which does not cast to it "
                        "without loss; give the input as the file takes it")

    def _inferred_dims(self, feed: Mapping[str, np.ndarray], given: Mapping[str, np.ndarray]) -> dict[str, dict[int, int]]:
        """The sizes of states' labelled dims other than the batch, for a first chunk: a cache is
        joined to the chunk's frames by a Concat along time, so its other dims are those of what
        it is joined to (a width that follows a feature axis the file leaves dynamic). That
        operand is computed by the part of the graph before it, run once on this chunk."""
        needing = [s for s in self.record.states if s.input not in given
                   and any(isinstance(size, str) and d != s.batch_axis for d, size in enumerate(s.dims))]
        if not needing:
            return {}
        from rnnx.formats.onnx_read import load_model

        model = load_model(Path(self._path))
        joined = {}  # state input -> (the operand joined to it, the Concat's axis)
        for node in model.graph.node:
            if node.op_type == "Concat" and len(node.input) == 2:
                for k, name in enumerate(node.input):
                    if name in {s.input for s in needing}:
                        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                        joined[name] = (node.input[1 - k], axis)
        operands = _run_part(model, sorted({o for o, _ in joined.values()}), {**feed, **({self.record.first: np.array(True)} if self.record.first else {}), **{
            s.input: s.zeros(self._batch(feed)) for s in self.record.states if s not in needing}})
        found: dict[str, dict[int, int]] = {}
        for s in needing:
            if s.input in joined and joined[s.input][0] in operands:
                operand, axis = joined[s.input]
                shape = operands[operand].shape
                found[s.input] = {d: int(shape[d]) for d, size in enumerate(s.dims) if isinstance(size, str) and d not in (s.batch_axis, axis % len(shape))}
        return found

    def _batch(self, feed: Mapping[str, np.ndarray]) -> int | None:
        """The batch size of this stream, read from the first input fed that has a batch axis."""
        for name, info in self.record.inputs.items():
            axis = info.get("batch_axis")
            if name in feed and axis is not None and feed[name].ndim > axis:
                return int(feed[name].shape[axis])
        return None


def _run_part(model: Any, outputs: list[str], feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``outputs`` of ``model``, computed by the nodes they depend on alone, in ONNX Runtime;
    empty where that part cannot run on ``feed`` (it needs a state not in it)."""
    from onnx import helper

    producers = {o: n for n in model.graph.node for o in n.output}
    needed, todo = [], list(outputs)
    seen: set[int] = set()  # nodes by id(): protobuf messages do not hash
    while todo:
        name = todo.pop()
        node = producers.get(name)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        needed.append(node)
        todo += [i for i in node.input if i]
    used = {i for n in needed for i in n.input}
    inputs = [v for v in model.graph.input if v.name in used]
    if any(v.name not in feed for v in inputs if v.name not in {t.name for t in model.graph.initializer}):
        return {}
    order = {id(n): k for k, n in enumerate(model.graph.node)}
    graph = helper.make_graph(sorted(needed, key=lambda n: order[id(n)]), "part", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [t for t in model.graph.initializer if t.name in used])
    part = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    from rnnx.engines.onnxruntime import cpu_session

    try:
        session = cpu_session(part, session_options(extended_only=computes_in_float16(part)))
    except Exception:  # noqa: BLE001  a part ONNX Runtime cannot build leaves the dims unknown, and zeros() says so
        return {}
    try:
        values = session.run(outputs, {v.name: feed[v.name] for v in inputs if v.name in feed})
    except Exception as exc:  # noqa: BLE001  the chunk itself is what the model does not take
        raise RNNXError(f"ONNX Runtime could not run the model on this chunk: {one_line(exc, CAUSE_CHARS)}") from None
    return dict(zip(outputs, values))
