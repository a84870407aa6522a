"""Hold a rewritten ONNX model against the model it came from, in ONNX Runtime."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx import parity
from rnnx.errors import RNNXError

UNKNOWN_DIM = 3  # the size fed to dynamic axes
# What a rewrite holds per node, measured: the input and its copy as Python protobuf objects
# (about 4 KiB a node), and for each lowered recurrence its Scan body and hoisted product.
NODE_BYTES = 4 << 10
LOWERED_BYTES = 256 << 10


def check_rewrite_size(model: Any, source: Any, lowered: int = 0) -> None:
    """Refuse, before copying it, a graph whose rewrite would pass the memory budget
    (300,000 Identity nodes fit in 9 MB of protobuf and take a gigabyte as objects)."""
    from pathlib import Path

    from rnnx import limits
    from rnnx.graphs.index import all_graphs

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
    return feeds


def compare_models(original: Any, rewritten: Any, seed: int = 0, label: str = "the input model") -> parity.ParityReport:
    """Every output of ``rewritten`` against ``original``'s on the same seeded inputs; with
    boolean inputs (an If's condition, say) once with all of them true and once false."""
    from rnnx.engines.isolated import IsolatedOnnxRuntime, TimeBudget

    # Both run in child processes under rnnx's time and memory limits: the input is a graph from
    # elsewhere, and the rewrite keeps whatever else it holds.
    from rnnx import limits

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
        report.rows += parity.compare("onnxruntime", after(run), {k: v.astype(np.float64) for k, v in want.items()}, seq, batch)
    return report
