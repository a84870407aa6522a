"""The keras format, pinned by running Keras 3 layers (torch backend) against the reference."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")

import rnnx  # noqa: E402
from rnnx import RNNSpec, RNNWeights, RNNXError, parity  # noqa: E402

ATOL = 2e-5  # Keras float32 against the float64 reference


def _layer(spec: RNNSpec) -> keras.layers.Layer:
    common = dict(units=spec.hidden_size, return_sequences=True, return_state=True, use_bias=spec.bias)
    if spec.cell == "lstm":
        inner = keras.layers.LSTM(**common)
    elif spec.cell == "gru":
        inner = keras.layers.GRU(reset_after=spec.reset_after, **common)
    else:
        inner = keras.layers.SimpleRNN(activation=spec.cell[4:], **common)
    if spec.direction == "bidirectional":
        return keras.layers.Bidirectional(inner)
    if spec.direction == "reverse":
        inner.go_backwards = True
    return inner


def _run_keras(layer: keras.layers.Layer, spec: RNNSpec, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keras is batch-first and returns states per direction; bring both to our convention."""
    x = inputs["X"].transpose(1, 0, 2)
    states = []
    for d in range(spec.num_directions):
        states.append(inputs["h0"][d])
        if spec.cell == "lstm":
            states.append(inputs["c0"][d])
    outs = [keras.ops.convert_to_numpy(o) for o in layer(x, initial_state=states)]
    y = outs[0].transpose(1, 0, 2)
    if spec.direction == "reverse":
        y = y[::-1]  # go_backwards returns the steps in the order it ran them
    per_dir = 2 if spec.cell == "lstm" else 1
    finals = [outs[1 + d * per_dir : 1 + (d + 1) * per_dir] for d in range(spec.num_directions)]
    got = {"Y": y, "h_n": np.stack([f[0] for f in finals])}
    if spec.cell == "lstm":
        got["c_n"] = np.stack([f[1] for f in finals])
    return got


KERAS_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5",
        "lstm,input=4,hidden=3,bidirectional,no_bias",
        "lstm,input=3,hidden=4,reverse",
        "gru,input=3,hidden=5",
        "gru,input=4,hidden=3,reset_before",
        "gru,input=3,hidden=4,bidirectional,reset_before",
        "gru,input=3,hidden=4,no_bias",
        "rnn_tanh,input=3,hidden=4,reverse",
        "rnn_relu,input=4,hidden=5,bidirectional",
    )
]


@pytest.mark.parametrize("spec", KERAS_SPECS, ids=str)
def test_keras_layer_with_our_weights_matches_reference(spec: RNNSpec) -> None:
    # Zero recurrent biases where Keras has a single bias, so that nothing is summed away.
    weights = RNNWeights.random(spec, seed=5, scale=0.8)
    if spec.bias and not (spec.cell == "gru" and spec.reset_after):
        weights = RNNWeights(spec, {k: (np.zeros_like(v) if ".bR." in k else v) for k, v in weights.tensors.items()})
    layer = _layer(spec)
    layer.build((None, None, spec.input_size))
    layer.set_weights(rnnx.to_format(weights, "keras"))
    report = parity.check("keras", lambda inputs: _run_keras(layer, spec, inputs), weights, shapes=[(1, 1), (7, 3), (12, 2)])
    assert report, str(report)
    assert report.worst().max_abs < ATOL


@pytest.mark.parametrize("spec", KERAS_SPECS[::2], ids=str)
def test_keras_own_weights_read_back(spec: RNNSpec) -> None:
    """Weights Keras initialised itself, read through the format, give Keras's outputs."""
    keras.utils.set_random_seed(3)
    layer = _layer(spec)
    layer.build((None, None, spec.input_size))
    layer.set_weights([np.random.default_rng(1).uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in layer.get_weights()])
    weights = rnnx.from_format(layer.get_weights(), "keras", spec=spec)
    assert parity.check("keras", lambda inputs: _run_keras(layer, spec, inputs), weights)


@pytest.mark.parametrize("spec", KERAS_SPECS, ids=str)
def test_native_round_trip_is_bit_exact(spec: RNNSpec) -> None:
    layer = _layer(spec)
    layer.build((None, None, spec.input_size))
    arrays = [np.random.default_rng(2).standard_normal(w.shape).astype(np.float32) for w in layer.get_weights()]
    back = rnnx.to_format(rnnx.from_format(arrays, "keras", spec=spec), "keras")
    assert len(back) == len(arrays) and all(np.array_equal(a, b) for a, b in zip(arrays, back))


def test_single_layer_spec_is_inferred_from_arrays() -> None:
    assert rnnx.from_format([np.zeros((3, 8)), np.zeros((2, 8)), np.zeros(8)], "keras").spec == RNNSpec.parse("lstm,input=3,hidden=2")
    assert rnnx.from_format([np.zeros((3, 6)), np.zeros((2, 6)), np.zeros(6)], "keras").spec.reset_after is False
    with pytest.raises(RNNXError, match="--spec rnn_tanh,input=3,hidden=2 or --spec rnn_relu,input=3,hidden=2"):
        rnnx.from_format([np.zeros((3, 2)), np.zeros((2, 2)), np.zeros(2)], "keras")


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_weights_run_in_keras_give_torchs_outputs(kind: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(4, 5, bidirectional=True).eval()
    weights = rnnx.from_format(module.state_dict(), "torch")
    layer = _layer(weights.spec)
    layer.build((None, None, 4))
    layer.set_weights(rnnx.to_format(weights, "keras"))
    inputs = parity.random_inputs(weights, 9, 3, seed=7)
    state = (torch.from_numpy(inputs["h0"]), torch.from_numpy(inputs["c0"])) if kind == "lstm" else torch.from_numpy(inputs["h0"])
    with torch.no_grad():
        y, final = module(torch.from_numpy(inputs["X"]), state)
    got = _run_keras(layer, weights.spec, inputs)
    np.testing.assert_allclose(got["Y"], y.numpy(), atol=ATOL)
    np.testing.assert_allclose(got["h_n"], (final[0] if kind == "lstm" else final).numpy(), atol=ATOL)


def _model(tmp_path):
    inp = keras.Input((None, 3))
    a = keras.layers.LSTM(4, return_sequences=True, name="encoder")(inp)
    b = keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True, reset_after=False), name="context")(a)
    c = keras.layers.SimpleRNN(3, activation="relu", go_backwards=True, use_bias=False, return_sequences=True, name="decoder")(b)
    model = keras.Model(inp, [a, b, c])
    model.save(tmp_path / "m.keras")
    model.save_weights(tmp_path / "m.weights.h5")
    return model


def test_keras_files_read_with_their_specs(tmp_path) -> None:
    model = _model(tmp_path)
    path = tmp_path / "m.keras"
    assert sorted(rnnx.groups(path)) == ["context", "decoder", "encoder"]
    with pytest.raises(RNNXError, match=r"3 recurrent groups .*pass --select"):
        rnnx.load(path)
    x = np.random.default_rng(0).standard_normal((2, 6, 3)).astype(np.float32)
    a, b, c = (keras.ops.convert_to_numpy(o) for o in model(x))
    for name, layer_in, want in (("encoder", x, a), ("context", a, b), ("decoder", b, c)):
        weights = rnnx.load(path, select=name)
        y = rnnx.reference.forward(weights, layer_in.transpose(1, 0, 2)).y.transpose(1, 0, 2)
        if weights.spec.direction == "reverse":
            y = y[:, ::-1]
        np.testing.assert_allclose(y, want, atol=ATOL, err_msg=name)
    assert rnnx.load(path, select="decoder").spec == RNNSpec.parse("rnn_relu,input=4,hidden=3,reverse,no_bias")
    # .weights.h5 carries no config: groups are Keras's class-derived names, the spec comes from shapes.
    h5 = tmp_path / "m.weights.h5"
    assert sorted(rnnx.groups(h5)) == ["bidirectional", "lstm", "simple_rnn"]
    assert rnnx.load(h5, select="bidirectional").equal(rnnx.load(path, select="context"))
    with pytest.raises(RNNXError, match="tanh or relu"):
        rnnx.load(h5, select="simple_rnn")


def test_damaged_files_are_refused(tmp_path) -> None:
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(RNNXError, match="not a readable .keras archive"):
        rnnx.load(bad)
    h5 = tmp_path / "bad.weights.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(RNNXError, match="cannot read the weights as HDF5"):
        rnnx.load(h5)


@pytest.mark.parametrize(("text", "fragment"), [("lstm,input=2,hidden=4,proj=2", "no projection"), ("lstm,input=2,hidden=4,peepholes", "no peepholes")])
def test_refusals(text: str, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment):
        rnnx.to_format(RNNWeights.random(RNNSpec.parse(text)), "keras")
