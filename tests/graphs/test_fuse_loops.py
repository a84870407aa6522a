"""rnnx fuse on Loops and Scans whose body is one recurrent step.

The Loop files are tf2onnx's own (tests/fixtures/wild, made by tools/wild_fixtures from Keras 3
models): each fused file must hold native nodes and no Loop, and must reproduce what Keras
itself recorded on the fixture's inputs, as well as the unfused file in ONNX Runtime at other
lengths and batches. The Scans are written by hand the way converters write them."""

from __future__ import annotations

import collections
import json
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_loops import fuse_loops
from rnnx.pipelines.fuse import fuse_file

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
# Loop fixtures: the native op each must become, how many Loops the file holds and how many
# native nodes replace them (a bidirectional layer's two Loops: one bidirectional node).
LOOPS = {"t2o_simplernn": ("RNN", 1, 1), "t2o_simplernn_relu": ("RNN", 1, 1), "t2o_gru_reset_after": ("GRU", 1, 1),
         "t2o_gru_reset_before": ("GRU", 1, 1), "t2o_gru_last": ("GRU", 1, 1), "t2o_gru_stack": ("GRU", 2, 2), "t2o_bigru": ("GRU", 2, 1),
         "t2o_gru_go_backwards": ("GRU", 1, 1), "t2o_gru_initial_state": ("GRU", 1, 1), "t2o_lstm_hard_sigmoid": ("LSTM", 1, 1)}


def _all_ops(model: onnx.ModelProto) -> collections.Counter:
    ops: collections.Counter = collections.Counter()
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for n in graph.node:
            ops[n.op_type] += 1
            stack += [a.g for a in n.attribute if a.type == a.GRAPH]
    return ops


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_tf2onnx_loop_becomes_native_node_matching_keras(tmp_path, name: str) -> None:
    src = WILD / f"{name}.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not made yet (tools/wild_fixtures)")
    manifest = json.loads((WILD / "manifest.json").read_text())[src.name]
    op, count, natives = LOOPS[name]
    assert _all_ops(onnx.load(str(src)))["Loop"] == count
    out = tmp_path / "fused.onnx"
    report = fuse_file(src, out)
    assert report.check and len(report.loops) == count and not report.left_alone, str(report)
    fused_model = onnx.load(str(out))
    ops = _all_ops(fused_model)
    assert ops[op] == natives and "Loop" not in ops and not {"Sigmoid", "Tanh", "MatMul"} & set(ops), ops
    directions = [helper.get_attribute_value(a) for n in fused_model.graph.node if n.op_type == op for a in n.attribute if a.name == "direction"]
    assert directions == ([b"bidirectional"] if name == "t2o_bigru" else [b"forward"] * natives)
    (node, *_) = [n for n in fused_model.graph.node if n.op_type == op]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if name == "t2o_lstm_hard_sigmoid":  # Keras 3's hard_sigmoid, relu6(x + 3) / 6, is ONNX's HardSigmoid(1/6, 0.5)
        assert attrs["activations"] == [b"HardSigmoid", b"Tanh", b"Tanh"]
        np.testing.assert_allclose([attrs["activation_alpha"][0], attrs["activation_beta"][0]], [1 / 6, 0.5], rtol=1e-6)
    else:
        assert attrs.get("activations") == ([b"Relu"] if name == "t2o_simplernn_relu" else None)
    fused, original = OnnxRuntimeRunner(out), OnnxRuntimeRunner(src)
    recorded = np.load(WILD / manifest["outputs"])
    names = manifest.get("inputs", {manifest["input_name"]: manifest["input_name"]})
    for batch in ("b1", "b3"):  # what Keras computed
        feeds = {graph_name: recorded[f"{key}_{batch}"] for key, graph_name in names.items()}
        got = fused(feeds)[manifest["output_name"]]
        np.testing.assert_allclose(got, recorded[f"y_{batch}"], atol=2e-5)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for B, T in ((1, 1), (2, 9), (1, 4)):  # batch-major, as Keras takes it
        feeds = {manifest["input_name"]: rng.standard_normal((B, T, manifest["input_size"])).astype(np.float32)}
        for key, graph_name in names.items():
            if graph_name not in feeds:  # an initial state, (batch, hidden)
                feeds[graph_name] = rng.standard_normal((B, recorded[f"{key}_b1"].shape[-1])).astype(np.float32)
        want = original(feeds)[manifest["output_name"]]
        np.testing.assert_allclose(fused(feeds)[manifest["output_name"]], want, atol=2e-5)


STEPS = {"t2o_lstm_cell_step": "LSTM", "t2o_gru_cell_step": "GRU", "t2o_simplernn_cell_step": "RNN"}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_tf2onnx_single_step_becomes_one_step_node_matching_keras(tmp_path, name: str) -> None:
    """A streaming model's one cell step, input size equal to hidden size: fused, with the state
    told from the input by structure (the node's initial_h reads h0, its X reads x)."""
    src = WILD / f"{name}.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not made yet (tools/wild_fixtures)")
    manifest = json.loads((WILD / "manifest.json").read_text())[src.name]
    out = tmp_path / "fused.onnx"
    report = fuse_file(src, out)
    assert report.check and len(report.cells) == 1 and not report.left_alone, str(report)
    before, after = onnx.load(str(src)).graph, onnx.load(str(out)).graph
    assert [i.name for i in after.input] == [i.name for i in before.input] and [o.name for o in after.output] == [o.name for o in before.output]
    (node,) = [n for n in after.node if n.op_type in ("LSTM", "GRU", "RNN")]
    assert node.op_type == STEPS[name] and not {"Sigmoid", "Tanh", "MatMul"} & {n.op_type for n in after.node}
    producers = {o: n for n in after.node for o in n.output}
    assert producers[node.input[0]].input[0] == manifest["inputs"]["x"] and producers[node.input[5]].input[0] == manifest["inputs"]["h0"]
    if node.op_type == "LSTM":
        assert producers[node.input[6]].input[0] == manifest["inputs"]["c0"]
    recorded = np.load(WILD / manifest["outputs"])
    runner = OnnxRuntimeRunner(out)
    for batch in ("b1", "b3"):
        got = runner({graph_name: recorded[f"{key}_{batch}"] for key, graph_name in manifest["inputs"].items()})
        for key, graph_name in manifest["output_names"].items():
            np.testing.assert_allclose(got[graph_name], recorded[f"{key}_{batch}"], atol=2e-5)


def _scan_rnn(direction: int, axis: int, relu: bool = False) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A Scan over ``tanh(x_t @ W + h @ R + b)`` whose weights live in the outer graph."""
    rng = np.random.default_rng(11 + direction + 2 * axis)
    I, H = 3, 4
    W, R, b = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((I, H), (H, H), (H,)))
    act = "Relu" if relu else "Tanh"
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "W"], ["xw"]), helper.make_node("MatMul", ["h", "R"], ["hr"]),
         helper.make_node("Add", ["xw", "b"], ["xwb"]), helper.make_node("Add", ["xwb", "hr"], ["pre"]),
         helper.make_node(act, ["pre"], ["h_new"]), helper.make_node("Identity", ["h_new"], ["y_t"])],
        "step", [vi("h", ["B", H]), vi("x_t", ["B", I])], [vi("h_new", ["B", H]), vi("y_t", ["B", H])])
    scan = helper.make_node("Scan", ["h0", "x"], ["h_last", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[direction], scan_output_directions=[direction],
                            scan_input_axes=[axis], scan_output_axes=[axis])
    seq = ["T", "B"] if axis == 0 else ["B", "T"]
    graph = helper.make_graph([scan], "scan_rnn", [vi("x", [*seq, I]), vi("h0", ["B", H])], [vi("h_last", ["B", H]), vi("ys", [*seq, H])],
                              [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (R, "R"), (b, "b"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"W": W, "R": R, "b": b}


@pytest.mark.parametrize("direction", [0, 1], ids=["forward", "reverse"])
@pytest.mark.parametrize("axis", [0, 1], ids=["time-major", "batch-major"])
def test_scan_over_one_rnn_step_becomes_native_node(tmp_path, direction: int, axis: int) -> None:
    model, weights = _scan_rnn(direction, axis)
    src, out = tmp_path / "scan.onnx", tmp_path / "fused.onnx"
    onnx.save(model, str(src))
    report = fuse_file(src, out)
    assert report.check and len(report.loops) == 1 and not report.left_alone, str(report)
    fused = onnx.load(str(out))
    (node,) = [n for n in fused.graph.node if n.op_type == "RNN"]
    assert "Scan" not in _all_ops(fused)
    assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "direction")) == (b"reverse" if direction else b"forward")
    runner = OnnxRuntimeRunner(out)
    rng = np.random.default_rng(zlib.crc32(f"scan-{direction}-{axis}".encode()))
    for T, B in ((1, 1), (6, 2), (3, 1)):
        x = rng.standard_normal((T, B, 3)).astype(np.float32)
        h0 = rng.standard_normal((B, 4)).astype(np.float32)
        h, ys = h0.astype(np.float64), [None] * T  # the recurrence itself, in float64
        for t in (reversed(range(T)) if direction else range(T)):
            h = np.tanh(x[t] @ weights["W"] + h @ weights["R"] + weights["b"])
            ys[t] = h
        feed = x if axis == 0 else x.transpose(1, 0, 2)
        got = runner({"x": feed, "h0": h0})
        np.testing.assert_allclose(got["h_last"], h, atol=2e-5)
        np.testing.assert_allclose(got["ys"], np.stack(ys) if axis == 0 else np.stack(ys).transpose(1, 0, 2), atol=2e-5)


def test_loop_whose_carried_value_changes_is_left_alone_with_the_rule(tmp_path) -> None:
    """A Scan that also accumulates a running sum of h is not one step: the report names why."""
    model, _ = _scan_rnn(0, 0)
    body = model.graph.node[0].attribute[0].g
    body.node.append(helper.make_node("Add", ["acc", "h_new"], ["acc_new"]))
    body.input.insert(1, helper.make_tensor_value_info("acc", TensorProto.FLOAT, ["B", 4]))
    body.output.insert(1, helper.make_tensor_value_info("acc_new", TensorProto.FLOAT, ["B", 4]))
    scan = model.graph.node[0]
    scan.input.insert(1, "h0")
    scan.output.insert(1, "acc_last")
    src = tmp_path / "scan.onnx"
    onnx.save(model, str(src))
    report = fuse_file(src, tmp_path / "fused.onnx")
    assert not report.loops and [d.rule for d in report.left_alone] == ["scan.state"], str(report)
    assert "left alone" in str(report) and "scan.state" in str(report)


def _scripted(kind: str):
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class ScriptedRNN(nn.Module):
        """A cell written by hand in a loop that torch.jit.script keeps a loop: torch.onnx writes a Loop."""

        def __init__(self) -> None:
            super().__init__()
            self.ih, self.hh = nn.Linear(4, 6), nn.Linear(6, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.size(1), 6)
            for t in range(x.size(0)):
                h = torch.tanh(self.ih(x[t]) + self.hh(h))
            return h

    class ScriptedLSTM(nn.Module):
        """chunk(4) in a scripted loop: the Slices' bounds are computed from the gates' shape."""

        def __init__(self) -> None:
            super().__init__()
            self.ih, self.hh = nn.Linear(4, 24), nn.Linear(6, 24)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.size(1), 6)
            c = torch.zeros(x.size(1), 6)
            for t in range(x.size(0)):
                i, f, g, o = (self.ih(x[t]) + self.hh(h)).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            return h

    class NotACell(ScriptedRNN):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.size(1), 6)
            for t in range(x.size(0)):
                h = torch.tanh(self.ih(x[t]) * self.hh(h))  # a product, not a sum: no RNN computes this
            return h

    torch.manual_seed(zlib.crc32(kind.encode()))
    return torch, torch.jit.script({"rnn": ScriptedRNN, "lstm": ScriptedLSTM, "other": NotACell}[kind]().eval())


def _export_scripted(torch, model, path: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(5, 2, 4),), str(path), dynamo=False, opset_version=17, input_names=["x"], output_names=["h"],
                          dynamic_axes={"x": {0: "seq", 1: "batch"}})


@pytest.mark.parametrize(("kind", "op"), [("rnn", "RNN"), ("lstm", "LSTM")])
def test_torch_scripted_loop_becomes_native_node_matching_torch(tmp_path, kind: str, op: str) -> None:
    torch, model = _scripted(kind)
    src, out = tmp_path / "loop.onnx", tmp_path / "fused.onnx"
    _export_scripted(torch, model, src)
    assert _all_ops(onnx.load(str(src)))["Loop"] == 1
    report = fuse_file(src, out)
    assert report.check and len(report.loops) == 1 and not report.left_alone, str(report)
    ops = _all_ops(onnx.load(str(out)))
    assert ops[op] == 1 and "Loop" not in ops
    runner = OnnxRuntimeRunner(out)
    rng = np.random.default_rng(5)
    for T, B in ((1, 1), (7, 3), (4, 1)):
        x = rng.standard_normal((T, B, 4)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(runner({"x": x})["h"], want, atol=3e-5)


def test_loop_over_an_unrecognised_body_is_named_not_silent(tmp_path) -> None:
    """A loop whose body is no cell stays, and the report says so with the rule."""
    torch, model = _scripted("other")
    src = tmp_path / "loop.onnx"
    _export_scripted(torch, model, src)
    report = fuse_file(src, tmp_path / "fused.onnx")
    assert not report.loops and [d.rule for d in report.left_alone] == ["loop.one_step"], str(report)
    assert "left alone" in str(report) and "loop.one_step" in str(report)


def test_loop_whose_trip_count_is_not_the_length_is_left_alone() -> None:
    """tf2onnx's SimpleRNN loop with its trip count replaced by a constant: the loop may stop
    early, so it is no recurrence over the whole sequence, and the rule says why."""
    src = WILD / "t2o_simplernn.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not made yet (tools/wild_fixtures)")
    model = onnx.load(str(src))
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    model.graph.initializer.append(numpy_helper.from_array(np.array(2, np.int64), "two_steps"))
    loop.input[0] = "two_steps"
    assert fuse_cells(model)  # the body's cell is still one step
    result = fuse_loops(model)
    assert not result and [d.rule for d in result.left_alone] == ["loop.trip_count"], result
    assert _all_ops(model)["Loop"] == 1


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


@pytest.mark.parametrize("order", ["ifgo", "zgate-first"])
def test_scan_over_one_lstm_step_carries_h_and_c(tmp_path, order: str) -> None:
    """An LSTM step in a Scan body, weights in the outer graph, gates stacked i,f,g,o or o,g,f,i:
    h and c are both carried, and the final c comes out of the native node's Y_c."""
    gates = "ifgo" if order == "ifgo" else "ogfi"
    rng = np.random.default_rng(zlib.crc32(order.encode()))
    I, H = 3, 4
    W, R, b = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((I, 4 * H), (H, 4 * H), (4 * H,)))
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    act = {"i": "Sigmoid", "f": "Sigmoid", "o": "Sigmoid", "g": "Tanh"}
    nodes = [helper.make_node("MatMul", ["x_t", "W"], ["xw"]), helper.make_node("MatMul", ["h", "R"], ["hr"]),
             helper.make_node("Add", ["xw", "hr"], ["s"]), helper.make_node("Add", ["s", "b"], ["pre"]),
             helper.make_node("Split", ["pre"], [f"p_{k}" for k in gates], axis=1)]
    nodes += [helper.make_node(act[k], [f"p_{k}"], [k]) for k in gates]
    nodes += [helper.make_node("Mul", ["f", "c"], ["fc"]), helper.make_node("Mul", ["i", "g"], ["ig"]),
              helper.make_node("Add", ["fc", "ig"], ["c_new"]), helper.make_node("Tanh", ["c_new"], ["tc"]),
              helper.make_node("Mul", ["o", "tc"], ["h_new"]), helper.make_node("Identity", ["h_new"], ["y_t"])]
    body = helper.make_graph(nodes, "step", [vi("h", ["B", H]), vi("c", ["B", H]), vi("x_t", ["B", I])],
                             [vi("h_new", ["B", H]), vi("c_new", ["B", H]), vi("y_t", ["B", H])])
    scan = helper.make_node("Scan", ["h0", "c0", "x"], ["h_last", "c_last", "ys"], body=body, num_scan_inputs=1)
    graph = helper.make_graph([scan], "scan_lstm", [vi("x", ["T", "B", I]), vi("h0", ["B", H]), vi("c0", ["B", H])],
                              [vi("h_last", ["B", H]), vi("c_last", ["B", H]), vi("ys", ["T", "B", H])],
                              [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (R, "R"), (b, "b"))])
    src, out = tmp_path / "scan.onnx", tmp_path / "fused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    report = fuse_file(src, out)
    assert report.check and len(report.loops) == 1 and not report.left_alone, str(report)
    ops = _all_ops(onnx.load(str(out)))
    assert ops["LSTM"] == 1 and "Scan" not in ops
    runner = OnnxRuntimeRunner(out)
    for T, B in ((1, 1), (6, 2), (3, 1)):
        x = rng.standard_normal((T, B, I)).astype(np.float32)
        h0, c0 = (rng.standard_normal((B, H)).astype(np.float32) for _ in range(2))
        h, c, ys = h0.astype(np.float64), c0.astype(np.float64), []
        for t in range(T):  # the recurrence itself, in float64, gates cut in the file's order
            parts = dict(zip(gates, np.split(x[t] @ W + h @ R + b, 4, axis=1)))
            c = _sigmoid(parts["f"]) * c + _sigmoid(parts["i"]) * np.tanh(parts["g"])
            h = _sigmoid(parts["o"]) * np.tanh(c)
            ys.append(h)
        got = runner({"x": x, "h0": h0, "c0": c0})
        np.testing.assert_allclose(got["h_last"], h, atol=2e-5)
        np.testing.assert_allclose(got["c_last"], c, atol=2e-5)
        np.testing.assert_allclose(got["ys"], np.stack(ys), atol=2e-5)
