"""The onnx format, pinned by ONNX Runtime and by torch.onnx's own exports."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, parity
from rnnx.check import stack
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.reference import ReferenceRunner
from rnnx.formats.onnx_build import build_stack_model
from tests.helpers import SHAPES

ATOL = 2e-5  # ONNX Runtime float32 against the float64 reference

ONNX_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5",
        "lstm,input=4,hidden=6,layers=2,bidirectional",
        "lstm,input=3,hidden=4,reverse,peepholes",
        "lstm,input=3,hidden=4,layers=2,bidirectional,peepholes,no_bias",
        "gru,input=3,hidden=5,layers=2",
        "gru,input=3,hidden=5,bidirectional,reset_before",
        "gru,input=4,hidden=3,reverse,no_bias",
        "rnn_tanh,input=3,hidden=4,layers=2,bidirectional",
        "rnn_relu,input=4,hidden=5,reverse",
    )
]


@pytest.mark.parametrize("spec", ONNX_SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_onnx_runtime_matches_reference(spec: RNNSpec, ragged: bool) -> None:
    weights = RNNWeights.random(spec, seed=7, scale=0.8)
    runner = OnnxRuntimeRunner(build_stack_model(weights, sequence_lens=ragged))
    report = stack.check("onnxruntime", runner, weights, shapes=SHAPES, ragged=ragged)
    assert report, str(report)
    assert report.worst().max_abs < ATOL


@pytest.mark.parametrize("spec", ONNX_SPECS[1::4], ids=str)
def test_batch_first_and_opsets(spec: RNNSpec) -> None:
    weights = RNNWeights.random(spec, seed=3)
    for opset in (14, 17, 21):
        model = build_stack_model(weights, opset=opset, batch_first=True)
        assert model.opset_import[0].version == opset
        assert stack.check("onnxruntime", OnnxRuntimeRunner(model), weights, batch_first=True)


def test_wrong_gate_order_fails_parity() -> None:
    """The ONNX check can fail: swap ONNX's o and f blocks and parity breaks."""
    spec = RNNSpec.parse("lstm,input=3,hidden=4")
    weights = RNNWeights.random(spec, seed=0, scale=1.0)
    model = build_stack_model(weights)
    for init in model.graph.initializer:
        if init.name in ("l0_W", "l0_R"):
            a = numpy_helper.to_array(init).copy()
            i, o, f, c = np.split(a, 4, axis=1)
            init.CopyFrom(numpy_helper.from_array(np.concatenate([i, f, o, c], axis=1), init.name))
    assert not stack.check("onnxruntime", OnnxRuntimeRunner(model), weights)


@pytest.mark.parametrize("spec", ONNX_SPECS, ids=str)
def test_native_round_trip_bit_exact(spec: RNNSpec) -> None:
    weights = RNNWeights.random(spec, seed=5)
    nodes = rnnx.to_format(weights, "onnx")
    assert len(nodes) == spec.num_layers
    assert rnnx.from_format(nodes, "onnx").equal(weights)


def test_file_round_trip_finds_the_stack(tmp_path) -> None:
    spec = RNNSpec.parse("gru,input=3,hidden=5,layers=3,bidirectional,reset_before")
    weights = RNNWeights.random(spec, seed=1)
    path = tmp_path / "m.onnx"
    rnnx.save(weights, path)
    assert rnnx.groups(path) == ["GRU_l0"]
    assert rnnx.load(path).equal(weights)
    one = rnnx.load(path, select="GRU_l1")  # a single node of the stack
    assert one.spec == RNNSpec.parse("gru,input=10,hidden=5,bidirectional,reset_before")
    np.testing.assert_array_equal(one["l0.reverse.R.z"], weights["l1.reverse.R.z"])


def _torch_export(module, x, dynamo: bool, path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=dynamo, opset_version=17, verbose=False)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_torch_onnx_exports_read_back_as_torch_weights(tmp_path, kind: str, dynamo: bool) -> None:
    """torch.onnx maps torch's gate order onto ONNX's itself; reading its file must give torch's weights."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
    module = cls(3, 4, num_layers=2, bidirectional=True).eval()
    path = tmp_path / f"{kind}.onnx"
    _torch_export(module, torch.randn(5, 2, 3), dynamo, path)
    if kind == "rnn" and dynamo:
        # torch.onnx's dynamo exporter unrolls nn.RNN into MatMul/Tanh: no native node to read (rnnx fuse's job).
        with pytest.raises(RNNXError, match="expected an LSTM, GRU or RNN node, found none"):
            rnnx.load(path)
        return
    spec = "rnn_tanh,input=3,hidden=4,layers=2,bidirectional" if kind == "rnn" else None
    expected = rnnx.from_format(module.state_dict(), "torch", spec=spec)
    got = rnnx.load(path)
    assert got.spec == expected.spec
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def _layout1_model(weights: RNNWeights) -> onnx.ModelProto:
    (node_w,) = rnnx.to_format(weights, "onnx")
    inits = [numpy_helper.from_array(node_w[k], k) for k in ("W", "R", "B")]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], hidden_size=weights.spec.hidden_size, layout=1, name="lstm_bf")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["b", "t", weights.spec.input_size])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_layout_1_nodes_are_read(tmp_path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=4)
    path = tmp_path / "layout1.onnx"
    onnx.save(_layout1_model(weights), str(path))
    assert rnnx.load(path).equal(weights)


def test_nodes_inside_subgraphs_and_constants_are_found(tmp_path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3"), seed=9)
    (n,) = rnnx.to_format(weights, "onnx")
    consts = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(n[k], k)) for k in ("W", "R", "B")]
    gru = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], hidden_size=3, linear_before_reset=1, name="inner_gru")
    then = helper.make_graph(consts + [gru], "then", [], [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["X"], ["Y2"])], "else", [], [helper.make_tensor_value_info("Y2", onnx.TensorProto.FLOAT, None)])
    cond = helper.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [cond], "g",
        [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []), helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [4, 1, 2])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)],
    )
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert rnnx.load(path).equal(weights)


def test_weights_from_graph_inputs_are_refused(tmp_path) -> None:
    node = helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=2, name="rnn_in")
    vi = lambda n, s: helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)  # noqa: E731
    graph = helper.make_graph([node], "g", [vi("X", [1, 1, 2]), vi("W", [1, 2, 2]), vi("R", [1, 2, 2])], [vi("Y", None)])
    path = tmp_path / "inputs.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(RNNXError, match="W comes from graph input"):
        rnnx.load(path)


def test_activation_attributes_are_read_into_the_spec() -> None:
    """clip, input_forget and activations are held by the spec (once refused); what the spec
    cannot hold still is: per-direction lists that differ, names ONNX does not define."""
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=2,hidden=2"))
    (node,) = rnnx.to_format(weights, "onnx")
    assert rnnx.from_format([{**node, "clip": 3.0}], "onnx").spec.clip == 3.0
    assert rnnx.from_format([{**node, "input_forget": 1}], "onnx").spec.input_forget
    read = rnnx.from_format([{**node, "activations": ["Sigmoid", "Relu", "Tanh"]}], "onnx")
    assert str(read.spec) == "lstm,input=2,hidden=2,act=Sigmoid/Relu/Tanh"
    with pytest.raises(RNNXError, match="activation 'Swish' is not one of ONNX's"):
        rnnx.from_format([{**node, "activations": ["Sigmoid", "Swish", "Tanh"]}], "onnx")


def test_bare_onnx_weights_refuse_a_projection() -> None:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=2,hidden=4,proj=2"))
    with pytest.raises(RNNXError, match="no projection"):
        rnnx.to_format(weights, "onnx")


PROJ_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5,proj=2",
        "lstm,input=4,hidden=6,layers=2,bidirectional,proj=3",
        "lstm,input=3,hidden=4,layers=2,reverse,proj=2,no_bias,peepholes",
    )
]


@pytest.mark.parametrize("spec", PROJ_SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_projection_lowered_to_scan_matches_reference(spec: RNNSpec, ragged: bool, tmp_path) -> None:
    weights = RNNWeights.random(spec, seed=12, scale=0.8)
    model = build_stack_model(weights, sequence_lens=ragged)
    ops = {n.op_type for n in model.graph.node}
    assert "Scan" in ops and "LSTM" not in ops and not any(n.domain for n in model.graph.node)
    assert sum(n.op_type == "Scan" for n in model.graph.node) == spec.num_layers * spec.num_directions
    report = stack.check("onnxruntime", OnnxRuntimeRunner(model), weights, shapes=SHAPES, ragged=ragged)
    assert report, str(report)
    path = tmp_path / "proj.onnx"
    rnnx.save(weights, path)
    proto = onnx.load(str(path))
    read_by = {i for n in proto.graph.node for i in n.input}
    assert all(i.name in read_by for i in proto.graph.initializer), "every stored weight is read by the graph (none kept twice)"
    back = rnnx.load(path)  # read back from the Scans' constants through the lowering record
    assert back.spec == weights.spec
    for name, value in weights.tensors.items():
        if not name.split(".")[-2].startswith("b"):  # matrices, peepholes, projections: exactly as written
            assert np.array_equal(back.tensors[name], value), name
    # The Scan adds each gate's two biases once, so they come back summed: the same outputs.
    same = stack.check("reference", ReferenceRunner(back), weights, shapes=SHAPES, ragged=ragged)
    assert same, str(same)


def test_projection_lowering_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.LSTM(5, 8, num_layers=2, bidirectional=True, proj_size=3).eval()
    weights = rnnx.from_format(module.state_dict(), "torch")
    runner = OnnxRuntimeRunner(build_stack_model(weights))
    inputs = parity.random_inputs(weights, 12, 4, seed=1)
    with torch.no_grad():
        y, (h, c) = module(torch.from_numpy(inputs["X"]), (torch.from_numpy(inputs["h0"]), torch.from_numpy(inputs["c0"])))
    got = runner(inputs)
    for name, want in (("Y", y), ("h_n", h), ("c_n", c)):
        np.testing.assert_allclose(got[name], want.numpy(), atol=3e-5, err_msg=name)


def test_several_stacks_need_select(tmp_path) -> None:
    a = _layout1_model(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=1))
    b = build_stack_model(RNNWeights.random(RNNSpec.parse("rnn_relu,input=2,hidden=2"), seed=2))
    a.graph.node.extend(b.graph.node)
    a.graph.initializer.extend(b.graph.initializer)
    path = tmp_path / "two.onnx"
    onnx.save(a, str(path))
    with pytest.raises(RNNXError, match=r"2 recurrent stacks \(lstm_bf \(1 x LSTM\); RNN_l0 \(1 x RNN\)\); pass select="):
        rnnx.load(path)
    assert rnnx.load(path, select="RNN_l0").spec.cell == "rnn_relu"
