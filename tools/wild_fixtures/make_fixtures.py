"""Build the files "from the wild" in tests/fixtures/wild with their real producers.

Run only in the pinned producer environment of requirements.txt (see README.md), never in the
test environment: it imports TensorFlow, tf_keras (Keras 2), Keras 3 on its TensorFlow backend,
tf2onnx and onnxruntime's quantizer. Every file is small, its weights drawn from fixed seeds,
and beside it an .npz holds fixed inputs (batch 1 and batch 3) with the producer's own outputs
on them, so tests can check what rnnx makes of each file against what its producer computed.

    python tools/wild_fixtures/make_fixtures.py [--out tests/fixtures/wild] [--only k2,t2o,q]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import zlib
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.pop("TF_USE_LEGACY_KERAS", None)  # tf_keras is imported by name, Keras 3 as `keras`

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OPSET = 17
# Two batches of different lengths, so a file fixed to one sequence length would show.
BATCHES = {"b1": (1, 5), "b3": (3, 6)}


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def inputs_for(name: str, input_size: int, scale: float = 1.5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed_of("x:" + name))
    return {f"x_{tag}": (scale * rng.standard_normal((b, t, input_size))).astype(np.float32) for tag, (b, t) in BATCHES.items()}


def randomize(layers: list, name: str, spread: float = 0.8) -> None:
    """Move every weight, biases included (Keras starts them at zero), so a misplaced array shows."""
    rng = np.random.default_rng(seed_of("w:" + name))
    for layer in layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.uniform(-spread, spread, w.shape).astype(w.dtype) for w in weights])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def describe_layer(layer) -> dict:
    """What a reader must know about one recurrent layer, taken from the layer's own config."""
    cfg = layer.get_config()
    cls = type(layer).__name__
    if cls == "Bidirectional":
        inner = describe_layer(layer.forward_layer)
        inner.update(cls="Bidirectional", name=layer.name, merge_mode=cfg.get("merge_mode"), wraps=inner["cls"])
        return inner
    keep = ("units", "activation", "recurrent_activation", "use_bias", "reset_after", "go_backwards",
            "return_sequences", "return_state", "unit_forget_bias", "time_major")
    out = {"cls": cls, "name": layer.name}
    out.update({k: cfg[k] for k in keep if k in cfg})
    return out


def op_summary(model) -> dict:
    """Op types of the main graph, and of each Loop/Scan body, counted."""
    main = collections.Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in model.graph.node)
    bodies = []
    for n in model.graph.node:
        for a in n.attribute:
            if a.g and a.g.node:
                bodies.append({"node": n.op_type, "attribute": a.name,
                               "ops": dict(sorted(collections.Counter(b.op_type for b in a.g.node).items()))})
    recurrent = sorted({k for k in main if k.split(".")[-1] in ("LSTM", "GRU", "RNN", "DynamicQuantizeLSTM", "Loop", "Scan")})
    return {"ops": dict(sorted(main.items())), "subgraphs": bodies, "recurrence_carriers": recurrent}


# ---------------------------------------------------------------------------- Keras 2 (tf_keras)

def keras2_group(out: Path, manifest: dict) -> None:
    import tensorflow as tf
    import tf_keras
    from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

    L = tf_keras.layers
    producer = {"producer": "tf_keras", "tf_keras": tf_keras.__version__, "tensorflow": tf.__version__}

    # name -> (input size, builder of the recurrent layers, note)
    models = {
        "k2_lstm": (3, lambda: [L.LSTM(5, return_sequences=True, name="lstm")],
                    "tf_keras 2.21's LSTM default recurrent_activation is sigmoid"),
        "k2_lstm_hard_sigmoid": (4, lambda: [L.LSTM(4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm")],
                                 "hard_sigmoid as Keras 2 defines it: clip(0.2x+0.5, 0, 1)"),
        "k2_gru_reset_before": (3, lambda: [L.GRU(5, reset_after=False, return_sequences=True, name="gru")], ""),
        "k2_gru_reset_after": (4, lambda: [L.GRU(4, reset_after=True, return_sequences=True, name="gru")], ""),
        "k2_simplernn_tanh": (3, lambda: [L.SimpleRNN(5, return_sequences=True, name="rnn")], ""),
        "k2_simplernn_relu": (5, lambda: [L.SimpleRNN(4, activation="relu", return_sequences=True, name="rnn")], ""),
        "k2_bilstm": (3, lambda: [L.Bidirectional(L.LSTM(4, return_sequences=True), name="bilstm")], "merge_mode concat: forward then backward features"),
        "k2_lstm_stack": (3, lambda: [L.LSTM(5, return_sequences=True, name="lstm_1"), L.LSTM(5, return_sequences=True, name="lstm_2")], ""),
        "k2_lstm_go_backwards": (4, lambda: [L.LSTM(5, go_backwards=True, return_sequences=True, name="lstm")],
                                 "go_backwards: outputs come last step first, as Keras returns them"),
        "k2_gru_last": (3, lambda: [L.GRU(4, return_sequences=False, name="gru")], "return_sequences=False: y is the last output only"),
    }
    models["k2_functional"] = (4, lambda: [L.LSTM(4, return_sequences=True, name="lstm"), L.GRU(3, reset_after=False, return_sequences=True, name="gru")],
                               "a Functional model (model_config class_name Functional, layers wired by inbound_nodes)")
    for name, (input_size, build, note) in models.items():
        tf_keras.utils.set_random_seed(seed_of(name))
        if name == "k2_functional":
            h = inputs = tf_keras.Input((None, input_size), name="x")
            for layer in build():
                h = layer(h)
            model = tf_keras.Model(inputs, h, name=name)
        else:
            model = tf_keras.Sequential([tf_keras.Input((None, input_size))] + build(), name=name)
        recurrent = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]
        randomize(recurrent, name, spread=1.0 if "hard_sigmoid" in name else 0.8)
        scale = 2.5 if "hard_sigmoid" in name else 1.5  # reach hard_sigmoid's clipped ends
        arrays = inputs_for(name, input_size, scale)
        for tag in BATCHES:
            arrays[f"y_{tag}"] = model(arrays[f"x_{tag}"]).numpy()
            if len(recurrent) > 1:
                h = arrays[f"x_{tag}"]
                for layer in recurrent:
                    h = layer(h).numpy()
                    arrays[f"y_{layer.name}_{tag}"] = h
        whole, weights_only = out / f"{name}.model.h5", out / f"{name}_weights.h5"
        model.save(whole, save_format="h5")
        model.save_weights(weights_only, save_format="h5")
        if name == "k2_lstm":
            # tf_keras (2.13 on) writes a name ending ".weights.h5" in Keras 3's weights layout, not the legacy one.
            v3 = out / f"{name}.weights.h5"
            model.save_weights(v3)
            manifest[v3.name] = {**producer, "format": "keras3_weights_h5", "holds": "weights only (save_weights to a "
                                 "name ending .weights.h5: Keras 3's layout, layers/<name>/cell/vars/<i>)",
                                 "input_size": input_size, "layers": [describe_layer(layer) for layer in recurrent],
                                 "outputs": f"{name}.npz", "initial_state": None, "note": note, "sha256": sha256(v3)}
        # The producer reads its own files back and must reproduce its outputs.
        again = tf_keras.models.load_model(whole, compile=False)
        np.testing.assert_allclose(again(arrays["x_b3"]).numpy(), arrays["y_b3"], rtol=0, atol=1e-6)
        np.savez(out / f"{name}.npz", **arrays)
        layers = [describe_layer(layer) for layer in recurrent]
        for path, kind in ((whole, "whole model (model.save h5)"), (weights_only, "weights only (save_weights h5)")):
            manifest[path.name] = {**producer, "format": "keras2_h5", "holds": kind, "input_size": input_size,
                                   "layers": layers, "outputs": f"{name}.npz", "initial_state": None,
                                   "note": note, "sha256": sha256(path)}

    # CuDNNLSTM / CuDNNGRU: built and saved here, but they run only on a GPU. Their outputs are
    # the plain layer's after tf_keras's own loader converted the cuDNN weights
    # (model.load_weights -> hdf5_format.preprocess_weights_for_loading -> _convert_rnn_weights).
    cudnn = {
        "k2_cudnn_lstm": (3, lambda: CuDNNLSTM(5, return_sequences=True, name="lstm"),
                          lambda: L.LSTM(5, return_sequences=True, name="lstm")),
        "k2_cudnn_gru": (3, lambda: CuDNNGRU(4, return_sequences=True, name="gru"),
                         lambda: L.GRU(4, reset_after=True, recurrent_activation="sigmoid", return_sequences=True, name="gru")),
    }
    for name, (input_size, make_cudnn, make_plain) in cudnn.items():
        tf_keras.utils.set_random_seed(seed_of(name))
        model = tf_keras.Sequential([tf_keras.Input((None, input_size)), make_cudnn()], name=name)
        randomize(model.layers, name)
        whole, weights_only = out / f"{name}.model.h5", out / f"{name}_weights.h5"
        model.save(whole, save_format="h5")
        model.save_weights(weights_only, save_format="h5")
        plain = tf_keras.Sequential([tf_keras.Input((None, input_size)), make_plain()], name=name)
        plain.load_weights(whole)
        plain_w = tf_keras.Sequential([tf_keras.Input((None, input_size)), make_plain()], name=name)
        plain_w.load_weights(weights_only)
        arrays = inputs_for(name, input_size)
        for tag in BATCHES:
            arrays[f"y_{tag}"] = plain(arrays[f"x_{tag}"]).numpy()
            np.testing.assert_array_equal(plain_w(arrays[f"x_{tag}"]).numpy(), arrays[f"y_{tag}"])
        np.savez(out / f"{name}.npz", **arrays)
        layers = [describe_layer(layer) for layer in model.layers]
        plain_layer = describe_layer(plain.layers[0])
        for path, kind in ((whole, "whole model (model.save h5)"), (weights_only, "weights only (save_weights h5)")):
            manifest[path.name] = {**producer, "format": "keras2_h5", "holds": kind, "input_size": input_size,
                                   "layers": layers, "outputs": f"{name}.npz", "initial_state": None,
                                   "outputs_from": {"layer": plain_layer, "how": "plain tf_keras layer, model.load_weights(this file): "
                                                    "tf_keras converts cuDNN weights in hdf5_format._convert_rnn_weights"},
                                   "note": "cuDNN layers run only on a GPU; their math is the plain layer's with sigmoid "
                                           "recurrent activation (GRU: reset_after=True); LSTM bias holds 8*units (input and "
                                           "recurrent halves, summed by the converter)",
                                   "sha256": sha256(path)}


# ------------------------------------------------------------------- tf2onnx of Keras 3 models

def tf2onnx_group(out: Path, manifest: dict) -> None:
    import keras
    import tensorflow as tf
    import tf2onnx
    import tf_keras

    K3, K2 = keras.layers, tf_keras.layers
    producer = {"producer": "tf2onnx", "tf2onnx": tf2onnx.__version__, "tensorflow": tf.__version__}
    made_by = {"keras3": {"keras": keras.__version__, "keras_backend": keras.backend.backend()},
               "tf_keras": {"tf_keras": tf_keras.__version__}}
    # name -> (Keras that made the model, input size, builder of the recurrent layers, note)
    models = {
        "t2o_gru_reset_after": ("keras3", 3, lambda: [K3.GRU(4, return_sequences=True, name="gru")], "Keras 3 default GRU (reset_after=True)"),
        "t2o_gru_reset_before": ("keras3", 4, lambda: [K3.GRU(5, reset_after=False, return_sequences=True, name="gru")], ""),
        "t2o_simplernn": ("keras3", 3, lambda: [K3.SimpleRNN(5, return_sequences=True, name="rnn")], ""),
        "t2o_lstm": ("keras3", 4, lambda: [K3.LSTM(5, return_sequences=True, name="lstm")], ""),
        "t2o_bigru": ("keras3", 3, lambda: [K3.Bidirectional(K3.GRU(4, return_sequences=True), name="bigru")], "merge_mode concat"),
        "t2o_gru_stack": ("keras3", 3, lambda: [K3.GRU(5, return_sequences=True, name="gru_1"), K3.GRU(4, return_sequences=True, name="gru_2")], ""),
        "t2o_bilstm": ("keras3", 3, lambda: [K3.Bidirectional(K3.LSTM(4, return_sequences=True), name="bilstm")], "merge_mode concat"),
        "t2o_gru_last": ("keras3", 4, lambda: [K3.GRU(4, return_sequences=False, name="gru")], "return_sequences=False"),
        "t2o_gru_go_backwards": ("keras3", 3, lambda: [K3.GRU(4, go_backwards=True, return_sequences=True, name="gru")],
                                 "go_backwards: outputs come last step first, as Keras returns them"),
        "t2o_simplernn_relu": ("keras3", 4, lambda: [K3.SimpleRNN(5, activation="relu", return_sequences=True, name="rnn")], ""),
        "t2o_lstm_hard_sigmoid": ("keras3", 3, lambda: [K3.LSTM(4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm")],
                                  "Keras 3's hard_sigmoid: clip(x/6+0.5, 0, 1)"),
        "t2o_k2_lstm_hard_sigmoid": ("tf_keras", 3, lambda: [K2.LSTM(4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm")],
                                     "a Keras 2 (tf_keras) model; Keras 2's hard_sigmoid: clip(0.2x+0.5, 0, 1)"),
        "t2o_k2_gru_reset_after": ("tf_keras", 4, lambda: [K2.GRU(5, return_sequences=True, name="gru")], "a Keras 2 (tf_keras) model"),
        "t2o_k2_lstm": ("tf_keras", 4, lambda: [K2.LSTM(4, return_sequences=True, name="lstm")], "a Keras 2 (tf_keras) model"),
    }
    for name, (framework, input_size, build, note) in models.items():
        K = keras if framework == "keras3" else tf_keras
        K.utils.set_random_seed(seed_of(name))
        model = K.Sequential([K.Input((None, input_size))] + build(), name=name)
        scale = 2.5 if "hard_sigmoid" in name else 1.5
        randomize(model.layers, name, spread=1.0 if "hard_sigmoid" in name else 0.8)
        arrays = inputs_for(name, input_size, scale)
        for tag in BATCHES:
            arrays[f"y_{tag}"] = np.asarray(model(arrays[f"x_{tag}"]))
        specs = [tf.TensorSpec([None, None, input_size], tf.float32, name="x")]
        _convert(out, manifest, name, model, specs, arrays, {**producer, **made_by[framework]}, input_size, note, framework)

    # Initial states as graph inputs (Keras 3 functional models).
    for name, cell, units, input_size in (("t2o_lstm_initial_state", "LSTM", 4, 3), ("t2o_gru_initial_state", "GRU", 5, 4)):
        keras.utils.set_random_seed(seed_of(name))
        states = ["h0", "c0"] if cell == "LSTM" else ["h0"]
        x = keras.Input((None, input_size), name="x")
        state_inputs = [keras.Input((units,), name=s) for s in states]
        y = getattr(K3, cell)(units, return_sequences=True, name=cell.lower())(x, initial_state=state_inputs)
        model = keras.Model([x, *state_inputs], y, name=name)
        randomize(model.layers, name)
        arrays = inputs_for(name, input_size)
        rng = np.random.default_rng(seed_of("s:" + name))
        for tag, (batch, _) in BATCHES.items():
            for s in states:
                arrays[f"{s}_{tag}"] = (0.8 * rng.standard_normal((batch, units))).astype(np.float32)
            arrays[f"y_{tag}"] = keras.ops.convert_to_numpy(model([arrays[f"x_{tag}"], *(arrays[f"{s}_{tag}"] for s in states)]))
        specs = [tf.TensorSpec([None, None, input_size], tf.float32, name="x")] + [tf.TensorSpec([None, units], tf.float32, name=s) for s in states]
        _convert(out, manifest, name, model, specs, arrays, {**producer, **made_by["keras3"]}, input_size,
                 "initial states are graph inputs; their npz arrays are named after them", "keras3", states)

    # One step of a cell with the state as graph inputs and outputs, as a streaming model ships it;
    # input size equals hidden size, so shapes alone cannot tell the input from the state.
    for name, cell_cls, units in (("t2o_lstm_cell_step", "LSTMCell", 4), ("t2o_gru_cell_step", "GRUCell", 4),
                                  ("t2o_simplernn_cell_step", "SimpleRNNCell", 5)):
        keras.utils.set_random_seed(seed_of(name))
        cell = getattr(K3, cell_cls)(units, name=cell_cls.lower())
        cell.build((None, units))
        randomize([cell], name)
        states = ["h0", "c0"] if cell_cls == "LSTMCell" else ["h0"]
        rng = np.random.default_rng(seed_of("x:" + name))
        arrays = {}
        for tag, (batch, _) in BATCHES.items():
            for key in ("x", *states):
                arrays[f"{key}_{tag}"] = (1.2 * rng.standard_normal((batch, units))).astype(np.float32)
            h, new_states = cell(arrays[f"x_{tag}"], [arrays[f"{s}_{tag}"] for s in states])
            arrays[f"y_{tag}"] = keras.ops.convert_to_numpy(h)
            if cell_cls == "LSTMCell":
                arrays[f"c1_{tag}"] = keras.ops.convert_to_numpy(new_states[1])
        specs = [tf.TensorSpec([None, units], tf.float32, name=k) for k in ("x", *states)]

        @tf.function(input_signature=specs)
        def step(*inputs, cell=cell, lstm=cell_cls == "LSTMCell"):
            h, new_states = cell(inputs[0], list(inputs[1:]))
            return (h, new_states[1]) if lstm else h

        path = out / f"{name}.onnx"
        onnx_model, _ = tf2onnx.convert.from_function(step, input_signature=specs, opset=OPSET, output_path=str(path))
        np.savez(out / f"{name}.npz", **arrays)
        graph_outputs = [o.name for o in onnx_model.graph.output]
        cfg = cell.get_config()
        manifest[path.name] = {**producer, **made_by["keras3"], "format": "onnx", "opset": OPSET, "input_size": units, "step": True,
                               "layers": [{"cls": cell_cls, "name": cell.name, "units": units,
                                           **{k: cfg[k] for k in ("activation", "recurrent_activation", "use_bias", "reset_after") if k in cfg}}],
                               "input_name": "x", "inputs": dict(zip(["x", *states], [i.name for i in onnx_model.graph.input])),
                               "output_name": graph_outputs[0], "output_names": dict(zip(["y", "c1"], graph_outputs)),
                               "outputs": f"{name}.npz", "outputs_from": "Keras 3 (TensorFlow backend) itself, not ONNX Runtime",
                               "initial_state": states, "note": "one cell step, x (batch, input) with input == hidden; y is the new h"
                               + (", c1 the new c" if cell_cls == "LSTMCell" else ""),
                               **op_summary(onnx_model), "sha256": sha256(path)}


def _convert(out: Path, manifest: dict, name: str, model, specs: list, arrays: dict, producer: dict, input_size: int,
             note: str, framework: str, states: list[str] | None = None) -> None:
    import onnx
    import tensorflow as tf
    import tf2onnx

    @tf.function(input_signature=specs)
    def fn(*inputs):
        return model(list(inputs) if len(inputs) > 1 else inputs[0])

    path = out / f"{name}.onnx"
    tf2onnx.convert.from_function(fn, input_signature=specs, opset=OPSET, output_path=str(path))
    onnx_model = onnx.load(path)
    onnx.checker.check_model(onnx_model)
    np.savez(out / f"{name}.npz", **arrays)
    recurrent = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]
    names = [i.name for i in onnx_model.graph.input]
    manifest[path.name] = {**producer, "format": "onnx", "opset": OPSET, "input_size": input_size,
                           "layers": [describe_layer(layer) for layer in recurrent],
                           "input_name": names[0], "inputs": dict(zip(["x", *(states or [])], names)),
                           "output_name": onnx_model.graph.output[0].name, "outputs": f"{name}.npz",
                           "outputs_from": f"{'Keras 3 (TensorFlow backend)' if framework == 'keras3' else 'tf_keras'} itself, "
                                           "not ONNX Runtime",
                           "initial_state": states, "note": note, **op_summary(onnx_model), "sha256": sha256(path)}


# --------------------------------------------------------------- onnxruntime's dynamic quantizer

def quantized_group(out: Path, manifest: dict) -> None:
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization import registry

    producer = {"producer": "onnxruntime.quantization.quantize_dynamic", "onnxruntime": ort.__version__}
    recurrent_ops = ("LSTM", "GRU", "RNN", "Loop", "Scan")
    found = {reg: sorted(op for op in getattr(registry, reg) if op in recurrent_ops)
             for reg in ("IntegerOpsRegistry", "QLinearOpsRegistry", "QDQRegistry", "CommonOpsRegistry")}
    # Tried too: t2o_gru_reset_after.onnx comes out of quantize_dynamic with the same ops, its Loop
    # body's MatMuls left float (their weights enter the body as Loop-carried inputs, not initializers).
    for source in ("t2o_lstm", "t2o_bilstm"):
        src = out / f"{source}.onnx"
        name = f"q_{source[4:]}_dynamic"
        path = out / f"{name}.onnx"
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8)
        qmodel = onnx.load(path)
        onnx.checker.check_model(qmodel)
        recorded = np.load(out / f"{source}.npz")
        arrays = {}
        float_sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
        q_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed_name = q_sess.get_inputs()[0].name
        for tag in BATCHES:
            x = recorded[f"x_{tag}"]
            arrays[f"x_{tag}"] = x
            arrays[f"y_producer_float_{tag}"] = recorded[f"y_{tag}"]
            arrays[f"y_float_ort_{tag}"] = float_sess.run(None, {feed_name: x})[0]
            arrays[f"y_{tag}"] = q_sess.run(None, {feed_name: x})[0]
        np.savez(out / f"{name}.npz", **arrays)
        err = max(float(np.abs(arrays[f"y_{t}"] - arrays[f"y_producer_float_{t}"]).max()) for t in BATCHES)
        manifest[path.name] = {**producer, "format": "onnx", "opset": OPSET, "quantized_from": src.name,
                               "weight_type": "QInt8", "input_size": manifest[src.name]["input_size"],
                               "layers": manifest[src.name]["layers"],
                               "input_name": feed_name, "output_name": q_sess.get_outputs()[0].name,
                               "outputs": f"{name}.npz",
                               "outputs_from": "y_*: ONNX Runtime on this quantized file; y_float_ort_*: ONNX Runtime on the float "
                                               "source; y_producer_float_*: Keras 3 on the float model",
                               "max_abs_error_vs_float": err, "initial_state": None,
                               "note": "DynamicQuantizeLSTM takes W as int8 [dirs, input, 4*hidden] and R as int8 "
                                       "[dirs, hidden, 4*hidden] (transposed from LSTM's W/R), with per-tensor scale and "
                                       "zero point inputs 8-11; B stays float, gate order stays ONNX's i, o, f, c",
                               **op_summary(qmodel), "sha256": sha256(path)}
    manifest["_quantization_registry"] = {
        "onnxruntime": ort.__version__,
        "recurrent_ops_per_registry": found,
        "note": "only LSTM has a recurrent quantizer (IntegerOpsRegistry -> com.microsoft.DynamicQuantizeLSTM); GRU and RNN "
                "have none. quantize_dynamic on tf2onnx's GRU Loop file (t2o_gru_reset_after.onnx) changes nothing: the body's "
                "MatMul weights enter it as Loop-carried inputs (not initializers), so they stay float"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "wild")
    parser.add_argument("--only", default="k2,t2o,q", help="comma-separated groups: k2, t2o, q")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    groups = {"k2": keras2_group, "t2o": tf2onnx_group, "q": quantized_group}
    for group in args.only.split(","):
        groups[group](args.out, manifest)
        manifest["_generated_by"] = {"script": "tools/wild_fixtures/make_fixtures.py", "python": sys.version.split()[0],
                                     "numpy": np.__version__, "batches": {k: list(v) for k, v in BATCHES.items()}}
        manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
