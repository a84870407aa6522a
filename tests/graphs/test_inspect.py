"""rnnx inspect: node facts, weight sources, and backend verdicts predicted from each engine's
documented rules (ONNX Runtime's pinned by running it), each labelled as a prediction."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.engines.acceptance import BACKEND_RULES, predict
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats.onnx_build import build_stack_model
from rnnx.graphs.inspect import inspect_model


def _single_node_model(op: str, weights: RNNWeights, **attrs) -> onnx.ModelProto:
    (node_w,) = rnnx.to_format(weights, "onnx")
    keys = [k for k in ("W", "R", "B") if k in node_w]
    inits = [numpy_helper.from_array(node_w[k], k) for k in keys]
    inputs = ["X"] + keys
    if "P" in node_w:
        inputs += ["", "", "", "P"]
        inits.append(numpy_helper.from_array(node_w["P"], "P"))
    node = helper.make_node(op, inputs, ["Y"], name="n", hidden_size=weights.spec.hidden_size, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_rnnx_stacks_are_accepted_everywhere() -> None:
    model = build_stack_model(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional")))
    reports = inspect_model(model, judge=predict)
    assert [r.name for r in reports] == ["LSTM_l0", "LSTM_l1"] and {r.stack for r in reports} == {"LSTM_l0"}
    assert reports[1].input_size == 8 and reports[1].hidden_size == 4
    assert all(not reasons for r in reports for reasons in r.backends.values()) and set(reports[0].backends) == {"onnxruntime", "tensorrt", "cudnn"}
    assert reports[0].weight_sources == {"W": "initializer", "R": "initializer", "B": "initializer"}


def test_layout_1_is_refused_by_onnx_runtime_as_inspect_says() -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"))
    model = _single_node_model("GRU", weights, layout=1, linear_before_reset=1)
    (report,) = inspect_model(model, judge=predict)
    assert report.layout == 1 and report.backends["onnxruntime"] and report.backends["tensorrt"]
    with pytest.raises(RNNXError):  # the rule is ONNX Runtime's own behaviour
        OnnxRuntimeRunner(model)({"X": np.zeros((2, 5, 3), np.float32)})
    layout0 = _single_node_model("GRU", weights, linear_before_reset=1)
    OnnxRuntimeRunner(layout0)({"X": np.zeros((5, 2, 3), np.float32)})
    assert not inspect_model(layout0, judge=predict)[0].backends["onnxruntime"]


@pytest.mark.parametrize(
    ("spec", "op", "attrs", "backend", "fragment"),
    [
        ("gru,input=3,hidden=4,reset_before", "GRU", {}, "cudnn", "linear_before_reset=0"),
        ("lstm,input=3,hidden=4,peepholes", "LSTM", {}, "cudnn", "peepholes"),
        ("lstm,input=3,hidden=4", "LSTM", {"clip": 2.0}, "cudnn", "clip=2.0"),
        ("lstm,input=3,hidden=4", "LSTM", {"input_forget": 1}, "tensorrt", "input_forget=1"),
        ("rnn_tanh,input=3,hidden=4,bidirectional", "RNN", {"direction": "bidirectional", "activations": ["Tanh", "Relu"]}, "tensorrt", "reverse activations"),
        ("rnn_tanh,input=3,hidden=4,reverse", "RNN", {"direction": "reverse"}, "cudnn", "reverse-only"),
    ],
)
def test_backend_refusals(spec: str, op: str, attrs: dict, backend: str, fragment: str) -> None:
    weights = RNNWeights.random(RNNSpec.parse(spec))
    (report,) = inspect_model(_single_node_model(op, weights, **attrs), judge=predict)
    assert any(fragment in reason for reason in report.backends[backend]), report.backends


def test_verdicts_are_labelled_predictions_and_none_are_made_without_rules() -> None:
    """Neither TensorRT nor cuDNN runs in inspect: each verdict says it rests on documented rules."""
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"))
    model = _single_node_model("GRU", weights, linear_before_reset=1)
    (bare,) = inspect_model(model)
    assert bare.backends == {} and bare.backend_basis == {}  # no judge, no claim
    (report,) = inspect_model(model, judge=predict)
    assert report.backend_basis["tensorrt"] == "predicted from onnx-tensorrt's parser source for TensorRT 10.x (10.15); not built"
    assert report.backend_basis["cudnn"] == "predicted from cuDNN's documented RNN modes; not run"
    assert report.backend_basis == {table.backend: table.basis for table in BACKEND_RULES}


def test_inspect_text_says_each_verdict_is_a_prediction(tmp_path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"))
    path = tmp_path / "l.onnx"
    onnx.save(_single_node_model("LSTM", weights, input_forget=1), str(path))
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "inspect", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("  tensorrt     refuses: input_forget=1: coupled input and forget gates "
                     "(predicted from onnx-tensorrt's parser source for TensorRT 10.x (10.15); not built)")
    assert lines[at + 1].startswith("               cites onnxOpCheckers.cpp DEFINE_OP_CHECKER(LSTM): STATIC_CHECK(inputForget == 0")
    assert "  cudnn        refuses: input_forget=1: cuDNN has no coupled gates (predicted from cuDNN's documented RNN modes; not run)" in lines
    assert not any(line.strip().startswith(("tensorrt", "cudnn")) and "predicted from" not in line for line in lines)


def test_cli_json_and_subgraphs(tmp_path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("rnn_relu,input=2,hidden=3"))
    inner = _single_node_model("RNN", weights, activations=["Relu"]).graph
    inner.input.pop()  # the subgraph reads X from the outer scope
    cond = helper.make_node("If", ["c"], ["Y"], then_branch=inner, else_branch=inner)
    graph = helper.make_graph([cond], "outer", [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
                                                helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "inspect", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    nodes = json.loads(out.stdout)["nodes"]
    assert sorted(n["graph"] for n in nodes) == ["main/If.else_branch", "main/If.then_branch"]
    assert nodes[0]["activations"] == ["Relu"] and not nodes[0]["backends"]["cudnn"]


def test_inspect_json_field_by_field(tmp_path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4,bidirectional,reset_before"))
    path = tmp_path / "g.onnx"
    onnx.save(_single_node_model("GRU", weights, direction="bidirectional", linear_before_reset=0, clip=5.0), str(path))
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "inspect", str(path), "--json"], capture_output=True, text=True, timeout=120)
    (node,) = json.loads(out.stdout)["nodes"]
    assert node.pop("backend_verdicts") == {"onnxruntime": "accepted", "tensorrt": "accepted", "cudnn": "refused"}
    cites = node.pop("backend_citations")["tensorrt"]  # the importer, and the rows for its clip and reset mode
    assert cites[0].startswith("onnxOpImporters.cpp DEFINE_BUILTIN_OP_IMPORTER(GRU)") and any("addClip" in c for c in cites)
    assert node == {
        "name": "n", "graph": "main", "op_type": "GRU", "stack": "n", "input_size": 3, "hidden_size": 4,
        "direction": "bidirectional", "activations": [], "clip": 5.0, "activation_alpha": [], "activation_beta": [], "activation_text": "",
        "layout": 0, "linear_before_reset": 0,
        "input_forget": 0, "peepholes": False, "sequence_lens": False,
        "weight_sources": {"W": "initializer", "R": "initializer", "B": "initializer"}, "lowered": False,
        "backends": {
            "onnxruntime": [],
            "tensorrt": [],
            "cudnn": ["linear_before_reset=0: cuDNN GRUs reset after the recurrent product", "clip=5.0: cuDNN has no cell clipping"],
        },
        "backend_basis": {table.backend: table.basis for table in BACKEND_RULES},
    }
    assert json.loads(out.stdout)["fusable_chains"] == []


@pytest.mark.parametrize("name, value", [("hidden_size", "abc"), ("layout", "0"), ("direction", 1)])
def test_attributes_of_the_wrong_type_are_refused_in_one_line(tmp_path, name: str, value: object) -> None:
    import subprocess
    import sys

    import onnx
    from onnx import helper

    import rnnx
    from rnnx import RNNSpec, RNNWeights

    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0)
    path = tmp_path / "g.onnx"
    rnnx.save(weights, path)
    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.op_type == "GRU")
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(name, value)])
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    for argv in (["inspect", str(bad)], ["convert", str(bad), "-o", str(tmp_path / "o.safetensors")]):
        out = subprocess.run([sys.executable, "-m", "rnnx.cli", *argv], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and f"attribute {name} must be" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
