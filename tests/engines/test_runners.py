"""Every CPU runner answers the same inputs with the same names, shapes and (within tolerance) numbers."""

from __future__ import annotations

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights, parity
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.reference import ReferenceRunner
from rnnx.formats.onnx_build import build_stack_model


@pytest.mark.parametrize("text", ["lstm,input=3,hidden=4,layers=2,bidirectional", "gru,input=3,hidden=5", "rnn_relu,input=2,hidden=3,reverse"])
def test_runners_share_one_interface(text: str) -> None:
    weights = RNNWeights.random(RNNSpec.parse(text), seed=1)
    runners = [ReferenceRunner(weights), OnnxRuntimeRunner(build_stack_model(weights, sequence_lens=True))]
    if weights.spec.direction != "reverse":
        torch_engine = pytest.importorskip("rnnx.engines.torch")
        runners.append(torch_engine.TorchRunner(weights))
    inputs = parity.random_inputs(weights, 6, 3, seed=2, ragged=True)
    results = [r(inputs) for r in runners]
    assert all(set(res) == set(results[0]) for res in results)
    for runner, res in zip(runners[1:], results[1:]):
        assert runner.device == "cpu" and runner.precision
        for name, want in results[0].items():
            np.testing.assert_allclose(res[name], want, atol=3e-5, err_msg=f"{type(runner).__name__} {name}")


@pytest.mark.parametrize(("text", "dtype"), [("lstm,input=3,hidden=4,layers=2,bidirectional", "float32"), ("gru,input=1,hidden=3", "float16")])
def test_the_isolated_runner_gives_onnx_runtimes_own_answers(text: str, dtype: str) -> None:
    """The child process changes where ONNX Runtime runs, not what it answers: bit-identical
    outputs, names, dtypes and shapes, at batch 1 and more, across several calls to one session."""
    from rnnx.engines.isolated import IsolatedOnnxRuntime

    weights = RNNWeights.random(RNNSpec.parse(text), seed=3).astype(np.dtype(dtype))
    model = build_stack_model(weights, sequence_lens=True)
    direct, isolated = OnnxRuntimeRunner(model), IsolatedOnnxRuntime(model.SerializeToString(), "test model")
    assert (isolated.input_names, isolated.output_names) == (direct.input_names, direct.output_names)
    for k, (seq, batch) in enumerate([(1, 1), (7, 3), (2, 5)]):
        inputs = parity.random_inputs(weights, seq, batch, seed=k, ragged=True, dtype=dtype)
        want, got = direct(inputs), isolated(inputs)
        for name in want:
            assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
            np.testing.assert_array_equal(got[name], want[name])
    isolated.close()


def test_the_isolated_runner_stops_a_graph_that_never_ends() -> None:
    import time

    from onnx import TensorProto, helper, numpy_helper

    from rnnx import RNNXError, limits
    from rnnx.engines.isolated import IsolatedOnnxRuntime

    body = helper.make_graph(
        [helper.make_node("Add", ["a", "one"], ["a_out"]), helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("a_out", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1, np.float32), "one")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "spin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(10**15, np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with limits.budgets(seconds=6):
        runner = IsolatedOnnxRuntime(model.SerializeToString(), "spin.onnx")
        start = time.monotonic()
        with pytest.raises(RNNXError, match="spin.onnx past the time limit of 6 s without finishing"):
            runner({"x": np.zeros((), np.float32)})
    assert time.monotonic() - start < 20
    assert runner._child.poll() is not None  # the child was killed, not left spinning


def test_rnnx_ort_threads_caps_the_session_pool(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """RNNX_ORT_THREADS=1 (several rnnx processes on one machine): each session computes on one thread."""
    from rnnx import RNNSpec, RNNWeights
    from rnnx.engines.onnxruntime import OnnxRuntimeRunner
    from rnnx.formats.onnx_build import build_stack_model, save_model

    save_model(build_stack_model(RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3"), seed=0)), tmp_path / "m.onnx")
    monkeypatch.setenv("RNNX_ORT_THREADS", "1")
    assert OnnxRuntimeRunner(tmp_path / "m.onnx").session.get_session_options().intra_op_num_threads == 1
    monkeypatch.setenv("RNNX_ORT_THREADS", "0")
    assert OnnxRuntimeRunner(tmp_path / "m.onnx").session.get_session_options().intra_op_num_threads == 0
