"""rnnx fuse on a streaming model's single step: a cell called once per call, its state a graph
input and output, input size equal to hidden size. The state is told from the input by
structure; the proof that it was told right is to run the fused node's weights over many
steps, where swapping the input's and the state's matrices would show, against torch."""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.pipelines.fuse import fuse_file

torch = pytest.importorskip("torch")
nn = torch.nn
SIZE = 6  # input size == hidden size: shapes cannot tell x from h


class LSTMStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(SIZE, SIZE)

    def forward(self, x, h, c):
        return self.cell(x, (h, c))


class StateFirst(LSTMStep):
    """The state before the input, outputs in the other order: positions do not decide."""

    def forward(self, h, c, x):  # type: ignore[override]
        h, c = self.cell(x, (h, c))
        return c, h


class GRUStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(SIZE, SIZE)

    def forward(self, x, h):
        return self.cell(x, h)


class RNNStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.RNNCell(SIZE, SIZE)

    def forward(self, x, h):
        return self.cell(x, h)


CASES = {"lstm": (LSTMStep, ("x", "h", "c")), "lstm-state-first": (StateFirst, ("h", "c", "x")), "gru": (GRUStep, ("x", "h")), "rnn": (RNNStep, ("x", "h"))}


def _native_over_time(node: onnx.NodeProto, inits: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The fused node's weights run by ONNX Runtime over a whole sequence from a zero state."""
    vi = lambda n, s: helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)  # noqa: E731
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    step = helper.make_node(node.op_type, ["X", *node.input[1:4]], ["Y"], **attrs)
    graph = helper.make_graph([step], "seq", [vi("X", list(x.shape))], [vi("Y", None)],
                              [numpy_helper.from_array(inits[n], n) for n in node.input[1:4]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})[0][:, 0]


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_single_step_becomes_one_step_node_with_state_told_apart(tmp_path, case: str, dynamo: bool) -> None:
    make, names = CASES[case]
    torch.manual_seed(zlib.crc32(case.encode()))
    model = make().eval()
    src, out = tmp_path / "step.onnx", tmp_path / "fused.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(torch.randn(2, SIZE) for _ in names), str(src), dynamo=dynamo, opset_version=17, input_names=list(names))
    report = fuse_file(src, out)
    assert report.check and len(report.cells) == 1 and not report.left_alone, str(report)
    before, after = onnx.load(str(src)).graph, onnx.load(str(out)).graph
    assert [i.name for i in after.input] == [i.name for i in before.input] and [o.name for o in after.output] == [o.name for o in before.output]
    (node,) = [n for n in after.node if n.op_type in ("LSTM", "GRU", "RNN")]
    assert node.op_type == case.split("-")[0].upper() and not {"Sigmoid", "Tanh", "Gemm"} & {n.op_type for n in after.node}
    producers = {o: n for n in after.node for o in n.output}
    assert producers[node.input[5]].input[0] == "h" and producers[node.input[0]].input[0] == "x"
    inits = {i.name: numpy_helper.to_array(i) for i in after.initializer}
    rng = np.random.default_rng(zlib.crc32(f"{case}-seq".encode()))
    for T, B in ((7, 3), (5, 1)):
        x = rng.standard_normal((T, B, SIZE)).astype(np.float32)
        with torch.no_grad():
            state = (torch.zeros(B, SIZE), torch.zeros(B, SIZE))
            want = []
            for t in range(T):
                state = model.cell(torch.from_numpy(x[t]), state if case.startswith("lstm") else state[0])
                state = state if isinstance(state, tuple) else (state, state)
                want.append(state[0].numpy())
        np.testing.assert_allclose(_native_over_time(node, inits, x), np.stack(want), atol=3e-5)
    runner = OnnxRuntimeRunner(out)
    feeds = {n: rng.standard_normal((2, SIZE)).astype(np.float32) for n in names}
    got = runner(feeds)
    with torch.no_grad():
        want = model(*(torch.from_numpy(feeds[n]) for n in names))
    want = want if isinstance(want, tuple) else (want,)
    for name, w in zip(runner.output_names, want):
        np.testing.assert_allclose(got[name], w.numpy(), atol=3e-5)


def test_ambiguous_plain_rnn_step_left_alone_names_the_rule() -> None:
    """Two square maps, neither a graph input nor carried nor sliced: the pass says why it declines."""
    from rnnx.graphs.fuse_cells import fuse_cells

    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((SIZE, SIZE)).astype(np.float32), n) for n in ("W", "U")]
    vi = lambda n: helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, SIZE])  # noqa: E731
    nodes = [helper.make_node("Relu", ["a"], ["x"]), helper.make_node("Relu", ["b"], ["h"]),
             helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("MatMul", ["h", "U"], ["hu"]),
             helper.make_node("Add", ["xw", "hu"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [vi("a"), vi("b")], [vi("y")], inits))
    result = fuse_cells(model)
    (declined,) = result.left_alone
    assert not result and declined.rule == "rnn.state" and "cannot tell the input from the state" in declined.reason
