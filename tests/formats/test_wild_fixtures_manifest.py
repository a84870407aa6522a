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
    assert len(H5) >= 20 and len(ONNX) >= 10


@pytest.mark.parametrize("name", sorted(FILES))
def test_recorded_arrays_have_the_shapes_the_described_model_gives(name: str) -> None:
    entry = FILES[name]
    arrays = _arrays(entry)
    last = entry["layers"][-1]
    for tag, batch in BATCHES.items():
        x, y = arrays[f"x_{tag}"], arrays[f"y_{tag}"]
        assert x.dtype == y.dtype == np.float32
        assert x.shape[0] == batch and x.shape[2] == entry["input_size"] and 1 <= x.shape[1] <= 6
        seq = (x.shape[1],) if last.get("return_sequences", True) else ()
        assert y.shape == (batch, *seq, _out_width(last))
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
        assert layer_names == [layer["name"] for layer in entry["layers"]]
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
            cls = layer.get("wraps", layer["cls"])
            g, h = GATES[cls], layer["units"]
            bias = {"LSTM": (4 * h,), "CuDNNLSTM": (8 * h,), "CuDNNGRU": (6 * h,), "SimpleRNN": (h,),
                    "GRU": (2, 3 * h) if layer.get("reset_after") else (3 * h,)}[cls]
            one_direction = [(width, g * h), (h, g * h), bias]
            assert shapes == one_direction * (2 if layer["cls"] == "Bidirectional" else 1), (layer["name"], shapes)
            width = _out_width(layer)


def _run(path: Path, entry: dict, x: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([entry["output_name"]], {entry["input_name"]: x})[0]


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
        got = _run(WILD / name, entry, arrays[f"x_{tag}"])
        if "quantized_from" in entry:
            # Same ONNX Runtime build as recorded them: its own outputs again, and within the
            # recorded error of the float producer's.
            np.testing.assert_allclose(got, arrays[f"y_{tag}"], rtol=0, atol=1e-6)
            np.testing.assert_allclose(arrays[f"y_float_ort_{tag}"], arrays[f"y_producer_float_{tag}"], rtol=0, atol=FLOAT_ATOL)
            err = float(np.abs(got - arrays[f"y_producer_float_{tag}"]).max())
            assert 1e-4 < err <= entry["max_abs_error_vs_float"] + 1e-7 and err < 0.25  # int8 moved it, but not far
        else:
            np.testing.assert_allclose(got, arrays[f"y_{tag}"], rtol=0, atol=FLOAT_ATOL)


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
    x, y = (lambda a: (a["x_b3"], a["y_b3"]))(_arrays(entry))
    assert float(np.abs(_run(bad, entry, x) - y).max()) > 100 * FLOAT_ATOL
