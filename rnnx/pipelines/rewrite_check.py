"""Hold a rewritten ONNX model against the model it came from, in ONNX Runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits, parity
from rnnx.engines.isolated import IsolatedOnnxRuntime, TimeBudget
from rnnx.errors import RNNXError
from rnnx.graphs import walk
from rnnx.graphs.index import all_graphs
from rnnx.tolerance import Tolerances

UNKNOWN_DIM = 3  # the size fed to dynamic axes
# What a rewrite holds per node, measured: the input and its copy as Python protobuf objects
# (about 4 KiB a node), and for each lowered recurrence its Scan body and hoisted product.
NODE_BYTES = 4 << 10
LOWERED_BYTES = 256 << 10


def check_rewrite_size(model: Any, source: Any, lowered: int = 0) -> None:
    """Refuse, before copying it, a graph whose rewrite would pass the memory budget
    (300,000 Identity nodes fit in 9 MB of protobuf and take a gigabyte as objects)."""
    nodes = sum(len(g.node) for g in all_graphs(model.graph))
    limits.check_claim(f"{source}: rewriting its {nodes} nodes", nodes * NODE_BYTES + lowered * LOWERED_BYTES, Path(source).stat().st_size)


def random_feeds(model: Any, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs at the model's own input shapes; dynamic axes get :data:`UNKNOWN_DIM`."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else UNKNOWN_DIM for d in t.shape.dim]
        if any(d < 0 for d in shape):
            raise RNNXError(f"graph input {vi.name!r}: shape {shape} has a negative size; the model is damaged")
        try:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        except KeyError:
            raise RNNXError(f"graph input {vi.name!r}: element type {t.elem_type} is not a tensor type rnnx can feed; the model is damaged") from None
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype)
    _fill_sequence_lengths(model, feeds, rng)
    return feeds


_LENGTH_PATH = ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze")  # what may lie between a graph input and sequence_lens
_X_PATH = _LENGTH_PATH + ("Transpose",)


def _fill_sequence_lengths(model: Any, feeds: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """An integer graph input that reaches an LSTM/GRU/RNN node's sequence_lens gets seeded lengths
    between 1 and the sequence's length (zeros, the default for integers, would run no step at all)."""
    producers = walk.producers_of(model.graph)
    for node in model.graph.node:
        if node.op_type not in ("LSTM", "GRU", "RNN") or len(node.input) < 5 or not node.input[4]:
            continue
        lengths, _ = walk.back(node.input[4], producers, _LENGTH_PATH)
        if lengths not in feeds or feeds[lengths].dtype.kind not in "iu":
            continue
        x, swaps = walk.back(node.input[0], producers, _X_PATH)
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        steps = feeds[x].shape[(layout + swaps) % 2] if x in feeds and feeds[x].ndim == 3 else 1
        feeds[lengths] = rng.integers(1, max(int(steps), 1) + 1, size=feeds[lengths].shape).astype(feeds[lengths].dtype)


def compare_models(original: Any, rewritten: Any, seed: int = 0, label: str = "the input model",
                   tolerances: Tolerances | None = None) -> parity.ParityReport:
    """Every output of ``rewritten`` against ``original``'s on the same seeded inputs; with
    boolean inputs (an If's condition, say) once with all of them true and once false. Each
    output is held to ``tolerances`` by its graph name (default: the tolerance of its dtype,
    :data:`rnnx.tolerance.BY_DTYPE`; integer and boolean outputs get float32's)."""
    # Both run in child processes under rnnx's time and memory limits: the input is a graph from
    # elsewhere, and the rewrite keeps whatever else it holds.
    first, second = original.SerializeToString(), rewritten.SerializeToString()
    shared = TimeBudget(limits.time_limit(len(first)))  # one limit for both sessions and all their runs
    before = IsolatedOnnxRuntime(first, label, shared)
    after = IsolatedOnnxRuntime(second, f"the rewritten {label}", shared)
    feeds = random_feeds(original, seed)
    flags = [k for k, v in feeds.items() if v.dtype == np.bool_]
    report = parity.ParityReport()
    for value in ([True, False] if flags else [None]):
        run = {k: (np.full_like(v, value) if k in flags else v) for k, v in feeds.items()}
        want = before(run)
        shape = next((v.shape for v in run.values() if v.dtype.kind == "f" and v.ndim >= 2), ())
        seq, batch = (int(shape[0]) if len(shape) > 0 else 0), (int(shape[1]) if len(shape) > 1 else 0)
        dtypes = {k: np.asarray(v).dtype.name for k, v in want.items()}
        report.rows += parity.compare("ort", after(run), want, seq, batch, dtypes, tolerances)
    return report
