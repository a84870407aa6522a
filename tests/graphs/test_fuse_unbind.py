"""rnnx fuse on cells looped over ``x.unbind(0)`` (torch.onnx's exporters slice each step by Split
or Slice, then Squeeze) and on hand-unrolled plain RNNs whose input size equals the hidden size."""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from rnnx.graphs.fuse_cells import fuse_cells  # noqa: E402
from rnnx.graphs.fuse_steps import fuse_steps  # noqa: E402

I, H = 4, 6
SHAPES = [(1, 1), (3, 1), (5, 2), (7, 3)]  # (T, B)


def _rng(tag: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(tag.encode()))


class _Unbind(torch.nn.Module):
    def __init__(self, cell: torch.nn.Module) -> None:
        super().__init__()
        self.cell = cell

    def forward(self, x, h):
        ys = []
        for xt in x.unbind(0):
            h = self.cell(xt, h)
            ys.append(h)
        return torch.stack(ys), h


class _UnbindLSTM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(I, H)

    def forward(self, x, h, c):
        ys = []
        for xt in x.unbind(0):
            h, c = self.cell(xt, (h, c))
            ys.append(h)
        return torch.stack(ys), h, c


def _module(kind: str) -> torch.nn.Module:
    torch.manual_seed(zlib.crc32(kind.encode()))
    cells = {"gru": lambda: _Unbind(torch.nn.GRUCell(I, H)), "rnn": lambda: _Unbind(torch.nn.RNNCell(I, H)),
             "rnn_relu": lambda: _Unbind(torch.nn.RNNCell(I, H, nonlinearity="relu")), "lstm": _UnbindLSTM}
    return cells[kind]().eval()


def _export(module: torch.nn.Module, kind: str, dynamo: bool, opset: int, path: str, T: int = 5) -> None:
    args = [torch.randn(T, 2, I), torch.zeros(2, H)] + ([torch.zeros(2, H)] if kind == "lstm" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = ["x", "h0", "c0"][: len(args)]
        axes = {"x": {1: "batch"}} | {n: {0: "batch"} for n in names[1:]}
        torch.onnx.export(module, tuple(args), path, dynamo=dynamo, opset_version=opset, input_names=names, dynamic_axes=axes)


def _run(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("kind", ["gru", "rnn", "rnn_relu", "lstm"])
@pytest.mark.parametrize("dynamo,opset", [(False, 17), (False, 18), (True, 18)])
def test_unbind_loop_becomes_one_native_node(tmp_path, kind, dynamo, opset):
    module = _module(kind)
    path = str(tmp_path / "m.onnx")
    _export(module, kind, dynamo, opset, path)
    original = onnx.load(path)
    ops = [n.op_type for n in original.graph.node]
    assert ("Slice" if dynamo else "Split") in ops  # the form this exporter writes unbind in
    fused = onnx.load(path)
    cells = fuse_cells(fused)
    steps = fuse_steps(fused)
    assert len(cells.rewritten) == 5 and not cells.left_alone
    assert len(steps.rewritten) == 1 and not steps.left_alone, steps.left_alone
    native = {"gru": "GRU", "rnn": "RNN", "rnn_relu": "RNN", "lstm": "LSTM"}[kind]
    fused_ops = [n.op_type for n in fused.graph.node]
    assert fused_ops.count(native) == 1
    assert not {"Tanh", "Sigmoid", "Relu", "Gemm", "MatMul", "Split", "Slice"} & set(fused_ops)
    names = [i.name for i in fused.graph.input]
    for T, B in [(5, 1), (5, 3)] + [(t, b) for t, b in SHAPES if t != 5]:
        rng = _rng(f"{kind}-{dynamo}-{opset}-{T}-{B}")
        arrays = [rng.standard_normal((T, B, I)).astype(np.float32)] + [rng.standard_normal((B, H)).astype(np.float32) for _ in names[1:]]
        with torch.no_grad():
            want = [t.numpy() for t in module(*(torch.from_numpy(a) for a in arrays))]
        got = _run(fused, dict(zip(names, arrays)))
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        if T == 5:  # the export holds 5 steps; the fused node runs any length
            for w, g in zip(want, _run(original, dict(zip(names, arrays)))):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class _RNNReluUnrolled(torch.nn.Module):
    """A plain relu RNN as published code writes it: two Linears, the input and hidden sizes equal."""

    def __init__(self) -> None:
        super().__init__()
        self.i2h = torch.nn.Linear(H, H)
        self.h2h = torch.nn.Linear(H, H)

    def forward(self, x, h):
        outs = []
        for t in range(x.shape[0]):
            h = torch.relu(self.i2h(x[t]) + self.h2h(h))
            outs.append(h)
        return torch.stack(outs), h


def _hand_unrolled(T: int, form: str = "split", sliced: bool = True, extra: int = 0):
    """A relu RNN, input size = hidden size, unrolled by hand as ONNX nodes: steps read Squeeze(Split(X))
    (``form`` split: num_outputs; split_sizes: sizes as an input), SequenceAt(SplitToSequence(X)) (sequence),
    or separate graph inputs x0..x{T-1} (``sliced`` False); ``extra`` more parts of X that no step reads."""
    from onnx import TensorProto, helper, numpy_helper

    rng = _rng(f"hand-{T}-{form}-{sliced}")
    Wx, Wh = (rng.standard_normal((H, H)) * 0.5).astype(np.float32), (rng.standard_normal((H, H)) * 0.5).astype(np.float32)
    b = (rng.standard_normal(H) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(v, k) for k, v in (("Wx", Wx), ("Wh", Wh), ("b", b), ("ax0", np.array([0], np.int64)))]
    nodes, inputs = [], [helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["batch", H])]
    if sliced:
        parts = T + extra
        if form == "sequence":
            nodes.append(helper.make_node("SplitToSequence", ["X"], ["xseq"], axis=0, keepdims=0))
            for t in range(T):
                inits.append(numpy_helper.from_array(np.array(t, np.int64), f"t{t}"))
                nodes.append(helper.make_node("SequenceAt", ["xseq", f"t{t}"], [f"x{t}"]))
        else:
            if form == "split_sizes":
                inits.append(numpy_helper.from_array(np.ones(parts, np.int64), "sizes"))
                nodes.append(helper.make_node("Split", ["X", "sizes"], [f"xs{t}" for t in range(parts)], axis=0))
            else:
                nodes.append(helper.make_node("Split", ["X"], [f"xs{t}" for t in range(parts)], axis=0, num_outputs=parts))
            nodes += [helper.make_node("Squeeze", [f"xs{t}", "ax0"], [f"x{t}"]) for t in range(T)]
        inputs.insert(0, helper.make_tensor_value_info("X", TensorProto.FLOAT, [parts if form != "sequence" else "seq", "batch", H]))
    else:
        inputs = [helper.make_tensor_value_info(f"x{t}", TensorProto.FLOAT, ["batch", H]) for t in range(T)] + inputs
    prev, outs = "h0", []
    for t in range(T):
        nodes += [helper.make_node("MatMul", [f"x{t}", "Wx"], [f"a{t}"]), helper.make_node("MatMul", [prev, "Wh"], [f"r{t}"]),
                  helper.make_node("Add", [f"a{t}", f"r{t}"], [f"s{t}"]), helper.make_node("Add", [f"s{t}", "b"], [f"p{t}"]),
                  helper.make_node("Relu", [f"p{t}"], [f"hh{t}"]), helper.make_node("Unsqueeze", [f"hh{t}", "ax0"], [f"hu{t}"])]
        prev = f"hh{t}"
        outs.append(f"hu{t}")
    nodes.append(helper.make_node("Concat", outs, ["Y"], axis=0))
    graph = helper.make_graph(nodes, "rnn_unrolled", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [T, "batch", H]),
                                                             helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model, (Wx, Wh, b)


def _relu_rnn(x: np.ndarray, h: np.ndarray, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float64 recurrence that the hand-unrolled graph spells out."""
    ys = []
    h = h.astype(np.float64)
    for xt in x.astype(np.float64):
        h = np.maximum(xt @ Wx + h @ Wh + b, 0)
        ys.append(h)
    return np.stack(ys), h


@pytest.mark.parametrize("form", ["split", "split_sizes", "sequence"])
@pytest.mark.parametrize("T", [2, 5])
def test_hand_unrolled_relu_rnn_input_equal_hidden_fuses(T, form):
    original, (Wx, Wh, b) = _hand_unrolled(T, form)
    fused = onnx.load_from_string(original.SerializeToString())
    cells = fuse_cells(fused)
    assert len(cells.rewritten) == T and not cells.left_alone, cells.left_alone
    steps = fuse_steps(fused)
    assert len(steps.rewritten) == 1 and not steps.left_alone
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("RNN") == 1 and "Relu" not in ops and "MatMul" not in ops
    rnn = next(n for n in fused.graph.node if n.op_type == "RNN")
    assert [onnx.helper.get_attribute_value(a) for a in rnn.attribute if a.name == "activations"] == [[b"Relu"]]
    for B in (1, 4):
        rng = _rng(f"hand-run-{T}-{B}")
        x, h0 = rng.standard_normal((T, B, H)).astype(np.float32), rng.standard_normal((B, H)).astype(np.float32)
        want = _relu_rnn(x, h0, Wx, Wh, b)
        for model in (original, fused):
            for w, g in zip(want, _run(model, {"X": x, "h0": h0})):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_torch_unrolled_relu_rnn_input_equal_hidden_fuses(tmp_path):
    module = _RNNReluUnrolled().eval()
    torch.manual_seed(zlib.crc32(b"torch-unrolled"))
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.5)
    path = str(tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(4, 2, H), torch.randn(2, H)), path, dynamo=False, opset_version=17,
                          input_names=["x", "h0"], dynamic_axes={"x": {1: "batch"}, "h0": {0: "batch"}})
    fused = onnx.load(path)
    assert not fuse_cells(fused).left_alone
    assert len(fuse_steps(fused).rewritten) == 1
    assert [n.op_type for n in fused.graph.node].count("RNN") == 1
    names = [i.name for i in fused.graph.input]
    for T, B in [(4, 1), (6, 3)]:
        rng = _rng(f"torch-unrolled-{T}-{B}")
        x, h0 = rng.standard_normal((T, B, H)).astype(np.float32), rng.standard_normal((B, H)).astype(np.float32)
        with torch.no_grad():
            want = [t.numpy() for t in module(torch.from_numpy(x), torch.from_numpy(h0))]
        for w, g in zip(want, _run(fused, dict(zip(names, [x, h0])))):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_steps_fed_separate_inputs_tell_state_by_the_chain_and_say_why_they_stay_apart():
    T = 3
    original, (Wx, Wh, b) = _hand_unrolled(T, sliced=False)
    fused = onnx.load_from_string(original.SerializeToString())
    cells = fuse_cells(fused)
    assert len(cells.rewritten) == T and not cells.left_alone, cells.left_alone
    steps = fuse_steps(fused)
    assert not steps.rewritten
    (why,) = steps.left_alone
    assert why.rule == "steps.sliced_input" and "'x0', a graph input" in why.reason and "autoregressive" not in why.reason
    rng = _rng("separate-inputs")
    xs = rng.standard_normal((T, 2, H)).astype(np.float32)
    h0 = rng.standard_normal((2, H)).astype(np.float32)
    want = _relu_rnn(xs, h0, Wx, Wh, b)
    feeds = {f"x{t}": xs[t] for t in range(T)} | {"h0": h0}
    for model in (original, fused):
        got = _run(model, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_steps_over_part_of_a_split_stay_apart():
    original, (Wx, Wh, b) = _hand_unrolled(3, extra=2)  # X holds 5 steps; the chain reads the first 3
    fused = onnx.load_from_string(original.SerializeToString())
    assert len(fuse_cells(fused).rewritten) == 3
    steps = fuse_steps(fused)
    assert not steps.rewritten and [d.rule for d in steps.left_alone] == ["steps.in_order"]
    rng = _rng("part-of-split")
    x, h0 = rng.standard_normal((5, 2, H)).astype(np.float32), rng.standard_normal((2, H)).astype(np.float32)
    want = _relu_rnn(x[:3], h0, Wx, Wh, b)
    for w, g in zip(want, _run(fused, {"X": x, "h0": h0})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class _ZeroStart(torch.nn.Module):
    """A cell over ``x.unbind(dim)`` from a zero state made inside forward (which the dynamo
    exporter folds into the first step); dim 1 is batch-first."""

    def __init__(self, cell: torch.nn.Module, dim: int) -> None:
        super().__init__()
        self.cell, self.dim = cell, dim

    def forward(self, x):
        h = x.new_zeros(x.shape[1 - self.dim], H)
        ys = []
        for xt in x.unbind(self.dim):
            h = self.cell(xt, h)
            ys.append(h)
        return torch.stack(ys, self.dim), h


@pytest.mark.parametrize("kind", ["rnn_eq", "gru"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dynamo", [False, True])
def test_unbind_from_a_zero_state_time_major_or_batch_first(tmp_path, kind, dim, dynamo):
    torch.manual_seed(zlib.crc32(f"zero-{kind}".encode()))
    cell = torch.nn.RNNCell(H, H) if kind == "rnn_eq" else torch.nn.GRUCell(I, H)  # rnn_eq: input size = hidden size
    module = _ZeroStart(cell, dim).eval()
    width = H if kind == "rnn_eq" else I
    path = str(tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(5, 2, width).transpose(0, dim).contiguous(),), path, dynamo=dynamo, opset_version=18,
                          input_names=["x"], dynamic_axes={"x": {1 - dim: "batch"}})
    fused = onnx.load(path)
    assert len(fuse_cells(fused).rewritten) == 5
    steps = fuse_steps(fused)
    assert len(steps.rewritten) == 1 and not steps.left_alone, steps.left_alone
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("GRU" if kind == "gru" else "RNN") == 1 and "Tanh" not in ops
    for T, B in [(5, 1), (2, 3), (8, 2)]:
        rng = _rng(f"zero-{kind}-{dim}-{dynamo}-{T}-{B}")
        x = rng.standard_normal((T, B, width)).astype(np.float32).transpose(dim, 1 - dim, 2).copy()
        with torch.no_grad():
            want = [t.numpy() for t in module(torch.from_numpy(x))]
        for w, g in zip(want, _run(fused, {"x": x})):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
