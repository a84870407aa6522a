"""Activations, clip and input_forget in ONNX files, pinned by ONNX Runtime and by ONNX's
own node tests.

ONNX's node tests hold no LSTM, GRU or RNN case with activations, clip or input_forget
(onnx/backend/test/case/node/{lstm,gru,rnn}.py: defaults, biases, peepholes, sequence
lengths, layout, reverse, bidirectional), so those are pinned by ONNX Runtime's kernels,
which implement every function ONNX lists for all three ops, and the node tests pin
everything else after reading and after ``convert --to onnx``.
"""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, reference
from rnnx.check import stack
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats import registry
from rnnx.formats.onnx_build import build_stack_model
from rnnx.layouts.onnx import node_activations
from rnnx.pipelines.convert import convert
from rnnx.spec import ACTIVATION_PARAMETERS, DEFAULT_ACTIVATIONS, Activation
from tests.helpers import SHAPES

ATOL = 2e-5  # ONNX Runtime float32 against the float64 reference

ACTIVATION_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5,act=HardSigmoid:0.2:0.5/Tanh/Tanh",  # Keras 2's recurrent activation
        "lstm,input=3,hidden=5,act=HardSigmoid:0.16666667:0.5/Tanh/Tanh",  # Keras 3's
        "lstm,input=3,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1/ScaledTanh:1.5:0.7,clip=0.5",
        "lstm,input=4,hidden=5,layers=2,peepholes,act=Sigmoid/Relu/Elu:0.8,input_forget",
        "lstm,input=3,hidden=4,act=Affine:0.3:0.4/ThresholdedRelu:0.1/Softsign,clip=0.7",
        "lstm,input=3,hidden=4,reverse,no_bias,act=Softplus/Softsign/Tanh,clip=0.3",
        "gru,input=3,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1,clip=0.6",
        "gru,input=3,hidden=5,reset_before,act=Sigmoid/ScaledTanh:1.5:0.7,clip=0.4",
        "gru,input=3,hidden=4,layers=2,act=Affine:0.1:0.5/Elu:0.5",
        "rnn_tanh,input=3,hidden=5,act=LeakyRelu:0.1,clip=0.5",
        "rnn_tanh,input=3,hidden=5,bidirectional,act=HardSigmoid:0.3:0.4",
        "rnn_tanh,input=3,hidden=4,reverse,act=ScaledTanh:1.5:0.7",
        "rnn_tanh,input=3,hidden=4,act=Softplus",
        "rnn_tanh,input=3,hidden=4,layers=2,act=ThresholdedRelu:0.2",
        "rnn_relu,input=3,hidden=5,layers=2,clip=0.5",
    )
]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


@pytest.mark.parametrize("spec", ACTIVATION_SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_onnx_runtime_computes_what_the_reference_does(spec: RNNSpec, ragged: bool) -> None:
    weights = RNNWeights.random(spec, seed=_seed(str(spec)), scale=0.8)
    model = build_stack_model(weights, sequence_lens=ragged)
    report = stack.check("onnxruntime", OnnxRuntimeRunner(model), weights, shapes=SHAPES, ragged=ragged)
    assert report, str(report)
    assert report.worst().max_abs < ATOL
    # and the file reads back as the same spec and tensors
    back = rnnx.from_format([n for n in _node_dicts(model)], "onnx")
    assert back.spec == spec
    assert all(np.array_equal(back.tensors[k], weights.tensors[k].astype(np.float32)) for k in weights.tensors)


def _node_dicts(model: Any) -> list[dict[str, Any]]:
    from rnnx.formats.onnx_read import recurrent_groups

    (group,) = recurrent_groups(model)
    return group.layer_dicts()


def _with_parameters(name: str) -> str:
    """``name`` with values for the parameters it takes (none of them ONNX's defaults)."""
    values = {"alpha": "0.7", "beta": "0.3"}
    return ":".join([name, *(values[p] for p, _ in ACTIVATION_PARAMETERS[name])])


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("name", sorted(ACTIVATION_PARAMETERS))
def test_onnx_runtime_runs_every_function_in_every_slot(cell: str, name: str) -> None:
    """ONNX Runtime's CPU kernels implement all eleven of ONNX's functions for LSTM, GRU and
    RNN alike: each one, in every slot at once, matches the reference. The clip keeps unbounded
    gates (Softplus, Relu as a GRU's z) from growing the state until ONNX Runtime's float32
    Softplus, log(1 + exp(x)), overflows to inf past x = 88 where the reference's does not."""
    slots = len(DEFAULT_ACTIVATIONS[cell])
    spec = RNNSpec.parse(f"{cell},input=3,hidden=4,bidirectional,clip=4,act=" + "/".join([_with_parameters(name)] * slots))
    weights = RNNWeights.random(spec, seed=_seed(str(spec)), scale=0.6)
    report = stack.check("onnxruntime", OnnxRuntimeRunner(build_stack_model(weights)), weights, shapes=[(1, 1), (6, 3)])
    assert report, str(report)


# Each change of a spec that ONNX Runtime must notice: the test of the test.
MUTATIONS = [
    ("lstm,input=3,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1/ScaledTanh:1.5:0.7,clip=0.5", {"clip": 0.0}),
    ("lstm,input=3,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1/ScaledTanh:1.5:0.7,clip=0.5",
     {"activations": (Activation("HardSigmoid", 0.2, 0.5), Activation("ScaledTanh", 1.5, 0.7), Activation("LeakyRelu", 0.1))}),
    ("lstm,input=3,hidden=5,act=HardSigmoid:0.2:0.5/Tanh/Tanh", {"activations": (Activation("HardSigmoid", 1 / 6, 0.5), Activation("Tanh"), Activation("Tanh"))}),
    ("lstm,input=4,hidden=5,layers=2,peepholes,act=Sigmoid/Relu/Elu:0.8,input_forget", {"input_forget": False}),
    ("gru,input=3,hidden=5,reset_before,act=Sigmoid/ScaledTanh:1.5:0.7,clip=0.4", {"clip": 0.8}),
    ("gru,input=3,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1,clip=0.6", {"activations": (Activation("HardSigmoid", 0.2, 0.5), Activation("LeakyRelu", 0.3))}),
    ("rnn_tanh,input=3,hidden=5,act=LeakyRelu:0.1,clip=0.5", {"clip": 0.0}),
    ("rnn_relu,input=3,hidden=5,layers=2,clip=0.5", {"clip": 0.0}),
]


@pytest.mark.parametrize(("text", "change"), MUTATIONS, ids=lambda v: str(v)[:60])
def test_a_changed_activation_clip_or_input_forget_fails_parity(text: str, change: dict[str, Any]) -> None:
    spec = RNNSpec.parse(text)
    weights = RNNWeights.random(spec, seed=_seed(text), scale=1.5)
    runner = OnnxRuntimeRunner(build_stack_model(weights))
    changed = RNNWeights(spec.with_(**change), weights.tensors)
    report = stack.check("onnxruntime", runner, changed, shapes=[(1, 1), (12, 4)])
    assert not report and report.worst().max_abs > 1e-3, str(report)


def test_clip_bounds_gate_pre_activations_not_the_cell_state() -> None:
    """ONNX Runtime clips each gate's input and leaves c(t) unclipped before h: a reference
    that also clipped c (one reading of "applied to the input of activations") fails."""
    spec = RNNSpec.parse("lstm,input=3,hidden=5,act=Sigmoid/Relu/Tanh,clip=0.4")
    weights = RNNWeights.random(spec, seed=11, scale=1.5)
    runner = OnnxRuntimeRunner(build_stack_model(weights))
    x = np.random.default_rng(5).standard_normal((20, 3, 3))
    out = runner({"X": x.astype(np.float32), "h0": np.zeros((1, 3, 5), np.float32), "c0": np.zeros((1, 3, 5), np.float32)})
    ref = reference.forward(weights, x)
    assert np.abs(ref.c_n).max() > 0.4  # the cell state does leave [-clip, clip]
    np.testing.assert_allclose(out["c_n"], ref.c_n, atol=ATOL)
    np.testing.assert_allclose(out["Y"], ref.y, atol=ATOL)


def test_convert_writes_activations_and_checks_them(tmp_path: Path) -> None:
    spec = RNNSpec.parse("gru,input=3,hidden=4,bidirectional,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1,clip=2.5")
    weights = RNNWeights.random(spec, seed=2)
    rnnx.save(weights, tmp_path / "w.safetensors")
    result = convert(tmp_path / "w.safetensors", tmp_path / "w.onnx")
    assert result.written and result.report
    (node,) = [n for n in onnx.load(str(tmp_path / "w.onnx")).graph.node if n.op_type == "GRU"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["activations"] == [b"HardSigmoid", b"LeakyRelu"] * 2
    assert np.allclose(attrs["activation_alpha"], [0.2, 0.1] * 2) and np.allclose(attrs["activation_beta"], [0.5] * 2)
    assert attrs["clip"] == pytest.approx(2.5)
    assert rnnx.load(tmp_path / "w.onnx").spec == spec


@pytest.mark.parametrize("target", ["torch", "cudnn", "jax", "keras"])
def test_formats_without_activations_refuse_naming_them(target: str) -> None:
    spec = RNNSpec.parse("lstm,input=3,hidden=4,bidirectional,act=HardSigmoid:0.2:0.5/Tanh/Tanh")
    reasons = registry.refusals(spec).get(target, [])
    assert any("HardSigmoid:0.2:0.5" in r for r in reasons), reasons
    with pytest.raises(RNNXError, match="HardSigmoid:0.2:0.5"):
        rnnx.to_format(RNNWeights.random(spec, seed=0), target)


SCAN_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5,proj=2,act=HardSigmoid:0.2:0.5/LeakyRelu:0.1/ScaledTanh:1.5:0.7,clip=0.5",
        "lstm,input=3,hidden=5,layers=2,bidirectional,proj=3,peepholes,act=Sigmoid/Relu/Elu:0.8,input_forget",
        "lstm,input=3,hidden=4,act=Affine:0.3:0.4/ThresholdedRelu:0.1/Softsign,clip=0.7",
        "gru,input=3,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Softplus,clip=0.6",
        "gru,input=3,hidden=5,reset_before,act=Sigmoid/ScaledTanh:1.5:0.7,clip=0.4",
        "rnn_tanh,input=3,hidden=5,reverse,act=LeakyRelu:0.1,clip=0.5",
    )
]


@pytest.mark.parametrize("spec", SCAN_SPECS, ids=str)
def test_scans_compute_activations_clip_and_input_forget(spec: RNNSpec, tmp_path: Path) -> None:
    """A projected LSTM is written as Scans, and lowering turns native nodes into Scans: both
    compute the spec's functions, which ONNX Runtime shows; a changed clip or function fails."""
    from rnnx.graphs.lower import lower_recurrences

    weights = RNNWeights.random(spec, seed=_seed(str(spec)), scale=1.2)
    model = build_stack_model(weights, sequence_lens=True)
    if not spec.proj_size:
        assert lower_recurrences(model).rewritten
    assert not any(n.op_type in ("LSTM", "GRU", "RNN") for n in model.graph.node)
    runner = OnnxRuntimeRunner(model)
    report = stack.check("onnxruntime", runner, weights, shapes=SHAPES, ragged=True)
    assert report and report.worst().max_abs < ATOL, str(report)
    changed = spec.with_(clip=spec.clip * 2) if spec.clip else spec.with_(input_forget=False)
    assert not stack.check("onnxruntime", runner, RNNWeights(changed, weights.tensors), shapes=[(12, 4)])
    if spec.num_layers == 1:  # read back from the Scans' constants and the lowering's record
        onnx.save(model, str(tmp_path / "scans.onnx"))
        back = rnnx.load(tmp_path / "scans.onnx")
        assert back.spec == spec.with_(bias=back.spec.bias)


# --- reading what other producers wrote -----------------------------------------------


def _lstm_node(**attrs: Any) -> list[dict[str, Any]]:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=2,hidden=3,bidirectional"), seed=1)
    (node,) = rnnx.to_format(weights, "onnx")
    return [{**node, **attrs}]


def test_alpha_and_beta_go_to_the_functions_that_take_them() -> None:
    nodes = _lstm_node(activations=["HardSigmoid", "Tanh", "LeakyRelu"] * 2, activation_alpha=[0.3, 0.05] * 2, activation_beta=[0.6] * 2)
    assert rnnx.from_format(nodes, "onnx").spec.activations == (
        Activation("HardSigmoid", 0.3, 0.6), Activation("Tanh"), Activation("LeakyRelu", 0.05))
    # ONNX's defaults fill what is left out, where ONNX Runtime agrees on them
    nodes = _lstm_node(activations=["hardsigmoid", "tanh", "leakyrelu"] * 2)
    assert str(rnnx.from_format(nodes, "onnx").spec).endswith("act=HardSigmoid:0.2:0.5/Tanh/LeakyRelu:0.01")
    # one value per function (some tools write that) is read where it cannot be mistaken
    nodes = _lstm_node(activations=["HardSigmoid", "Tanh", "Tanh"] * 2, activation_alpha=[0.2, 0.2, 0.2] * 2, activation_beta=[0.5, 0.5, 0.5] * 2)
    assert rnnx.from_format(nodes, "onnx").spec.activations[0] == Activation("HardSigmoid", 0.2, 0.5)


def test_a_one_direction_rnn_with_onnx_schema_default_pair_reads_its_first() -> None:
    """ONNX's RNN schema lists ["Tanh", "Tanh"] as its default; ONNX Runtime runs a forward RNN
    with such a pair on the first function, and rnnx reads it so."""
    for pair, cell in ((["Tanh", "Tanh"], "rnn_tanh"), (["Relu", "Tanh"], "rnn_relu")):
        out = _run_single_node("RNN", pair)
        assert np.allclose(out, _run_single_node("RNN", pair[:1]))
        assert node_activations({"activations": pair}, 1, 1, "node")[0] == (Activation(pair[0]),)
        weights = RNNWeights.random(RNNSpec.parse(f"{cell},input=2,hidden=3"), seed=0)
        (node,) = rnnx.to_format(weights, "onnx")
        assert rnnx.from_format([{**node, "activations": pair}], "onnx").spec.cell == cell


@pytest.mark.parametrize(
    ("attrs", "needle"),
    [
        ({"activations": ["HardSigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh"]}, "the directions use different activations"),
        ({"activations": ["Sigmoid", "Tanh", "Tanh"]}, "expected 6 (3 per direction, 2 direction(s)), found 3"),
        ({"activations": ["ScaledTanh", "Tanh", "Tanh"] * 2}, "ScaledTanh takes alpha, but activation_alpha has no value left"),
        ({"activations": ["Tanh", "LeakyRelu", "Tanh"] * 2, "activation_alpha": [0.0, 0.1, 0.0, 0.0, 0.2, 0.0]},
         "activation_alpha has 6 values, but the activations"),
        ({"clip": -1.0}, "clip=-1.0: expected a positive finite threshold"),
        ({"activations": ["Sigmoid", "Gelu", "Tanh"] * 2}, "activation 'Gelu' is not one of ONNX's"),
    ],
)
def test_what_one_spec_cannot_hold_is_refused(attrs: dict[str, Any], needle: str) -> None:
    with pytest.raises(RNNXError) as caught:
        rnnx.from_format(_lstm_node(**attrs), "onnx")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


# --- ONNX's own node tests -------------------------------------------------------------


def _node_cases() -> list[Any]:
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    return [c for c in cases if any(n.op_type in ("LSTM", "GRU", "RNN") for n in c.model.graph.node)]


NODE_CASES = _node_cases()


def _frozen(case: Any) -> tuple[Any, dict[str, np.ndarray], list[np.ndarray]]:
    """The case's model with its weights (graph inputs there) stored as initializers, the
    remaining inputs, and the expected outputs."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inputs, outputs = case.data_sets[0]
    node = next(n for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    given = dict(zip([i.name for i in model.graph.input], inputs))
    stored = {node.input[i] for i in (1, 2, 3, 7) if len(node.input) > i and node.input[i]}
    kept = [i for i in model.graph.input if i.name not in stored]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(given[n]), n) for n in stored)
    return model, {k: v for k, v in given.items() if k not in stored}, list(outputs)


def _expected(case: Any, model: Any, outputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The node's expected outputs in rnnx's layout: Y (seq, batch, dirs*hidden), h_n."""
    node = next(n for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    named = dict(zip([o for o in node.output if o], outputs))
    found: dict[str, np.ndarray] = {}
    if "Y" in named:
        y = named["Y"]  # (seq, dirs, batch, H), or (batch, seq, dirs, H) with layout 1
        y = y.reshape(*y.shape[:2], -1) if layout else y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        found["Y"] = y
    for name, key in (("Y_h", "h_n"), ("Y_c", "c_n")):
        if name in named:
            found[key] = named[name].transpose(1, 0, 2) if layout else named[name]  # (batch, dirs, H) with layout 1
    return found


@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: c.name)
def test_onnx_node_tests_reproduce_after_reading_and_after_convert(case: Any, tmp_path: Path) -> None:
    model, given, outputs = _frozen(case)
    node = next(n for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    batch_first = bool(next((a.i for a in node.attribute if a.name == "layout"), 0))
    names = list(node.input) + [""] * 8
    x, seq, h0, c0 = (given.get(names[i]) if names[i] else None for i in (0, 4, 5, 6))
    path = tmp_path / f"{case.name}.onnx"
    onnx.save(model, str(path))
    expected = _expected(case, model, outputs)

    weights = rnnx.load(path)
    ref = reference.forward(weights, x, h0=h0, c0=c0, seq_lens=seq, batch_first=batch_first)
    produced = {"Y": ref.y, "h_n": ref.h_n, "c_n": ref.c_n}
    for key, want in expected.items():
        np.testing.assert_allclose(produced[key], want, atol=1e-5, err_msg=f"reference {key}")

    out = tmp_path / f"{case.name}.converted.onnx"
    result = convert(path, out, to_format="onnx", batch_first=batch_first, seq_lens=seq is not None)
    assert result.written and result.report
    feeds: dict[str, np.ndarray] = {"X": x.astype(np.float32)}
    L = weights.spec.num_directions
    B = x.shape[0] if batch_first else x.shape[1]
    feeds["h0"] = (h0 if h0 is not None else np.zeros((L, B, weights.spec.hidden_size))).astype(np.float32)
    if weights.spec.cell == "lstm":
        feeds["c0"] = (c0 if c0 is not None else np.zeros((L, B, weights.spec.hidden_size))).astype(np.float32)
    if seq is not None:
        feeds["seq_lens"] = np.asarray(seq, np.int32)
    ran = OnnxRuntimeRunner(out)(feeds)
    for key, want in expected.items():
        np.testing.assert_allclose(ran[key], want, atol=1e-5, err_msg=f"converted file in ONNX Runtime, {key}")


# --- files from the wild: Keras 2's hard_sigmoid, as tf_keras recorded it ----------------

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
KERAS2_HARD_SIGMOID = [
    ("t2o_k2_lstm_hard_sigmoid.onnx", "lstm,input=3,hidden=4,act=HardSigmoid:0.2:0.5/Tanh/Tanh"),  # tf2onnx 1.17: a native LSTM, no alpha given
    ("k2_lstm_hard_sigmoid.model.h5", "lstm,input=4,hidden=4,act=HardSigmoid:0.2:0.5/Tanh/Tanh"),  # tf_keras model.save
]


@pytest.mark.parametrize(("name", "text"), KERAS2_HARD_SIGMOID, ids=[n for n, _ in KERAS2_HARD_SIGMOID])
def test_keras2_hard_sigmoid_reproduces_tf_keras_in_the_reference_and_onnx_runtime(name: str, text: str, tmp_path: Path) -> None:
    path = WILD / name
    recorded = np.load(WILD / (name.split(".")[0] + ".npz"))
    weights = rnnx.load(path)
    assert weights.spec == RNNSpec.parse(text)
    out = tmp_path / "converted.onnx"
    assert convert(path, out, batch_first=True).written
    runner = OnnxRuntimeRunner(out)
    keras3 = RNNWeights(weights.spec.with_(activations=(Activation("HardSigmoid", 1 / 6, 0.5), *weights.spec.activations[1:])), weights.tensors)
    for batch in ("b1", "b3"):
        x, y = recorded[f"x_{batch}"], recorded[f"y_{batch}"]
        np.testing.assert_allclose(reference.forward(weights, x, batch_first=True).y, y, atol=1e-5)
        zeros = np.zeros((1, x.shape[0], 4), np.float32)
        np.testing.assert_allclose(runner({"X": x.astype(np.float32), "h0": zeros, "c0": zeros})["Y"], y, atol=1e-5)
        # Keras 3's hard_sigmoid (x/6 + 0.5) on the same weights is far off: the mapping matters
        assert np.abs(reference.forward(keras3, x, batch_first=True).y - y).max() > 1e-2
    if path.suffix == ".onnx":  # the producer's own file, run as it is, agrees too (ONNX Runtime's default alpha and beta)
        from onnxruntime import InferenceSession

        session = InferenceSession(str(path), providers=["CPUExecutionProvider"])
        x = recorded["x_b3"].astype(np.float32)
        np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], recorded["y_b3"], atol=1e-5)


def _run_single_node(op: str, acts: list[str], **attrs: Any) -> np.ndarray:
    from onnxruntime import InferenceSession

    rng = np.random.default_rng(_seed(op))  # the same weights and inputs for every list of functions
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    W, R = (rng.standard_normal((1, gates * 3, n)).astype(np.float32) for n in (2, 3))
    node = helper.make_node(op, ["X", "W", "R"], ["Y"], hidden_size=3, activations=acts, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [6, 2, 2])],
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(W, "W"), numpy_helper.from_array(R, "R")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": 2 * rng.standard_normal((6, 2, 2)).astype(np.float32)})[0]


@pytest.mark.parametrize("op", ["LSTM", "RNN"])
def test_onnx_runtime_defaults_are_why_some_missing_values_are_refused(op: str) -> None:
    """Left out, LeakyRelu's alpha is 0.01 in ONNX and in ONNX Runtime alike, so rnnx reads it;
    ThresholdedRelu's is 1 by ONNX's operator but 0 in ONNX Runtime, so rnnx refuses the file."""
    def acts(name: str) -> list[str]:
        return [name] if op == "RNN" else ["Sigmoid", name, "Tanh"]

    leaky = _run_single_node(op, acts("LeakyRelu"))
    assert np.allclose(leaky, _run_single_node(op, acts("LeakyRelu"), activation_alpha=[0.01]))
    assert not np.allclose(leaky, _run_single_node(op, acts("LeakyRelu"), activation_alpha=[0.0]))
    thresholded = _run_single_node(op, acts("ThresholdedRelu"))
    assert np.allclose(thresholded, _run_single_node(op, acts("ThresholdedRelu"), activation_alpha=[0.0]))
    assert not np.allclose(thresholded, _run_single_node(op, acts("ThresholdedRelu"), activation_alpha=[1.0]))
    slots, dirs = (1, 1) if op == "RNN" else (3, 1)
    with pytest.raises(RNNXError, match="ThresholdedRelu takes alpha"):
        node_activations({"activations": acts("ThresholdedRelu")}, slots, dirs, "node")


def test_the_command_line_shows_the_activations(tmp_path: Path) -> None:
    """rnnx convert prints the spec with its activations, in text and JSON; rnnx inspect names
    the node's functions. The file is tf2onnx's Keras 2 LSTM, which gives no alpha."""
    import json
    import subprocess

    source = WILD / "t2o_k2_lstm_hard_sigmoid.onnx"
    expected = "lstm,input=3,hidden=4,act=HardSigmoid:0.2:0.5/Tanh/Tanh"

    def rnnx_cli(*args: str) -> subprocess.CompletedProcess[str]:
        from tests.helpers import rnnx_in_process  # in-process: what the verbs print is tested, not the process

        return rnnx_in_process(*args)

    text = rnnx_cli("convert", str(source), "--to", "onnx", "-o", str(tmp_path / "a.onnx"))
    assert text.returncode == 0, text.stderr
    assert f"spec: {expected}" in text.stdout
    as_json = rnnx_cli("convert", str(source), "--to", "onnx", "-o", str(tmp_path / "b.onnx"), "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["spec"] == expected and report["check"]["passed"]
    inspected = rnnx_cli("inspect", str(tmp_path / "a.onnx"), "--json")
    assert inspected.returncode == 0, inspected.stderr
    (node,) = json.loads(inspected.stdout)["nodes"]
    assert node["activations"] == ["HardSigmoid", "Tanh", "Tanh"]
    assert "HardSigmoid" in rnnx_cli("inspect", str(source)).stdout


def test_onnx_runtime_softplus_overflows_where_the_reference_does_not() -> None:
    """A fact to know when a Softplus model fails parity: ONNX Runtime computes log(1 + exp(x))
    in float32, inf from x = 89 on, while Softplus(x) there is x (the reference's value)."""
    spec = RNNSpec.parse("rnn_tanh,input=1,hidden=1,act=Softplus")
    weights = RNNWeights(spec, {k: np.ones_like(v) if ".W." in k else np.zeros_like(v) for k, v in RNNWeights.random(spec, seed=0).tensors.items()})
    runner = OnnxRuntimeRunner(build_stack_model(weights))
    x = np.array([50.0, 88.0, 89.0], np.float32).reshape(3, 1, 1)
    ran = runner({"X": x, "h0": np.zeros((1, 1, 1), np.float32)})["Y"].ravel()
    assert reference.forward(weights, x).y.ravel() == pytest.approx([50.0, 88.0, 89.0])
    assert ran[:2] == pytest.approx([50.0, 88.0]) and np.isinf(ran[2])
