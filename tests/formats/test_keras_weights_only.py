"""Keras files that do not record how their layers were built, pinned by Keras 3 (torch backend)
and ONNX Runtime.

A Keras 3 ``.weights.h5`` holds arrays only: no activations, no go_backwards. Read from its
shapes it takes Keras's defaults and says so in a note; read with ``spec=`` stating the layer
(activations, ``reverse``), the converted ONNX file computes what Keras computes. A legacy
``.h5`` whose ``keras_version`` was removed cannot say which hard_sigmoid it means.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
h5py = pytest.importorskip("h5py")
pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from rnnx import RNNSpec, RNNWeights, RNNXError, cli  # noqa: E402
from rnnx.pipelines.convert import convert  # noqa: E402

ATOL = 1e-5  # Keras float32 against ONNX Runtime float32
SHAPES = [(1, 1), (7, 3), (12, 2)]  # (seq_len, batch): batch 1 included
DEFAULTS_NOTE = "records no activations or go_backwards; read with Keras's defaults (tanh, sigmoid, forward); pass spec="
BACKWARDS_NOTE = "Keras returns a go_backwards layer's sequence last step first"


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    keras.utils.set_random_seed(zlib.crc32(request.node.nodeid.encode()))


def _np(x: object) -> np.ndarray:
    return keras.ops.convert_to_numpy(x)


def _model(layer: keras.layers.Layer, input_size: int) -> keras.Model:
    """A one-layer model whose every array is moved off Keras's initial values (zero biases
    would hide a misplaced bias), seeded from the layer's name."""
    model = keras.Sequential([keras.Input((None, input_size)), layer])
    rng = np.random.default_rng(zlib.crc32(layer.name.encode()))
    model.set_weights([w + rng.uniform(-0.5, 0.5, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def _run_onnx(path: Path, x: np.ndarray) -> np.ndarray:
    """ONNX Runtime's Y for a batch-first input, batch-first, states starting at zero as Keras's do."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {}
    for i in session.get_inputs():
        if i.name == "X":
            feed[i.name] = np.ascontiguousarray(x.transpose(1, 0, 2))
        else:
            feed[i.name] = np.zeros([d if isinstance(d, int) else x.shape[0] for d in i.shape], np.float32)
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    y = outputs["Y"]
    return (y.reshape(y.shape[0], y.shape[-2], -1) if y.ndim == 4 else y).transpose(1, 0, 2)


def _max_gap(model: keras.Model, onnx_path: Path, input_size: int, flip: bool) -> float:
    """The largest gap between Keras and ONNX Runtime over seeded inputs at every shape;
    ``flip`` puts ONNX's input-ordered Y in Keras's go_backwards order."""
    gap = 0.0
    for T, B in SHAPES:
        x = 2 * np.random.default_rng(zlib.crc32(f"x {T} {B}".encode())).standard_normal((B, T, input_size)).astype(np.float32)
        want = _np(model(x))
        got = _run_onnx(onnx_path, x)
        gap = max(gap, float(np.abs((got[:, ::-1] if flip else got) - want).max()))
    return gap


CASES = {
    # name: (layer, input size, the spec that states it, whether it runs backwards)
    "relu_lstm": (lambda: keras.layers.LSTM(4, activation="relu", return_sequences=True, name="relu_lstm"), 3,
                  "lstm,input=3,hidden=4,act=Sigmoid/Relu/Relu", False),
    "back_gru": (lambda: keras.layers.GRU(4, go_backwards=True, return_sequences=True, name="back_gru"), 3,
                 "gru,input=3,hidden=4,reverse", True),
    "hard_gru": (lambda: keras.layers.GRU(5, recurrent_activation="hard_sigmoid", activation="softsign", go_backwards=True,
                                          return_sequences=True, name="hard_gru"), 2,
                 "gru,input=2,hidden=5,reverse,act=HardSigmoid:0.16666667:0.5/Softsign", True),
}


@pytest.mark.parametrize("case", CASES)
def test_weights_h5_converts_as_keras_ran_it_with_the_spec(case: str, tmp_path: Path) -> None:
    """With spec= stating the layer, the .weights.h5's ONNX file gives Keras's outputs; read from
    its shapes alone it does not, and the conversion says what it assumed."""
    make, input_size, text, backwards = CASES[case]
    model = _model(make(), input_size)
    source = tmp_path / "m.weights.h5"
    model.save_weights(source)
    stated = convert(source, tmp_path / "stated.onnx", spec=text)
    assert stated.written and stated.spec == str(RNNSpec.parse(text))
    assert not any(DEFAULTS_NOTE in n for n in stated.notes), stated.notes
    assert any(BACKWARDS_NOTE in n for n in stated.notes) == backwards, stated.notes
    assert _max_gap(model, tmp_path / "stated.onnx", input_size, flip=backwards) < ATOL
    # The shapes alone: Keras's defaults, run forward. Converted and noted, and not Keras's layer.
    guessed = convert(source, tmp_path / "guessed.onnx")
    assert guessed.written and RNNSpec.parse(guessed.spec).uses_default_activations and "reverse" not in guessed.spec
    # The group is named by class (lstm, gru), as Keras names it in the file.
    assert [n for n in guessed.notes if DEFAULTS_NOTE in n] == [f"m.weights.h5: layer '{text[:text.index(',')]}': a .weights.h5 file {DEFAULTS_NOTE} if the layer "
                                                                "was built otherwise"]
    assert _max_gap(model, tmp_path / "guessed.onnx", input_size, flip=backwards) > 1e-2


def test_the_notes_reach_the_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(CASES["back_gru"][0](), 3)
    model.save_weights(tmp_path / "g.weights.h5")
    assert cli.main(["convert", str(tmp_path / "g.weights.h5"), "-o", str(tmp_path / "a.onnx")]) == 0
    text = capsys.readouterr().out
    assert f"note: g.weights.h5: layer 'gru': a .weights.h5 file {DEFAULTS_NOTE.replace('spec=', '--spec')} if the layer" in text, text
    assert cli.main(["convert", "--json", str(tmp_path / "g.weights.h5"), "-o", str(tmp_path / "b.onnx"), "--spec", "gru,input=3,hidden=4,reverse"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and notes[0].startswith(BACKWARDS_NOTE) and "flip the time axis" in notes[0], notes


def test_get_weights_arrays_read_with_activations_and_written_without(tmp_path: Path) -> None:
    """A layer's get_weights() arrays read under a spec with activations; writing such weights
    as Keras arrays is still refused (the layer that loads them sets its own)."""
    make, input_size, text, _ = CASES["relu_lstm"]
    model = _model(make(), input_size)
    weights = rnnx.from_format(model.layers[0].get_weights(), "keras", spec=text)
    assert weights.spec == RNNSpec.parse(text)
    plain = rnnx.from_format(model.layers[0].get_weights(), "keras")
    assert all(np.array_equal(weights.tensors[k], plain.tensors[k]) for k in plain.tensors)  # the arrays' layout is the same
    with pytest.raises(RNNXError, match=r"Keras weight arrays carry no activations \(act=Sigmoid/Relu/Relu\)"):
        rnnx.to_format(weights, "keras")
    with pytest.raises(RNNXError, match="carry no activations"):
        rnnx.save(weights, tmp_path / "w.weights.h5")
    assert not (tmp_path / "w.weights.h5").exists()


@pytest.mark.parametrize(("text", "fragment"), [
    ("lstm,input=3,hidden=4,act=Sigmoid/Relu/Tanh", r"one activation for the candidate and the output \(act=f/g/g\), found Relu and Tanh"),
    ("lstm,input=3,hidden=4,clip=3", "no cell clip"),
    ("lstm,input=3,hidden=4,input_forget", "no input_forget"),
])
def test_a_spec_no_keras_layer_computes_is_refused(text: str, fragment: str, tmp_path: Path) -> None:
    model = _model(keras.layers.LSTM(4, return_sequences=True, name="l"), 3)
    model.save_weights(tmp_path / "l.weights.h5")
    with pytest.raises(RNNXError, match=fragment):
        rnnx.load(tmp_path / "l.weights.h5", spec=text)


def _without_version(source: Path, target: Path) -> None:
    """A copy of a legacy .h5 with keras_version removed wherever Keras writes it."""
    shutil.copyfile(source, target)
    with h5py.File(target, "r+") as f:
        for group in (f, f["model_weights"]):
            if "keras_version" in group.attrs:
                del group.attrs["keras_version"]


def test_a_hard_sigmoid_without_keras_version_needs_the_spec(tmp_path: Path) -> None:
    """hard_sigmoid is 0.2x+0.5 in Keras 2 and x/6+0.5 in Keras 3: with keras_version removed the
    file cannot say which, so spec= must; Keras 3's reading gives Keras 3's outputs, Keras 2's not."""
    model = _model(keras.layers.LSTM(4, recurrent_activation="hard_sigmoid", go_backwards=True, return_sequences=True, name="hs"), 3)
    model.save(tmp_path / "full.h5")
    _without_version(tmp_path / "full.h5", tmp_path / "m.h5")
    keras2 = "lstm,input=3,hidden=4,reverse,act=HardSigmoid:0.2:0.5/Tanh/Tanh"
    keras3 = "lstm,input=3,hidden=4,reverse,act=HardSigmoid:0.16666667:0.5/Tanh/Tanh"
    assert rnnx.load(tmp_path / "full.h5").spec == RNNSpec.parse(keras3)  # the version says it
    with pytest.raises(RNNXError, match=rf"m.h5: layer 'hs': Keras LSTM 'hs' uses hard_sigmoid and the file has no keras_version .*"
                                        rf"Keras 2's is 0.2x\+0.5 \(spec={keras2}\), Keras 3's x/6\+0.5 \(spec={keras3}\); pass spec= saying which$"):
        rnnx.load(tmp_path / "m.h5")
    with pytest.raises(RNNXError, match="no keras_version"):
        rnnx.load(tmp_path / "m.h5", spec="lstm,input=3,hidden=4,reverse")
    right = convert(tmp_path / "m.h5", tmp_path / "k3.onnx", spec=keras3)
    assert [n for n in right.notes if n.startswith(BACKWARDS_NOTE)], right.notes  # the config says go_backwards
    assert _max_gap(model, tmp_path / "k3.onnx", 3, flip=True) < ATOL
    convert(tmp_path / "m.h5", tmp_path / "k2.onnx", spec=keras2)
    assert _max_gap(model, tmp_path / "k2.onnx", 3, flip=True) > 1e-3


def test_without_keras_version_other_activations_read_alone(tmp_path: Path) -> None:
    """Every activation but hard_sigmoid means the same in Keras 2 and 3: no spec= needed."""
    model = _model(keras.layers.GRU(3, activation="relu", return_sequences=True, name="g"), 2)
    model.save(tmp_path / "full.h5")
    _without_version(tmp_path / "full.h5", tmp_path / "m.h5")
    result = convert(tmp_path / "m.h5", tmp_path / "m.onnx")
    assert result.spec == "gru,input=2,hidden=3,act=Sigmoid/Relu" and result.notes == []
    assert _max_gap(model, tmp_path / "m.onnx", 2, flip=False) < ATOL


def test_rnnx_written_weights_h5_needs_no_note(tmp_path: Path) -> None:
    """A .weights.h5 rnnx wrote records its spec: read whole, nothing is assumed."""
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3,layers=2"), seed=3), tmp_path / "w.weights.h5")
    assert convert(tmp_path / "w.weights.h5", tmp_path / "w.onnx").notes == []
