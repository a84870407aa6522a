"""The files "from the wild" (tests/fixtures/wild) are what their manifest says they are.

They were made by their real producers (tf_keras, tf2onnx, onnxruntime's quantizer) in the
pinned environment of tools/wild_fixtures, which the tests do not install. This module proves
the fixtures themselves, not rnnx: every file is listed with its checksum, the recorded arrays
have the shapes the described model gives, each HDF5 file holds the layers and weight shapes
its manifest entry names, and each ONNX file run in ONNX Runtime gives the outputs its producer
recorded. Other test modules check what rnnx makes of these files.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
MANIFEST = json.loads((WILD / "manifest.json").read_text())
FILES = {name: entry for name, entry in MANIFEST.items() if not name.startswith("_")}
H5 = sorted(n for n, e in FILES.items() if e["format"] == "keras2_h5")
ONNX = sorted(n for n, e in FILES.items() if e["format"] == "onnx")
BATCHES = {"b1": 1, "b3": 3}
FLOAT_ATOL = 2e-6  # TensorFlow against ONNX Runtime, float32, T <= 6: seen up to 2.7e-7
GATES = {"LSTM": 4, "CuDNNLSTM": 4, "GRU": 3, "CuDNNGRU": 3, "SimpleRNN": 1}


def _arrays(entry: dict) -> dict[str, np.ndarray]:
    with np.load(WILD / entry["outputs"]) as data:
        return dict(data)


def _out_width(layer: dict) -> int:
    both = layer["cls"] == "Bidirectional" and layer.get("merge_mode") == "concat"
    return layer["units"] * (2 if both else 1)


def test_manifest_lists_every_file_with_its_checksum_and_the_set_stays_small() -> None:
    on_disk = {p.name for p in WILD.iterdir()} - {"manifest.json"}
    listed = set(FILES) | {e["outputs"] for e in FILES.values()}
    assert on_disk == listed, f"unlisted: {sorted(on_disk - listed)}, missing: {sorted(listed - on_disk)}"
    for name, entry in FILES.items():
        assert hashlib.sha256((WILD / name).read_bytes()).hexdigest() == entry["sha256"], name
    assert sum(p.stat().st_size for p in WILD.iterdir()) < 2 * 1024 * 1024
    assert len(H5) >= 20 and len(ONNX) >= 21


@pytest.mark.parametrize("name", sorted(FILES))
def test_recorded_arrays_have_the_shapes_the_described_model_gives(name: str) -> None:
    entry = FILES[name]
    arrays = _arrays(entry)
    last = entry["layers"][-1]
    for tag, batch in BATCHES.items():
        x, y = arrays[f"x_{tag}"], arrays[f"y_{tag}"]
        assert x.dtype == y.dtype == np.float32
        if entry.get("step"):  # one cell step: no time axis
            assert x.shape == y.shape == (batch, entry["input_size"]) and entry["input_size"] == last["units"]
        else:
            assert x.shape[0] == batch and x.shape[2] == entry["input_size"] and 1 <= x.shape[1] <= 6
            seq = (x.shape[1],) if last.get("return_sequences", True) else ()
            assert y.shape == (batch, *seq, _out_width(last))
        for state in entry.get("initial_state") or ():
            assert arrays[f"{state}_{tag}"].shape == (batch, last["units"])
        assert np.isfinite(y).all() and np.abs(y).max() > 0.05  # an all-zero output would prove nothing


def _keras_class(config_layer: dict) -> str:
    return config_layer["class_name"].split(">")[-1]


@pytest.mark.parametrize("name", H5)
def test_keras2_h5_holds_the_layers_and_weight_shapes_its_entry_names(name: str) -> None:
    h5py = pytest.importorskip("h5py")
    entry = FILES[name]
    with h5py.File(WILD / name, "r") as f:
        weights = f["model_weights"] if "model_weights" in f else f
        assert str(weights.attrs["keras_version"]).startswith("2."), "made by Keras 2 (tf_keras)"
        layer_names = [n.decode() if isinstance(n, bytes) else n for n in weights.attrs["layer_names"]]
        # A Functional model lists its InputLayer too, holding no weights.
        assert [n for n in layer_names if len(weights[n].attrs["weight_names"])] == [layer["name"] for layer in entry["layers"]]
        if "model_weights" in f:
            config = json.loads(f.attrs["model_config"])["config"]["layers"]
            recurrent = [c for c in config if _keras_class(c) != "InputLayer"]
            assert [_keras_class(c) for c in recurrent] == [layer["cls"] for layer in entry["layers"]]
            for c, layer in zip(recurrent, entry["layers"]):
                inner = c["config"]["layer"]["config"] if layer["cls"] == "Bidirectional" else c["config"]
                for key in ("units", "activation", "recurrent_activation", "reset_after", "go_backwards", "return_sequences"):
                    if key in layer:
                        assert inner[key] == layer[key], (key, inner[key], layer[key])
        width = entry["input_size"]
        for layer in entry["layers"]:
            group = weights[layer["name"]]
            names = [n.decode() if isinstance(n, bytes) else n for n in group.attrs["weight_names"]]
            shapes = [group[n].shape for n in names]
            cls, h = layer.get("wraps", layer["cls"]), layer["units"]
            if cls == "Dense":
                assert shapes == [(width, h), (h,)][: 2 if layer["use_bias"] else 1], (layer["name"], shapes)
                width = h
                continue
            g = GATES[cls]
            bias = {"LSTM": (4 * h,), "CuDNNLSTM": (8 * h,), "CuDNNGRU": (6 * h,), "SimpleRNN": (h,),
                    "GRU": (2, 3 * h) if layer.get("reset_after") else (3 * h,)}[cls]
            one_direction = [(width, g * h), (h, g * h), bias][: 3 if layer.get("use_bias", True) else 2]
            assert shapes == one_direction * (2 if layer["cls"] == "Bidirectional" else 1), (layer["name"], shapes)
            width = _out_width(layer)


def _run(path: Path, entry: dict, arrays: dict[str, np.ndarray], tag: str, key: str = "y") -> np.ndarray:
    """ONNX Runtime's value of one recorded output (``y``; ``c1`` for an LSTM cell step)."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {graph_name: arrays[f"{k}_{tag}"] for k, graph_name in entry.get("inputs", {"x": entry["input_name"]}).items()}
    assert sorted(feeds) == sorted(i.name for i in session.get_inputs())
    return session.run([entry.get("output_names", {"y": entry["output_name"]})[key]], feeds)[0]


@pytest.mark.parametrize("name", ONNX)
def test_onnx_fixture_has_its_recorded_ops_and_runs_to_its_producers_outputs(name: str) -> None:
    onnx = pytest.importorskip("onnx")
    entry = FILES[name]
    model = onnx.load(WILD / name)
    onnx.checker.check_model(model)
    assert {o.domain: o.version for o in model.opset_import}.get("", None) == entry["opset"]
    ops: dict[str, int] = {}
    for n in model.graph.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        ops[key] = ops.get(key, 0) + 1
    assert ops == entry["ops"]
    arrays = _arrays(entry)
    for tag in BATCHES:
        got = _run(WILD / name, entry, arrays, tag)
        if "quantized_from" in entry:
            np.testing.assert_allclose(arrays[f"y_float_ort_{tag}"], arrays[f"y_producer_float_{tag}"], rtol=0, atol=FLOAT_ATOL)
            _quantized_outputs_as_this_kernel_gives_them(WILD / name, entry, arrays, tag, got)
        else:
            for key in entry.get("output_names", {"y": None}):
                np.testing.assert_allclose(_run(WILD / name, entry, arrays, tag, key), arrays[f"{key}_{tag}"], rtol=0, atol=FLOAT_ATOL)


def _quantized_outputs_as_this_kernel_gives_them(path: Path, entry: dict, arrays: dict[str, np.ndarray], tag: str, got: np.ndarray) -> None:
    """ONNX Runtime's int8 LSTM depends on the CPU: the recording was made where its kernel
    saturates int16 pair sums (x86 without VNNI), and its full-range weights took the outputs
    far from the float model's. Where this machine's kernel saturates too (the probe says so),
    the recorded bits come back; where it is exact, the outputs lie within the quantization
    bound of the float producer's, and the recording lies outside it: both behaviours are
    checked against what the file is, on any CPU."""
    import onnx

    import rnnx
    from rnnx.engines.ort_int8 import int8_pair_sums_saturate
    from rnnx.formats.onnx_quantized import error_bound, main_graph_quantizations

    source = rnnx.load(WILD / entry["quantized_from"])
    layers = main_graph_quantizations(onnx.load(str(path)))
    bound = error_bound(layers, source, {"X": arrays[f"x_{tag}"].transpose(1, 0, 2).astype(np.float64)}, True)
    want = arrays[f"y_producer_float_{tag}"]
    recorded_err = float(np.abs(arrays[f"y_{tag}"] - want).max())
    assert recorded_err > bound, "the recording came from a saturating kernel: it should lie outside the rounding bound"
    saturates = int8_pair_sums_saturate()
    if saturates is True:
        np.testing.assert_allclose(got, arrays[f"y_{tag}"], rtol=0, atol=1e-6)
    elif saturates is False:
        assert 1e-5 < float(np.abs(got - want).max()) <= bound  # int8 moved it, within its rounding


def test_a_file_with_two_gates_swapped_misses_the_recorded_outputs(tmp_path: Path) -> None:
    """The check above has teeth: swap two gate blocks of the LSTM's input weights and ORT disagrees."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    name = "t2o_lstm.onnx"
    entry = FILES[name]
    model = onnx.load(WILD / name)
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    w = next(i for i in model.graph.initializer if i.name == lstm.input[1])
    arr = numpy_helper.to_array(w).copy()  # [dirs, 4H, in], ONNX gate order i, o, f, c
    h = arr.shape[1] // 4
    arr[:, :h], arr[:, h:2 * h] = arr[:, h:2 * h].copy(), arr[:, :h].copy()
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    bad = tmp_path / name
    onnx.save(model, bad)
    arrays = _arrays(entry)
    assert float(np.abs(_run(WILD / name, entry, arrays, "b3") - arrays["y_b3"]).max()) < FLOAT_ATOL
    assert float(np.abs(_run(bad, entry, arrays, "b3") - arrays["y_b3"]).max()) > 100 * FLOAT_ATOL


# --- The Keras 2 files' recorded outputs, reproduced by another Keras from the file's own weights.

def _keras():
    os.environ.setdefault("KERAS_BACKEND", "torch")
    return pytest.importorskip("keras")


def _keras2_hard_sigmoid(x):
    """Keras 2's hard_sigmoid: clip(0.2x + 0.5, 0, 1). Keras 3's (x/6 + 0.5) is another function."""
    keras = _keras()
    return keras.ops.clip(0.2 * x + 0.5, 0.0, 1.0)


def _keras3_layer(layer: dict, keras2_hard_sigmoid: bool = True):
    """The Keras 3 layer that computes what one described Keras 2 layer computes (cuDNN layers: their plain twin)."""
    keras = _keras()
    cls = {"CuDNNLSTM": "LSTM", "CuDNNGRU": "GRU"}.get(layer.get("wraps", layer["cls"]), layer.get("wraps", layer["cls"]))
    kw = {k: layer[k] for k in ("units", "activation", "use_bias", "go_backwards", "return_sequences", "reset_after") if k in layer}
    if cls in ("LSTM", "GRU"):
        recurrent = layer.get("recurrent_activation", "sigmoid")
        kw["recurrent_activation"] = _keras2_hard_sigmoid if recurrent == "hard_sigmoid" and keras2_hard_sigmoid else recurrent
    if layer["cls"] == "CuDNNGRU":
        kw["reset_after"] = True
    if cls == "Dense":
        kw.pop("return_sequences", None)
    made = getattr(keras.layers, cls)(**kw)
    return keras.layers.Bidirectional(made, merge_mode=layer["merge_mode"]) if layer["cls"] == "Bidirectional" else made


def _keras3_model(entry: dict, keras2_hard_sigmoid: bool = True):
    keras = _keras()
    return keras.Sequential([keras.Input((None, entry["input_size"]))]
                            + [_keras3_layer(layer, keras2_hard_sigmoid) for layer in entry["layers"]])


def _max_error(model, arrays: dict[str, np.ndarray]) -> float:
    keras = _keras()
    return max(float(np.abs(keras.ops.convert_to_numpy(model(arrays[f"x_{t}"])) - arrays[f"y_{t}"]).max()) for t in BATCHES)


PLAIN_WEIGHTS = sorted(n for n in H5 if n.endswith("_weights.h5") and "cudnn" not in n)
CUDNN_WEIGHTS = sorted(n for n in H5 if n.endswith("_weights.h5") and "cudnn" in n)


@pytest.mark.parametrize("name", PLAIN_WEIGHTS)
def test_keras3_loading_the_keras2_weights_file_gives_the_recorded_outputs(name: str) -> None:
    entry = FILES[name]
    model = _keras3_model(entry)
    model.load_weights(WILD / name)  # Keras's own legacy HDF5 weights reader
    assert _max_error(model, _arrays(entry)) < FLOAT_ATOL


def test_keras3s_own_hard_sigmoid_misses_a_keras2_hard_sigmoid_file() -> None:
    """The trap the issue names: the same name, another function; the recorded outputs tell them apart."""
    entry = FILES["k2_lstm_hard_sigmoid_weights.h5"]
    model = _keras3_model(entry, keras2_hard_sigmoid=False)
    model.load_weights(WILD / "k2_lstm_hard_sigmoid_weights.h5")
    assert _max_error(model, _arrays(entry)) > 1e-2


def _from_cudnn(weights: list[np.ndarray], gates: int, lstm: bool) -> list[np.ndarray]:
    """tf_keras's hdf5_format._convert_rnn_weights, cuDNN to plain: per gate, the input kernel is
    read back in Fortran order and the recurrent kernel transposed; LSTM sums its two bias
    halves, GRU keeps them as rows (input, recurrent)."""
    kernel, recurrent, bias = weights
    kernel = np.hstack([k.T.reshape(k.shape, order="F") for k in np.hsplit(kernel, gates)])
    recurrent = np.hstack([k.T for k in np.hsplit(recurrent, gates)])
    bias = bias.reshape(2, -1).sum(axis=0) if lstm else bias.reshape(2, -1)
    return [kernel, recurrent, bias]


@pytest.mark.parametrize("name", CUDNN_WEIGHTS)
def test_cudnn_layer_files_give_the_recorded_outputs_through_tf_keras_conversion(name: str) -> None:
    h5py = pytest.importorskip("h5py")
    entry = FILES[name]
    (layer,) = entry["layers"]
    with h5py.File(WILD / name, "r") as f:
        group = f[layer["name"]]
        weights = [group[n.decode() if isinstance(n, bytes) else n][()] for n in group.attrs["weight_names"]]
    model = _keras3_model(entry)
    lstm = layer["cls"] == "CuDNNLSTM"
    model.layers[-1].set_weights(_from_cudnn(weights, GATES[layer["cls"]], lstm))
    assert _max_error(model, _arrays(entry)) < FLOAT_ATOL
    # Read as if the cuDNN kernel were a plain one, the file gives other outputs.
    model.layers[-1].set_weights([weights[0], *_from_cudnn(weights, GATES[layer["cls"]], lstm)[1:]])
    assert _max_error(model, _arrays(entry)) > 1e-3


@pytest.mark.parametrize("name", sorted(n for n in H5 if n.endswith(".model.h5")))
def test_whole_model_file_holds_the_same_arrays_as_its_weights_file(name: str) -> None:
    h5py = pytest.importorskip("h5py")
    twin = name.replace(".model.h5", "_weights.h5")
    with h5py.File(WILD / name, "r") as whole, h5py.File(WILD / twin, "r") as alone:
        seen: dict[str, np.ndarray] = {}
        alone.visititems(lambda path, obj: seen.__setitem__(path, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        assert seen
        for path, value in seen.items():
            np.testing.assert_array_equal(whole["model_weights"][path][()], value)
