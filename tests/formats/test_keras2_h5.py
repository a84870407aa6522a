"""Keras's legacy HDF5 files (``keras_h5``), read from files their real producers wrote.

* Keras 3's own legacy writer (``model.save("x.h5")``, and ``save_weights_to_hdf5_group``, the
  function behind Keras 2's ``save_weights("x.h5")``): its layers run here (torch backend) and
  the weights rnnx reads must give their outputs through the float64 reference.
* Keras 2 files made by tf_keras (tests/fixtures/wild, built by tools/ with their producer's
  recorded outputs): converted by the rnnx command, run in ONNX Runtime (and torch where
  torch can hold the math) and matched to those outputs.
* Hostile variants of these files: each refused in one line, exit status 2.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
h5py = pytest.importorskip("h5py")

import rnnx  # noqa: E402
from rnnx import (  # noqa: E402
    RNNSpec,
    RNNWeights,
    RNNXError,
    cli,  # noqa: E402
    reference,
)

ATOL = 1e-5  # Keras float32 against the float64 reference
WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    keras.utils.set_random_seed(zlib.crc32(request.node.nodeid.encode()))


def _np(x: object) -> np.ndarray:
    return keras.ops.convert_to_numpy(x)


def _reference_y(weights: RNNWeights, x: np.ndarray) -> np.ndarray:
    """The reference's output, batch-first, in the order Keras returns it (go_backwards: last step first)."""
    y = reference.forward(weights, x, batch_first=True).y
    return y[:, ::-1] if weights.spec.direction == "reverse" else y


# Each layer of one Keras 3 model, with the spec its legacy .h5 must be read as.
STACK = {
    "enc": ("lstm,input=3,hidden=4", lambda: keras.layers.LSTM(4, return_sequences=True, name="enc")),
    "back": ("gru,input=4,hidden=5,reverse,reset_before",
             lambda: keras.layers.GRU(5, reset_after=False, go_backwards=True, return_sequences=True, name="back")),
    "both": ("gru,input=5,hidden=3,bidirectional", lambda: keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True), name="both")),
    "relu": ("rnn_relu,input=6,hidden=2,no_bias",
             lambda: keras.layers.SimpleRNN(2, activation="relu", use_bias=False, return_sequences=True, name="relu")),
    "pair": ("lstm,input=2,hidden=2,bidirectional,no_bias",
             lambda: keras.layers.Bidirectional(keras.layers.LSTM(2, use_bias=False, return_sequences=True), name="pair")),
}


def _keras3_model() -> keras.Model:
    layers = [keras.Input((None, 3))] + [make() for _, make in STACK.values()] + [keras.layers.Dense(2, name="head")]
    model = keras.Sequential(layers)
    # Keras initialises biases to zero: move every array, so that a misplaced bias shows too.
    for layer in model.layers:
        rng = np.random.default_rng(zlib.crc32(layer.name.encode()))
        layer.set_weights([w + rng.uniform(-0.3, 0.3, w.shape).astype(w.dtype) for w in layer.get_weights()])
    return model


def _layer_inputs_and_outputs(model: keras.Model, x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    seen, h = {}, x
    for layer in model.layers:
        out = _np(layer(h))
        seen[layer.name] = (h, out)
        h = out
    return seen


def test_keras3_whole_model_h5_read_with_its_specs(tmp_path: Path) -> None:
    model = _keras3_model()
    path = tmp_path / "m.h5"
    model.save(path)
    assert rnnx.groups(path) == list(STACK)
    with pytest.raises(RNNXError, match=r"m.h5: 5 recurrent layers \('enc', 'back', 'both', 'relu', 'pair'\); pass select=GROUP$"):
        rnnx.load(path)
    with pytest.raises(RNNXError, match=r"m.h5: no recurrent layer 'head'; layers are 'enc'"):
        rnnx.load(path, select="head")
    for T, B in ((1, 1), (6, 2), (9, 3)):
        x = np.random.default_rng(T).standard_normal((B, T, 3)).astype(np.float32)
        seen = _layer_inputs_and_outputs(model, x)
        for name, (text, _) in STACK.items():
            weights = rnnx.load(path, select=name)
            assert weights.spec == RNNSpec.parse(text), name
            layer_in, want = seen[name]
            np.testing.assert_allclose(_reference_y(weights, layer_in), want, atol=ATOL, err_msg=name)
    # --from keras reads the same file: the Keras 3 reader hands the legacy layout on.
    assert rnnx.load(path, format="keras", select="both").equal(rnnx.load(path, select="both"))


def test_keras3_hard_sigmoid_in_an_h5_is_keras3s(tmp_path: Path) -> None:
    """keras_version 3.x: hard_sigmoid is x/6+0.5 (HardSigmoid alpha 1/6), as Keras 3 itself computes."""
    layer = keras.layers.GRU(4, recurrent_activation="hard_sigmoid", activation="softsign", return_sequences=True, name="g")
    model = keras.Sequential([keras.Input((None, 3)), layer])
    model.set_weights([w + np.random.default_rng(7).uniform(-0.8, 0.8, w.shape).astype(w.dtype) for w in model.get_weights()])
    model.save(tmp_path / "h.h5")
    weights = rnnx.load(tmp_path / "h.h5")
    assert weights.spec.activations == (rnnx.spec.Activation("HardSigmoid", 1 / 6, 0.5), rnnx.spec.Activation("Softsign"))
    x = 3 * np.random.default_rng(8).standard_normal((2, 9, 3)).astype(np.float32)  # reach hard_sigmoid's clipped ends
    np.testing.assert_allclose(_reference_y(weights, x), _np(model(x)), atol=ATOL)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_keras3_activations_are_read_from_its_files(suffix: str, tmp_path: Path) -> None:
    """A Keras 3 file's own activations (here hard_sigmoid as Keras 3 defines it, softsign,
    linear) are read into the spec and reproduce Keras 3's outputs, .keras archive and .h5 alike."""
    model = keras.Sequential([keras.Input((None, 3)),
                              keras.layers.LSTM(4, recurrent_activation="hard_sigmoid", activation="softsign", return_sequences=True, name="l"),
                              keras.layers.SimpleRNN(3, activation="linear", return_sequences=True, name="s")])
    model.set_weights([w + np.random.default_rng(9).uniform(-0.8, 0.8, w.shape).astype(w.dtype) for w in model.get_weights()])
    model.save(tmp_path / f"m{suffix}")
    x = 3 * np.random.default_rng(10).standard_normal((2, 7, 3)).astype(np.float32)
    h = x
    for name, layer in (("l", model.layers[0]), ("s", model.layers[1])):
        weights = rnnx.load(tmp_path / f"m{suffix}", select=name)
        want = _np(layer(h))
        np.testing.assert_allclose(_reference_y(weights, h), want, atol=ATOL, err_msg=name)
        h = want
    assert rnnx.load(tmp_path / f"m{suffix}", select="l").spec.activations[0] == rnnx.spec.Activation("HardSigmoid", 1 / 6, 0.5)


def test_a_keras2_file_named_weights_h5_is_read_as_keras2s(tmp_path: Path) -> None:
    """Keras 3 names its own weights files .weights.h5; a Keras 2 file so named is handed to the legacy reader."""
    path = tmp_path / "old.weights.h5"
    path.write_bytes((WILD / "k2_cudnn_lstm_weights.h5").read_bytes())
    assert rnnx.groups(path) == ["lstm"]
    assert rnnx.load(path).equal(rnnx.load(WILD / "k2_cudnn_lstm.model.h5"))
    # A weights-only CuDNN layer is taken to run forward; spec= may say it ran backwards.
    assert rnnx.load(path, spec="lstm,input=3,hidden=5,reverse").spec.direction == "reverse"


def _weights_only(model: keras.Model, path: Path) -> Path:
    """The weights-only layout Keras 2's save_weights("x.h5") writes, by Keras's own function."""
    from keras.src.legacy.saving import legacy_h5_format

    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)
    return path


def test_weights_only_h5_needs_the_spec_to_say_the_math(tmp_path: Path) -> None:
    model = _keras3_model()
    path = _weights_only(model, tmp_path / "w.h5")
    assert rnnx.groups(path) == list(STACK)
    with pytest.raises(RNNXError, match=r"w.h5: layer 'enc': a weights-only file .* does not record the layer's activations .*; "
                                        r"pass spec= saying them, e.g. spec=lstm,input=3,hidden=4 for a sigmoid recurrent activation, "
                                        r"or spec=lstm,input=3,hidden=4,act=HardSigmoid:0.2:0.5/Tanh/Tanh for Keras 2.s hard_sigmoid"):
        rnnx.load(path, select="enc")
    x = np.random.default_rng(5).standard_normal((2, 7, 3)).astype(np.float32)
    seen = _layer_inputs_and_outputs(model, x)
    for name, (text, _) in STACK.items():
        weights = rnnx.load(path, select=name, spec=text)
        layer_in, want = seen[name]
        np.testing.assert_allclose(_reference_y(weights, layer_in), want, atol=ATOL, err_msg=name)
    with pytest.raises(RNNXError, match=r"w.h5: layer 'back': tensor bias of layer 0 reverse: expected shape \(2, 15\)"):
        rnnx.load(path, select="back", spec="gru,input=4,hidden=5,reverse")  # the bias says reset_before


def test_whole_model_spec_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "m.h5"
    _keras3_model().save(path)
    with pytest.raises(RNNXError, match=r"layer 'both': spec=gru,input=5,hidden=3 disagrees with the file's own spec gru,input=5,hidden=3,bidirectional; drop spec="):
        rnnx.load(path, select="both", spec="gru,input=5,hidden=3")


def test_convert_checks_the_result_in_onnx_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.h5"
    model = _keras3_model()
    model.save(path)
    assert cli.main(["convert", str(path), "-o", str(tmp_path / "both.onnx"), "--select", "both"]) == 0
    import onnxruntime as ort

    x = np.random.default_rng(11).standard_normal((3, 8, 3)).astype(np.float32)
    layer_in, want = _layer_inputs_and_outputs(model, x)["both"]
    session = ort.InferenceSession(str(tmp_path / "both.onnx"), providers=["CPUExecutionProvider"])
    feed = {"X": layer_in.transpose(1, 0, 2), "h0": np.zeros((2, 3, 3), np.float32)}
    y = session.run(None, feed)[0]  # (T, B, 2H): the directions concatenated, as Keras's Bidirectional does
    np.testing.assert_allclose(y.transpose(1, 0, 2), want, atol=ATOL)


# --- Keras 2 files made by tf_keras, with the producer's recorded outputs ---------------------


def _wild() -> dict[str, dict]:
    manifest = json.loads((WILD / "manifest.json").read_text())
    return {name: entry for name, entry in manifest.items() if isinstance(entry, dict) and entry.get("format") == "keras2_h5"}


KERAS2 = _wild()
WHOLE = sorted(n for n, e in KERAS2.items() if e["holds"].startswith("whole model"))
WEIGHTS_ONLY = sorted(n for n, e in KERAS2.items() if e["holds"].startswith("weights only"))


def test_the_wild_keras2_files_are_there() -> None:
    """The fixtures below are parametrized from the manifest: an empty one must not pass silently."""
    assert len(WHOLE) >= 10 and len(WEIGHTS_ONLY) == len(WHOLE), sorted(KERAS2)
    assert {e["producer"] for e in KERAS2.values()} == {"tf_keras"}
    assert {"CuDNNLSTM", "CuDNNGRU", "Bidirectional", "SimpleRNN", "GRU", "LSTM"} <= {layer["cls"] for e in KERAS2.values() for layer in e["layers"]}


def _recorded(entry: dict) -> dict[str, np.ndarray]:
    with np.load(WILD / entry["outputs"]) as f:
        return {k: f[k] for k in f.files}


RECURRENT = ("LSTM", "GRU", "SimpleRNN", "CuDNNLSTM", "CuDNNGRU", "Bidirectional")


def _layer_io(entry: dict, recorded: dict[str, np.ndarray], tag: str) -> dict[str, tuple[np.ndarray, np.ndarray, dict]]:
    """Each recurrent layer's recorded input and output, with its description (a model of
    several layers records each one's output), in model order."""
    io, h, layers = {}, recorded[f"x_{tag}"], entry["layers"]
    for layer in layers:
        out = recorded[f"y_{layer['name']}_{tag}"] if len(layers) > 1 else recorded[f"y_{tag}"]
        if layer["cls"] in RECURRENT:
            io[layer["name"]] = (h, out, layer)
        h = out
    return io


def _as_keras_returns(y: np.ndarray, spec: RNNSpec, layer: dict, want: np.ndarray) -> np.ndarray:
    """A batch-first, time-ordered output (directions concatenated) as Keras returns it: the
    directions merged by the layer's merge_mode, go_backwards last step first, and
    return_sequences=False the last output only."""
    if spec.direction == "bidirectional":
        fwd, bwd = np.split(y, 2, axis=-1)
        y = {"concat": y, "sum": fwd + bwd, "mul": fwd * bwd, "ave": (fwd + bwd) / 2}[layer.get("merge_mode") or "concat"]
    y = y[:, ::-1] if spec.direction == "reverse" else y
    return y[:, -1] if want.ndim == 2 else y


def _load(path: Path, group: str, spec: RNNSpec | None = None) -> tuple[RNNWeights, list[str]]:
    """The layer's weights and the options its conversion needs: a Bidirectional that does not
    concatenate is read only with spec=, which its refusal names."""
    try:
        return rnnx.load(path, select=group, spec=spec), []
    except RNNXError as exc:
        found = re.search(r"merges its directions by '(\w+)' .* pass spec=(\S+) to take them so", str(exc))
        if found is None:
            raise
        return rnnx.load(path, select=group, spec=found.group(2)), ["--spec", found.group(2)]


def _run_onnx(path: Path, x: np.ndarray) -> np.ndarray:
    """ONNX Runtime on a batch-first input; the states start at zero, as Keras's do."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {}
    for i in session.get_inputs():
        if i.name == "X":
            feed[i.name] = x.transpose(1, 0, 2)
        else:
            feed[i.name] = np.zeros([d if isinstance(d, int) else x.shape[0] for d in i.shape], np.float32)
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    return outputs["Y"].transpose(1, 0, 2)


def _run_torch(path: Path, spec: RNNSpec, x: np.ndarray) -> np.ndarray:
    import torch

    kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(spec.cell)
    common = dict(input_size=spec.input_size, hidden_size=spec.hidden_size, bias=spec.bias, batch_first=True,
                  bidirectional=spec.direction == "bidirectional")
    module = kind(**common) if kind else torch.nn.RNN(nonlinearity=spec.cell[4:], **common)
    module.load_state_dict(torch.load(path, weights_only=True))
    with torch.no_grad():
        return module(torch.from_numpy(x))[0].numpy()


@pytest.mark.parametrize("name", WHOLE)
def test_keras2_model_converts_and_runs_as_its_producer_ran_it(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """inspect, convert to ONNX (and torch where torch holds the math), run, and match tf_keras's recorded outputs."""
    entry, path = KERAS2[name], WILD / name
    recorded = _recorded(entry)
    groups = rnnx.groups(path)
    assert groups == [layer["name"] for layer in entry["layers"] if layer["cls"] in RECURRENT]
    loaded = {g: _load(path, g) for g in groups}
    converted: dict[str, dict[str, Path]] = {}
    for g, (w, options) in loaded.items():
        onnx_path = tmp_path / f"{g}.onnx"
        select = ["--select", g, *options] if len(groups) > 1 or options else []
        assert cli.main(["convert", str(path), "-o", str(onnx_path), *select]) == 0
        capsys.readouterr()
        assert cli.main(["inspect", str(onnx_path)]) == 0
        shown = capsys.readouterr().out
        assert {"lstm": "LSTM", "gru": "GRU"}.get(w.spec.cell, "RNN") in shown, shown
        converted[g] = {"onnx": onnx_path}
        pt = tmp_path / f"{g}.pt"
        if rnnx.formats.get("torch").refusals(w.spec):
            line = _cli_refusal(["convert", str(path), "-o", str(pt), *select], capsys)
            assert "torch" in line.lower() and not pt.exists(), line
        else:
            assert cli.main(["convert", str(path), "-o", str(pt), *select]) == 0
            converted[g]["pt"] = pt
    for tag in ("b1", "b3"):
        for g, (layer_in, want, layer) in _layer_io(entry, recorded, tag).items():
            w = loaded[g][0]
            runs = {"reference": reference.forward(w, layer_in, batch_first=True).y,
                    "onnx": _run_onnx(converted[g]["onnx"], layer_in.astype(np.float32))}
            if "pt" in converted[g]:
                runs["torch"] = _run_torch(converted[g]["pt"], w.spec, layer_in.astype(np.float32))
            for runner, y in runs.items():
                np.testing.assert_allclose(_as_keras_returns(y, w.spec, layer, want), want, atol=ATOL, err_msg=f"{name} {runner} {g} {tag}")


@pytest.mark.parametrize("name", WEIGHTS_ONLY)
def test_keras2_weights_only_file_reads_with_the_spec(name: str) -> None:
    """save_weights' file: a CuDNN layer reads alone (its bias marks it); any other needs spec=,
    here the spec its whole-model twin records; either way the producer's outputs come out."""
    entry, path = KERAS2[name], WILD / name
    recorded = _recorded(entry)
    twin = WILD / name.replace("_weights.h5", ".model.h5")
    specs = {g: _load(twin, g)[0].spec for g in rnnx.groups(twin)}
    assert rnnx.groups(path) == list(specs)
    for g, stated in specs.items():
        if entry["layers"][0]["cls"].startswith("CuDNN"):
            assert rnnx.load(path, select=g).spec == stated
        else:
            with pytest.raises(RNNXError, match=r"a weights-only file \(save_weights\) does not record the layer's activations"):
                rnnx.load(path, select=g)
    for tag in ("b1", "b3"):
        for g, (layer_in, want, layer) in _layer_io(entry, recorded, tag).items():
            w = rnnx.load(path, select=g, spec=specs[g])
            y = reference.forward(w, layer_in, batch_first=True).y
            np.testing.assert_allclose(_as_keras_returns(y, w.spec, layer, want), want, atol=ATOL, err_msg=f"{name} {g} {tag}")


@pytest.mark.parametrize("merge", ["sum", "mul", "ave"])
def test_a_bidirectional_not_concatenating_is_read_only_with_the_spec(merge: str, tmp_path: Path) -> None:
    """rnnx's bidirectional concatenates: a layer that merges otherwise is refused until spec=
    states it, and then its halves, merged as Keras does, give Keras's output."""
    layer = keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True), merge_mode=merge, name="merged")
    model = keras.Sequential([keras.Input((None, 2)), layer])
    model.save(tmp_path / "m.h5")
    with pytest.raises(RNNXError, match=rf"m.h5: layer 'merged': Keras Bidirectional\(LSTM\) 'merged' merges its directions by '{merge}' "
                                        r"\(merge_mode\); rnnx's bidirectional gives them concatenated, forward then backward features. "
                                        r"The weights convert exactly: pass spec=lstm,input=2,hidden=3,bidirectional to take them so"):
        rnnx.load(tmp_path / "m.h5")
    weights = rnnx.load(tmp_path / "m.h5", spec="lstm,input=2,hidden=3,bidirectional")
    x = np.random.default_rng(4).standard_normal((2, 6, 2)).astype(np.float32)
    want = _np(model(x))
    got = _as_keras_returns(reference.forward(weights, x, batch_first=True).y, weights.spec, {"merge_mode": merge}, want)
    np.testing.assert_allclose(got, want, atol=ATOL)


def test_a_cudnn_layer_read_as_a_plain_one_misses_the_producers_outputs() -> None:
    """The CuDNN layers' own layout matters: the same arrays read as a plain Keras layer (kernel
    transposed per gate, the two biases summed) are far off, so the tests above can fail."""
    from rnnx.layouts import keras as layout

    for name in ("k2_cudnn_lstm.model.h5", "k2_cudnn_gru.model.h5"):
        recorded = _recorded(KERAS2[name])
        right = rnnx.load(WILD / name)
        with h5py.File(WILD / name) as f:
            group = f["model_weights"][right.spec.cell]
            arrays = [np.asarray(group[n]) for n in group.attrs["weight_names"]]
        if right.spec.cell == "lstm":
            wrong = layout.from_native([arrays[0], arrays[1], arrays[2].reshape(2, -1).sum(0)], right.spec)
        else:
            wrong = layout.from_native([arrays[0], arrays[1], arrays[2].reshape(2, -1)], right.spec)
        x, want = recorded["x_b3"], recorded["y_b3"]
        np.testing.assert_allclose(reference.forward(right, x, batch_first=True).y, want, atol=ATOL)
        assert np.abs(reference.forward(wrong, x, batch_first=True).y - want).max() > 0.05, name


def test_keras2_hard_sigmoid_is_not_keras3s() -> None:
    """Keras 2's hard_sigmoid (0.2x+0.5) gives the producer's outputs; Keras 3's (x/6+0.5) on the same weights does not."""
    name = "k2_lstm_hard_sigmoid.model.h5"
    recorded = _recorded(KERAS2[name])
    weights = rnnx.load(WILD / name)
    from rnnx.layouts.keras import KERAS_ACTIVATIONS

    assert weights.spec.activations[0] == KERAS_ACTIVATIONS[2]["hard_sigmoid"] == rnnx.spec.Activation("HardSigmoid", 0.2, 0.5)
    keras3 = RNNWeights(weights.spec.with_(activations=(KERAS_ACTIVATIONS[3]["hard_sigmoid"], *weights.spec.activations[1:])), weights.tensors)
    x, want = recorded["x_b3"], recorded["y_b3"]
    np.testing.assert_allclose(reference.forward(weights, x, batch_first=True).y, want, atol=ATOL)
    assert np.abs(reference.forward(keras3, x, batch_first=True).y - want).max() > 1e-3


# --- refusals ------------------------------------------------------------------------------


def _cli_refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_model_without_recurrent_layers_is_refused_for_what_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dense.h5"
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d1"), keras.layers.Dense(1, name="d2")]).save(path)
    line = _cli_refusal(["convert", str(path), "-o", str(tmp_path / "o.onnx")], capsys)
    assert "dense.h5: expected an LSTM, GRU, SimpleRNN, CuDNNLSTM or CuDNNGRU layer" in line and "(d1, d2)" in line, line


def test_an_h5_given_to_a_format_that_reads_no_hdf5_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.h5"
    _keras3_model().save(path)
    for other in ("torch", "cudnn", "rnnx"):
        line = _cli_refusal(["convert", str(path), "-o", str(tmp_path / "o.onnx"), "--from", other, "--spec", "lstm,input=3,hidden=4"], capsys)
        assert f"m.h5: an HDF5 file, which format {other} does not read" in line and "--from keras" in line, line


def test_an_hdf5_file_of_neither_keras_layout_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.zeros(3)
    line = _cli_refusal(["convert", str(path), "-o", str(tmp_path / "o.onnx")], capsys)
    assert "other.h5: expected a Keras .h5 file (a layer_names list" in line, line


# --- hostile files: each a real file with one thing broken --------------------------------


# Each attack starts from a real file: Keras 3's legacy writer (names as variable-length
# strings) or tf_keras's (fixed-length ones), its first recurrent layer's kernel the target.
SOURCES = {"keras3": "enc", "tf_keras": "lstm_1"}


def _hostile(tmp_path: Path, source: str, break_it: object) -> Path:
    path = tmp_path / "m.h5"
    if source == "keras3":
        _keras3_model().save(path)
    else:
        path.write_bytes((WILD / "k2_lstm_stack.model.h5").read_bytes())
    with h5py.File(path, "r+") as f:
        break_it(f)  # type: ignore[operator]
    return path


def _kernel_path(f: h5py.File) -> str:
    layer = next(name for name in SOURCES.values() if f"model_weights/{name}" in f)
    names = [bytes(n).decode() if isinstance(n, bytes | np.bytes_) else n for n in f[f"model_weights/{layer}"].attrs["weight_names"]]
    return f"model_weights/{layer}/{names[0]}"


def _external_link(tmp_path: Path) -> object:
    secret = tmp_path / "secret.h5"
    with h5py.File(secret, "w") as s:
        s["kernel"] = np.full((3, 16), 7.0, np.float32)

    def apply(f: h5py.File) -> None:
        target = _kernel_path(f)
        del f[target]
        f[target] = h5py.ExternalLink(str(secret), "kernel")

    return apply


def _replace(make: object) -> object:
    def apply(f: h5py.File) -> None:
        target = _kernel_path(f)
        del f[target]
        make(f, target)  # type: ignore[operator]

    return apply


def _one_column_short(f: h5py.File, target: str) -> None:
    width = f[target.replace("/kernel", "/recurrent_kernel")].shape[1]
    f.create_dataset(target, (3, width - 1), "f4")


def _set_config(text: bytes) -> object:
    def apply(f: h5py.File) -> None:
        f.attrs["model_config"] = text

    return apply


HOSTILE = {
    "external link": (_external_link, "links to another file"),
    "soft link": (lambda tmp: _replace(lambda f, t: f.__setitem__(t, h5py.SoftLink("/model_weights"))), "SoftLink"),
    "external storage": (lambda tmp: _replace(lambda f, t: f.create_dataset(t, (3, 16), "f4", external=[(str(tmp / "secret.bin"), 0, 192)])),
                         "lives in another file"),
    "declared huge": (lambda tmp: _replace(lambda f, t: f.create_dataset(t, (60000, 60000), "f4", chunks=(64, 64), compression="gzip")),
                      "claims more data than the file holds"),
    "config not json": (lambda tmp: _set_config(b"{not json"), "model_config: expected Keras's JSON model config"),
    "config nested": (lambda tmp: _set_config(b"[" * 200_000 + b"]" * 200_000), "model_config: JSON nested too deeply"),
    "config a list": (lambda tmp: _set_config(b"[1, 2]"), "model_config: expected a JSON object"),
    "wrong shape": (lambda tmp: _replace(_one_column_short), "expected shape (3, "),
    "integer weights": (lambda tmp: _replace(lambda f, t: f.create_dataset(t, (3, 16), "i4")), "expected float16/32/64 weights, found int32"),
    "missing array": (lambda tmp: _replace(lambda f, t: None), "weight_names lists"),
    "names not strings": (lambda tmp: lambda f: f[_kernel_path(f).split("/")[0] + "/" + _kernel_path(f).split("/")[1]].attrs.__setitem__(
                              "weight_names", np.arange(3)), "weight_names: expected names (strings), found int64"),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_are_refused_in_one_line(case: str, source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\x07" * 192)
    make, says = HOSTILE[case]
    path = _hostile(tmp_path, source, make(tmp_path))
    before = path.read_bytes()
    line = _cli_refusal(["convert", str(path), "-o", str(tmp_path / "o.onnx"), "--select", SOURCES[source]], capsys)
    assert line.startswith("rnnx convert: ") and "m.h5" in line and says in line, line
    assert path.read_bytes() == before and not (tmp_path / "o.onnx").exists()


def test_nested_models_are_walked(tmp_path: Path) -> None:
    inner = keras.Sequential([keras.Input((None, 3)), keras.layers.LSTM(4, return_sequences=True, name="l1"),
                              keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True), name="b1")], name="inner")
    outer = keras.Sequential([keras.Input((None, 3)), inner, keras.layers.SimpleRNN(3, return_sequences=True, name="s1")], name="outer")
    outer.save(tmp_path / "n.h5")
    assert rnnx.groups(tmp_path / "n.h5") == ["inner/l1", "inner/b1", "s1"]
    x = np.random.default_rng(3).standard_normal((2, 5, 3)).astype(np.float32)
    h1 = _np(inner.layers[0](x))
    weights = rnnx.load(tmp_path / "n.h5", select="inner/b1")
    assert weights.spec == RNNSpec.parse("gru,input=4,hidden=2,bidirectional")
    np.testing.assert_allclose(_reference_y(weights, h1), _np(inner.layers[1](h1)), atol=ATOL)
