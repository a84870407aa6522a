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
before. A convolution's cache is a state like any other (``"module": "frontend.conv"``,
``.cache_in`` / ``.cache_out``); a model with strides along time takes chunks of a multiple
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

from rnnx.errors import RNNXError

STREAMING_KEY = "rnnx.streaming"
STREAMING_VERSION = 1


@dataclass(frozen=True)
class StatePair:
    """One state carried between chunks: fed from ``input``, returned as ``output``."""

    module: str
    input: str
    output: str
    dims: tuple[int | str, ...]
    batch_axis: int | None
    dtype: str

    def zeros(self, batch: int | None) -> np.ndarray:
        """The initial value (zeros) at this batch size."""
        shape = []
        for d, size in enumerate(self.dims):
            if isinstance(size, int):
                shape.append(size)
            elif d == self.batch_axis and batch is not None:
                shape.append(batch)
            else:
                raise RNNXError(f"state {self.input}: expected its dims to be sizes or the batch, found {size!r} at dim {d}; "
                                "feed this state yourself")
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

    def to_json(self) -> str:
        states = [{"module": s.module, "input": s.input, "output": s.output, "dims": list(s.dims), "batch_axis": s.batch_axis,
                   "dtype": s.dtype, "initial": "zeros"} for s in self.states]
        return json.dumps({"version": STREAMING_VERSION, "time": self.time, "states": states, "inputs": self.inputs, "outputs": self.outputs,
                           "chunk_multiple": self.multiple})

    def check_chunk(self, frames: int, where: str) -> None:
        """Refuse a chunk the model's strides do not allow (its frames would not line up with
        the whole sequence's), or an empty one."""
        if frames < 1 or frames % self.multiple:
            need = "at least 1 frame" if self.multiple == 1 else f"a multiple of {self.multiple} frames (the model's strides along time)"
            raise RNNXError(f"{where}: expected a chunk of {need}, found {frames}; cut the stream into such chunks")

    def describe(self) -> list[str]:
        """Lines for ``rnnx inspect``: what the file carries from chunk to chunk."""
        lines = [f"streaming: chunks along {self.time}, a multiple of {self.multiple} frame(s); states start at zeros"]
        for name, info in self.inputs.items():
            if info.get("time_axis") is not None:
                lines.append(f"  streamed input {name}: time axis {info['time_axis']}" + (f", batch axis {info['batch_axis']}" if info.get("batch_axis") is not None else ""))
        for s in self.states:  # recurrent states and causal convolutions' caches alike
            shape = ", ".join(str(d) for d in s.dims)
            lines.append(f"  carried for {s.module or '(the model)'}: {s.input} -> {s.output} ({shape}) {s.dtype}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The record as ``rnnx inspect --json`` shows it."""
        return json.loads(self.to_json())

    @property
    def streamed_inputs(self) -> list[str]:
        """The inputs cut into chunks along their time axis, in graph order."""
        return [name for name, info in self.inputs.items() if info.get("time_axis") is not None]


def read_streaming(metadata: Mapping[str, str]) -> StreamingRecord | None:
    """The record in a file's metadata map (ONNX Runtime's ``custom_metadata_map`` or
    ``{p.key: p.value}``); None where there is none. A damaged one is refused (files are
    untrusted, but a wrong state pairing would run silently wrong)."""
    text = metadata.get(STREAMING_KEY)
    if text is None:
        return None
    try:
        raw = json.loads(text)
        if raw.get("version") != STREAMING_VERSION:
            raise ValueError(f"version {raw.get('version')!r}")
        states = tuple(StatePair(str(s["module"]), str(s["input"]), str(s["output"]), tuple(s["dims"]),
                                 None if s.get("batch_axis") is None else int(s["batch_axis"]), str(np.dtype(s["dtype"])))
                       for s in raw["states"])
        multiple = int(raw.get("chunk_multiple", 1))
        if multiple < 1:
            raise ValueError(f"chunk_multiple {multiple}")
        record = StreamingRecord(str(raw["time"]), states, dict(raw["inputs"]), dict(raw["outputs"]), multiple)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RNNXError(f"{STREAMING_KEY}: expected rnnx's streaming record (version {STREAMING_VERSION}), found one that does not read "
                        f"({type(exc).__name__}: {exc}); re-export with streaming=True") from None
    return record


class StreamingSession:
    """A streaming file run chunk by chunk in ONNX Runtime, the states held between calls.

    >>> session = rnnx.StreamingSession("vad.onnx")
    >>> for chunk in chunks:               # (batch, frames, features), any number of frames
    ...     prob = session.process(chunk)["prob"]
    >>> session.reset()                    # the next call starts a new stream, from zeros

    ``process(chunk, **other_inputs)``: ``chunk`` feeds the first input with a time axis;
    other inputs are given by name (cut into chunks by the caller, as ``chunk`` is); a state
    input given by name replaces the carried state (the stream goes on from it). Each state
    is checked against the record's dims and dtype before the run. Returns the graph's
    outputs other than the states, by name.
    """

    def __init__(self, path: str | Path, providers: list[str] | None = None, threads: int = 0) -> None:
        """``threads``: ONNX Runtime's intra-op threads (0: its default, or RNNX_ORT_THREADS);
        1 suits a device running several streams, each in its own session."""
        from rnnx.engines.onnxruntime import OnnxRuntimeRunner

        self.runner = OnnxRuntimeRunner(path, providers=providers, threads=threads)
        record = read_streaming(self.runner.session.get_modelmeta().custom_metadata_map)
        if record is None:
            raise RNNXError(f"{path}: expected a file exported with streaming=True (its {STREAMING_KEY} metadata), found none; "
                            "export it with rnnx.export(..., streaming=True) or rnnx export --streaming")
        self.record = record
        self._outputs = {s.output for s in record.states}
        self.states: dict[str, np.ndarray] | None = None  # by state input name; None before the first chunk
        self.batch: int | None = None  # the stream's batch size, set by its first chunk

    def reset(self) -> None:
        """Forget the states: the next chunk starts a new stream from zeros."""
        self.states = None

    def process(self, chunk: Any = None, /, **inputs: Any) -> dict[str, np.ndarray]:
        known = set(self.runner.input_names)
        unknown = sorted(set(inputs) - known)
        if unknown:  # a typo'd state would otherwise be dropped, and the stream go on from its own
            raise RNNXError(f"process: expected inputs among {', '.join(sorted(known))}, found {unknown[0]!r}")
        feed = {name: np.asarray(value) for name, value in inputs.items()}
        given = {s.input: feed.pop(s.input) for s in self.record.states if s.input in feed}  # a state given by name: the stream goes on from it
        streamed = self.record.streamed_inputs
        if chunk is not None:
            if not streamed:
                raise RNNXError("process: expected inputs by name (this file has no input with a time axis), found a positional chunk")
            feed[streamed[0]] = np.asarray(chunk)
        for name in streamed:
            axis = self.record.inputs[name].get("time_axis")
            if name in feed and axis is not None and feed[name].ndim > axis:
                self.record.check_chunk(int(feed[name].shape[axis]), f"process ({name})")
        batch = self._batch(feed)
        if self.states is None:
            self.states = {s.input: s.zeros(batch) for s in self.record.states}
            self.batch = batch
        elif batch != self.batch:  # ONNX Runtime would say only that two shapes differ
            raise RNNXError(f"process: expected batch {self.batch}, as in this stream's chunks so far, found {batch}; call reset() to start a stream at another batch")
        states = {**self.states, **given}
        for s in self.record.states:  # before running: a wrong state would fail in ONNX Runtime's words, or run
            s.check(states[s.input], batch, "given" if s.input in given else "carried from the chunk before")
        out = self.runner({**feed, **states})
        self.states = {s.input: out[s.output] for s in self.record.states}
        return {name: value for name, value in out.items() if name not in self._outputs}

    def _batch(self, feed: Mapping[str, np.ndarray]) -> int | None:
        """The batch size of this stream, read from the first input fed that has a batch axis."""
        for name, info in self.record.inputs.items():
            axis = info.get("batch_axis")
            if name in feed and axis is not None and feed[name].ndim > axis:
                return int(feed[name].shape[axis])
        return None
