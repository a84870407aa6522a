"""Hold a rewritten ONNX model against the model it came from, in ONNX Runtime."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx import parity
from rnnx.errors import RNNXError

UNKNOWN_DIM = 3  # the size fed to dynamic axes


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
        try:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        except KeyError:
            raise RNNXError(f"graph input {vi.name!r}: element type {t.elem_type} is not a tensor type rnnx can feed; the model is damaged") from None
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype)
    return feeds


def compare_models(original: Any, rewritten: Any, seed: int = 0) -> parity.ParityReport:
    """Every output of ``rewritten`` against ``original``'s on the same seeded inputs."""
    from rnnx.engines.onnxruntime import OnnxRuntimeRunner

    feeds = random_feeds(original, seed)
    want = OnnxRuntimeRunner(original)(feeds)
    got = OnnxRuntimeRunner(rewritten)(feeds)
    shape = next(iter(feeds.values())).shape if feeds else ()
    seq, batch = (int(shape[0]) if len(shape) > 0 else 0), (int(shape[1]) if len(shape) > 1 else 0)
    return parity.ParityReport(parity.compare("onnxruntime", got, {k: v.astype(np.float64) for k, v in want.items()}, seq, batch))
