"""rnnx inspect on files from other tools (tests/fixtures/wild, see its manifest.json): a tf2onnx
Loop is reported as what `rnnx fuse` would make native, with the command to run, and that command
gives the native node inspect predicted, matching Keras's recorded outputs; a Keras .h5 and a
cuDNN blob list their recurrent groups and specs; activation parameters and input_forget show."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.cli import main
from rnnx.graphs.inspect import fusable

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
MANIFEST = json.loads((WILD / "manifest.json").read_text())


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name, op, direction", [("t2o_gru_reset_after", "GRU", "forward"), ("t2o_lstm_hard_sigmoid", "LSTM", "forward"),
                                                 ("t2o_bigru", "GRU", "bidirectional")])
def test_a_tf2onnx_loop_is_reported_with_the_fuse_command_that_makes_it_native(tmp_path: Path, capsys, name: str, op: str, direction: str) -> None:
    source = tmp_path / f"{name}.onnx"
    shutil.copyfile(WILD / f"{name}.onnx", source)
    before = source.read_bytes()
    code, text, _ = _cli(capsys, "inspect", str(source))
    assert code == 0 and "no LSTM, GRU or RNN node found" not in text, text
    assert any(line.startswith("fusable: Loop ") for line in text.splitlines()), text
    code, out, _ = _cli(capsys, "inspect", str(source), "--json")
    report = json.loads(out)
    assert report["nodes"] == [] and report["fusable"]["loops"] and {loop["op"] for loop in report["fusable"]["loops"]} == {op}
    (predicted,) = report["fusable"]["native_after"]
    assert (predicted["op_type"], predicted["direction"]) == (op, direction)
    assert f"run: {report['fusable']['command']}" in text
    assert source.read_bytes() == before  # inspect's dry run leaves the file as it was

    # the command inspect offers gives the node it predicted ...
    command = shlex.split(report["fusable"]["command"])
    assert command[:2] == ["rnnx", "fuse"]
    code, _, err = _cli(capsys, *command[1:])
    assert code == 0, err
    fused = Path(command[command.index("-o") + 1])
    code, out, _ = _cli(capsys, "inspect", str(fused), "--json")
    (node,) = json.loads(out)["nodes"]
    assert {k: node[k] for k in ("name", "op_type", "input_size", "hidden_size", "direction")} == \
        {k: predicted[k] for k in ("name", "op_type", "input_size", "hidden_size", "direction")}
    assert json.loads(out)["fusable"]["loops"] == []

    # ... which computes what Keras computed (its recorded outputs, batch 1 and 3)
    import onnxruntime as ort

    facts = MANIFEST[f"{name}.onnx"]
    recorded = np.load(WILD / facts["outputs"])
    session = ort.InferenceSession(str(fused), providers=["CPUExecutionProvider"])
    for batch in ("b1", "b3"):
        (y,) = session.run([facts["output_name"]], {facts["input_name"]: recorded[f"x_{batch}"]})
        np.testing.assert_allclose(y, recorded[f"y_{batch}"], atol=1e-5, rtol=1e-4)


def test_the_dry_run_leaves_the_model_unchanged() -> None:
    model = onnx.load(str(WILD / "t2o_gru_cell_step.onnx"))
    before = model.SerializeToString()
    found = fusable(model)
    assert found["cells"] and found["native_after"] and model.SerializeToString() == before


def test_a_model_with_nothing_to_fuse_says_so_and_why(tmp_path: Path, capsys) -> None:
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Tanh", ["X"], ["Y"])], "g", [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2])]), opset_imports=[onnx.helper.make_opsetid("", 17)])
    path = tmp_path / "tanh.onnx"
    onnx.save(model, str(path))
    code, text, _ = _cli(capsys, "inspect", str(path))
    assert code == 0 and "no LSTM, GRU or RNN node found" in text and "rnnx fuse would rewrite" in text and "run:" not in text


def test_convert_on_a_loop_points_at_rnnx_fuse(tmp_path: Path, capsys) -> None:
    out = tmp_path / "w.safetensors"
    code, _, err = _cli(capsys, "convert", str(WILD / "t2o_gru_reset_after.onnx"), "-o", str(out))
    assert code == 2 and "found none" in err and "`rnnx fuse`" in err and len(err.strip().splitlines()) == 1 and not out.exists(), err


@pytest.mark.parametrize("name", ["k2_lstm", "k2_lstm_stack", "k2_gru_reset_before", "k2_lstm_hard_sigmoid", "k2_bilstm"])
def test_a_keras_h5_lists_its_groups_and_specs(capsys, name: str) -> None:
    path = WILD / f"{name}.model.h5"
    facts = MANIFEST[path.name]
    code, out, err = _cli(capsys, "inspect", str(path), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["format"] == "keras_h5" and [g["name"] for g in report["groups"]] == [layer["name"] for layer in facts["layers"]]
    assert report["groups"][0]["input_size"] == facts["input_size"]
    for group, layer in zip(report["groups"], facts["layers"]):
        # what Keras recorded for the layer, against what inspect says rnnx reads
        assert group["hidden_size"] == layer["units"] and group["cell"] == layer["cls"].replace("Bidirectional", "LSTM").lower()
        assert group["direction"] == ("bidirectional" if layer["cls"] == "Bidirectional" else "forward")
        assert ("reset_before" in group["spec"]) == (layer.get("reset_after") is False)
        assert group["activations"].startswith("HardSigmoid:0.2:0.5/") == (layer["recurrent_activation"] == "hard_sigmoid")
        assert RNNSpec.parse(group["spec"]) == rnnx.load(path, select=group["name"]).spec
    code, text, _ = _cli(capsys, "inspect", str(path))
    assert code == 0 and "cannot parse as an ONNX model" not in text
    for group in report["groups"]:
        assert f"spec: {group['spec']}" in text


def test_a_cudnn_blob_needs_its_spec_and_then_is_listed(tmp_path: Path, capsys) -> None:
    spec = RNNSpec.parse("gru,input=3,hidden=4,layers=2")
    path = tmp_path / "w.bin"
    rnnx.save(RNNWeights.random(spec, seed=0), path)
    code, _, err = _cli(capsys, "inspect", str(path))
    assert code == 2 and "--spec" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = _cli(capsys, "inspect", str(path), "--spec", str(spec), "--json")
    assert code == 0, err
    (group,) = json.loads(out)["groups"]
    assert group["spec"] == str(spec) and json.loads(out)["format"] == "cudnn"
    code, _, err = _cli(capsys, "inspect", str(path), "--spec", "gru,input=3,hidden=5,layers=2")  # the wrong size is refused
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_text_shows_activation_parameters_clip_and_input_forget(tmp_path: Path, capsys) -> None:
    spec = RNNSpec.parse("lstm,input=3,hidden=4,act=HardSigmoid:0.3:0.4/Tanh/Elu:0.7,clip=2.5,input_forget")
    path = tmp_path / "a.onnx"
    rnnx.save(RNNWeights.random(spec, seed=1), path)
    code, text, err = _cli(capsys, "inspect", str(path))
    assert code == 0, err
    line = text.splitlines()[0]
    assert "activations=HardSigmoid:0.3:0.4/Tanh/Elu:0.7" in line and "input_forget=1" in line and "clip=2.5" in line, line
    code, out, _ = _cli(capsys, "inspect", str(path), "--json")
    (node,) = json.loads(out)["nodes"]
    assert node["activation_text"] == "HardSigmoid:0.3:0.4/Tanh/Elu:0.7" and node["input_forget"] == 1
    # the lists as the node holds them, beside the pairing
    assert node["activation_alpha"][:1] == [pytest.approx(0.3)] and node["activation_beta"][:1] == [pytest.approx(0.4)]


def test_fuse_help_names_what_it_fuses(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["fuse", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("RNN", "Loop", "Scan", "single steps"):
        assert word in text, word


def test_a_weights_only_h5_lists_each_group_with_what_it_needs_and_reads_one_given_its_spec(capsys) -> None:
    path = WILD / "k2_lstm_stack_weights.h5"
    code, text, err = _cli(capsys, "inspect", str(path))
    assert code == 0, err
    for layer in MANIFEST["k2_lstm_stack.model.h5"]["layers"]:  # the same network, saved with save_weights
        line = next(line for line in text.splitlines() if line.startswith(f"{layer['name']}: not read: "))
        assert "--spec" in line and "spec=" not in line, line
    code, out, err = _cli(capsys, "inspect", str(path), "--select", "lstm_2", "--spec", "lstm,input=5,hidden=5", "--json")
    assert code == 0, err
    (group,) = json.loads(out)["groups"]
    assert (group["name"], group["spec"], group["unread"]) == ("lstm_2", "lstm,input=5,hidden=5", None)
    code, _, err = _cli(capsys, "inspect", str(path), "--select", "lstm_2", "--spec", "lstm,input=3,hidden=5")  # lstm_2 reads lstm_1's 5 outputs
    assert code == 2 and "expected shape" in err, err
