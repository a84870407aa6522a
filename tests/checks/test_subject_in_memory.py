"""A proto held in memory alone (no file: a rewrite's input and output, a bundle's model) runs
from the check registry like a file: isolated in a child process, in ONNX Runtime or ONNX's
reference evaluator, and agrees with numpy in float64 at shapes the graph never saw."""

from __future__ import annotations

import numpy as np
import pytest

from rnnx.check.runners import Subject, running

onnx = pytest.importorskip("onnx")


def _graph() -> object:
    """y = tanh(x @ W + b) over a dynamic batch and length (W 3x4, seeded)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "time", 4])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("backend", "dtype", "atol"), [("ort", None, 1e-5), ("onnx-reference", "float64", 1e-6)])
def test_a_proto_in_memory_runs_isolated_and_matches_float64(backend: str, dtype: str | None, atol: float) -> None:
    from onnx import numpy_helper

    proto = _graph()
    w, b = (numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer)  # type: ignore[attr-defined]
    with running(backend, Subject(proto=proto, dtype=dtype, label="a graph in memory")) as runner:
        assert type(runner).__name__ == "IsolatedOnnxRuntime"  # untrusted: never in this process
        for k, (batch, time) in enumerate([(1, 1), (2, 5), (5, 9)]):
            x = np.random.default_rng(100 + k).standard_normal((batch, time, 3)).astype(np.float32)
            got = np.asarray(runner({"x": x})["y"], np.float64)
            want = np.tanh(x.astype(np.float64) @ w + b)
            assert got.shape == want.shape
            assert np.abs(got - want).max() < atol
            assert np.abs(got - (want + 1e-3)).max() > atol  # the comparison can fail
