"""The keras format, pinned by running Keras 3 layers (torch backend) against the float64 reference.

Every Keras fact the format relies on (gate orders, bias layouts, transposed kernels,
Bidirectional's weight order and output, go_backwards's output order, flat model lists,
the HDF5 paths of .weights.h5 and .keras files) is held here by Keras's own outputs.
Keras runs in float32: outputs must match the float64 reference within ATOL.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, parity, reference
from rnnx.check import stack


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """Keras initialises layers from global generators: seeded from the test's id (not
    ``hash``, which Python salts per process), every run sees the same weights."""
    keras.utils.set_random_seed(zlib.crc32(request.node.nodeid.encode()))


ATOL = 1e-5  # Keras float32 against the float64 reference, weights in [-0.8, 0.8]
SHAPES = [(1, 1), (7, 3), (12, 2)]  # (seq_len, batch)


def _inner(spec: RNNSpec, **kw: object) -> keras.layers.Layer:
    common = dict(units=spec.hidden_size, return_sequences=True, use_bias=spec.bias, **kw)
    if spec.direction == "reverse":
        common["go_backwards"] = True
    if spec.cell == "lstm":
        return keras.layers.LSTM(**common)
    if spec.cell == "gru":
        return keras.layers.GRU(reset_after=spec.reset_after, **common)
    return keras.layers.SimpleRNN(activation=spec.cell[4:], **common)


def _layer(spec: RNNSpec, **kw: object) -> keras.layers.Layer:
    """One Keras layer for a one-layer spec, built, returning its states too."""
    inner = _inner(spec, return_state=True, **kw)
    layer = keras.layers.Bidirectional(inner) if spec.direction == "bidirectional" else inner
    layer.build((None, None, spec.input_size))
    return layer


def _model(spec: RNNSpec) -> keras.Model:
    """A model made of exactly the spec's layers: what to_native's flat list and write's file fit."""
    layers = [keras.Input((None, spec.input_size))]
    for _ in range(spec.num_layers):
        inner = _inner(spec)
        layers.append(keras.layers.Bidirectional(inner) if spec.direction == "bidirectional" else inner)
    return keras.Sequential(layers)


def _np(x: object) -> np.ndarray:
    return keras.ops.convert_to_numpy(x)


def _run_layer(layer: keras.layers.Layer, spec: RNNSpec, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keras is batch-first and returns states per direction; bring both to our convention."""
    x = inputs["X"].transpose(1, 0, 2)
    states = []
    for d in range(spec.num_directions):
        states.append(inputs["h0"][d])
        if spec.cell == "lstm":
            states.append(inputs["c0"][d])
    outs = [_np(o) for o in layer(x, initial_state=states)]
    y = outs[0].transpose(1, 0, 2)
    if spec.direction == "reverse":
        y = y[::-1]  # go_backwards returns the steps in the order it ran them: last first
    per_dir = 2 if spec.cell == "lstm" else 1
    finals = [outs[1 + d * per_dir : 1 + (d + 1) * per_dir] for d in range(spec.num_directions)]
    got = {"Y": y, "h_n": np.stack([f[0] for f in finals])}
    if spec.cell == "lstm":
        got["c_n"] = np.stack([f[1] for f in finals])
    return got


def _reference_y(weights: RNNWeights, x_batch_first: np.ndarray) -> np.ndarray:
    """The reference's output, batch-first, in the order Keras returns it."""
    y = reference.forward(weights, x_batch_first, batch_first=True).y  # batch-first in, batch-first out
    return y[:, ::-1] if weights.spec.direction == "reverse" else y


def _assert_parity(layer: keras.layers.Layer, weights: RNNWeights) -> None:
    report = stack.check("keras", lambda inputs: _run_layer(layer, weights.spec, inputs), weights, shapes=SHAPES)
    assert report, str(report)
    assert report.worst().max_abs < ATOL, str(report)


SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5",
        "lstm,input=4,hidden=3,bidirectional,no_bias",
        "lstm,input=3,hidden=4,reverse",
        "gru,input=3,hidden=5",
        "gru,input=4,hidden=3,reset_before",
        "gru,input=3,hidden=4,bidirectional,reset_before",
        "gru,input=2,hidden=3,reverse",
        "gru,input=3,hidden=4,no_bias",
        "gru,input=3,hidden=4,no_bias,reset_before",
        "rnn_tanh,input=3,hidden=4,reverse",
        "rnn_tanh,input=2,hidden=3,no_bias",
        "rnn_relu,input=4,hidden=5,bidirectional",
    )
]


# --- arrays: our weights in Keras, Keras's weights in ours ---------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_keras_layer_with_our_weights_matches_reference(spec: RNNSpec) -> None:
    # Two random biases: where Keras keeps one, to_native's sum must give the same outputs.
    weights = RNNWeights.random(spec, seed=5, scale=0.8)
    layer = _layer(spec)
    layer.set_weights(rnnx.to_format(weights, "keras"))
    _assert_parity(layer, weights)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_keras_own_initialised_weights_read_back(spec: RNNSpec) -> None:
    """Weights Keras initialised itself (LSTM's unit forget bias included) give Keras's outputs through the format."""
    keras.utils.set_random_seed(3)
    layer = _layer(spec)
    weights = rnnx.from_format(layer.get_weights(), "keras", spec=spec)
    _assert_parity(layer, weights)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_keras_arrays_round_trip_bit_exact(spec: RNNSpec, dtype: type) -> None:
    layer = _layer(spec)
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(w.shape).astype(dtype) for w in layer.get_weights()]
    weights = rnnx.from_format(arrays, "keras", spec=spec)
    assert weights.dtype == dtype
    back = rnnx.to_format(weights, "keras")
    assert len(back) == len(arrays)
    assert all(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(arrays, back))
    # Keras's single bias is read as the input bias, with a zero recurrent bias.
    if spec.bias and not (spec.cell == "gru" and spec.reset_after):
        assert not any(np.any(weights[name]) for name in weights if ".bR." in name)


def test_one_layer_list_describes_itself() -> None:
    for text in ("lstm,input=3,hidden=5", "lstm,input=2,hidden=3,no_bias", "gru,input=3,hidden=4", "gru,input=3,hidden=4,reset_before"):
        spec = RNNSpec.parse(text)
        assert rnnx.from_format(_layer(spec).get_weights(), "keras").spec == spec
    with pytest.raises(RNNXError, match="spec=rnn_tanh,input=3,hidden=2 or spec=rnn_relu,input=3,hidden=2$"):
        rnnx.from_format(_layer(RNNSpec.parse("rnn_relu,input=3,hidden=2")).get_weights(), "keras")
    with pytest.raises(RNNXError, match="reset mode; pass spec=gru,input=3,hidden=2,no_bias or spec=gru,input=3,hidden=2,no_bias,reset_before$"):
        rnnx.from_format(_layer(RNNSpec.parse("gru,input=3,hidden=2,no_bias")).get_weights(), "keras")
    with pytest.raises(RNNXError, match="6 arrays cannot be read without a spec"):
        rnnx.from_format(_layer(RNNSpec.parse("lstm,input=3,hidden=2,bidirectional")).get_weights(), "keras")
    with pytest.raises(RNNXError, match="expected a list of arrays"):
        rnnx.from_format(np.zeros((3, 8)), "keras")
    with pytest.raises(RNNXError, match=r"expected shape \(2, 12\).*reset_before"):
        rnnx.from_format([np.zeros((3, 12)), np.zeros((4, 12)), np.zeros(12)], "keras", spec="gru,input=3,hidden=4")
    with pytest.raises(RNNXError, match=r"expected 3 arrays for spec lstm,input=3,hidden=4 .* found 2; check spec="):
        rnnx.from_format([np.zeros((3, 16)), np.zeros((4, 16))], "keras", spec="lstm,input=3,hidden=4")


@pytest.mark.parametrize(
    "text", ["lstm,input=3,hidden=4,layers=2,bidirectional", "gru,input=2,hidden=3,layers=3,reset_before", "rnn_relu,input=3,hidden=4,layers=2,no_bias"]
)
def test_several_layers_are_one_flat_list(text: str) -> None:
    """model.get_weights() of a model made of the spec's layers: layer after layer, forward then backward."""
    spec = RNNSpec.parse(text)
    weights = RNNWeights.random(spec, seed=11, scale=0.8)
    model = _model(spec)
    model.set_weights(rnnx.to_format(weights, "keras"))
    read = rnnx.from_format(model.get_weights(), "keras", spec=spec)
    assert read.equal(rnnx.from_format(rnnx.to_format(weights, "keras"), "keras", spec=spec))
    for T, B in SHAPES:
        x = np.random.default_rng(T).standard_normal((B, T, spec.input_size)).astype(np.float32)
        np.testing.assert_allclose(_np(model(x)), _reference_y(weights, x), atol=ATOL)


# --- across frameworks ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_weights_run_in_keras_give_torchs_outputs(kind: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(4, 5, bidirectional=True).eval()
    weights = rnnx.from_format(module.state_dict(), "torch")
    layer = _layer(weights.spec)
    layer.set_weights(rnnx.to_format(weights, "keras"))
    for T, B in SHAPES:
        inputs = parity.random_inputs(weights, T, B, seed=7 + T)
        state = (torch.from_numpy(inputs["h0"]), torch.from_numpy(inputs["c0"])) if kind == "lstm" else torch.from_numpy(inputs["h0"])
        with torch.no_grad():
            y, final = module(torch.from_numpy(inputs["X"]), state)
        got = _run_layer(layer, weights.spec, inputs)
        np.testing.assert_allclose(got["Y"], y.numpy(), atol=ATOL)
        np.testing.assert_allclose(got["h_n"], (final[0] if kind == "lstm" else final).numpy(), atol=ATOL)
        if kind == "lstm":
            np.testing.assert_allclose(got["c_n"], final[1].numpy(), atol=ATOL)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_stack_runs_as_a_keras_model(kind: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(4)
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(3, 4, num_layers=2, bidirectional=True, batch_first=True).eval()
    weights = rnnx.from_format(module.state_dict(), "torch")
    model = _model(weights.spec)
    model.set_weights(rnnx.to_format(weights, "keras"))
    x = torch.from_numpy(np.random.default_rng(9).standard_normal((3, 8, 3)).astype(np.float32))
    with torch.no_grad():
        want = module(x)[0].numpy()
    np.testing.assert_allclose(_np(model(x.numpy())), want, atol=ATOL)


# --- files ------------------------------------------------------------------------------------


def _save_model(folder: Path) -> keras.Model:
    inp = keras.Input((None, 3))
    a = keras.layers.LSTM(4, return_sequences=True, name="encoder")(inp)
    b = keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True, reset_after=False), name="context")(a)
    c = keras.layers.SimpleRNN(3, activation="relu", go_backwards=True, use_bias=False, return_sequences=True, name="decoder")(b)
    d = keras.layers.RNN(keras.layers.GRUCell(2), return_sequences=True, name="wrapped")(c)
    e = keras.layers.LSTM(2, return_sequences=True, go_backwards=True)(d)  # named "lstm": also the first layer's path
    model = keras.Model(inp, [a, b, c, d, e])
    model.save(folder / "m.keras")
    model.save_weights(folder / "m.weights.h5")
    return model


FILE_LAYERS = {  # path in the file -> (layer name, spec from config.json)
    "lstm": ("encoder", "lstm,input=3,hidden=4"),
    "bidirectional": ("context", "gru,input=4,hidden=2,bidirectional,reset_before"),
    "simple_rnn": ("decoder", "rnn_relu,input=4,hidden=3,reverse,no_bias"),
    "rnn": ("wrapped", "gru,input=3,hidden=2"),
    "lstm_1": ("lstm", "lstm,input=2,hidden=2,reverse"),
}


def test_keras_files_read_with_their_specs(tmp_path: Path) -> None:
    model = _save_model(tmp_path)
    path = tmp_path / "m.keras"
    assert rnnx.groups(path) == list(FILE_LAYERS)  # model order
    with pytest.raises(RNNXError, match=r"5 recurrent groups \('lstm' \(layer 'encoder'\), 'bidirectional' \(layer 'context'\).*; pass select=GROUP$"):
        rnnx.load(path)
    with pytest.raises(RNNXError, match="no recurrent group 'nope'; groups are 'lstm'"):
        rnnx.load(path, select="nope")
    for T, B in ((6, 2), (1, 1), (9, 3)):
        x = np.random.default_rng(T).standard_normal((B, T, 3)).astype(np.float32)
        outs = [_np(o) for o in model(x)]
        ins = [x, *outs[:-1]]
        for (group, (name, text)), layer_in, want in zip(FILE_LAYERS.items(), ins, outs):
            weights = rnnx.load(path, select=group)
            assert weights.spec == RNNSpec.parse(text), group
            np.testing.assert_allclose(_reference_y(weights, layer_in), want, atol=ATOL, err_msg=group)
            if name != "lstm":  # a layer name selects too, unless a path has that name
                assert rnnx.load(path, select=name).equal(weights)
    assert rnnx.load(path, select="lstm").spec.hidden_size == 4  # the path wins over the last layer's name
    with pytest.raises(RNNXError, match="disagrees with the file's own spec gru,input=4,hidden=2,bidirectional,reset_before; drop spec="):
        rnnx.load(path, select="context", spec="gru,input=4,hidden=2,bidirectional")


def test_keras_archives_read_in_place_or_inflated(tmp_path: Path) -> None:
    """Keras stores model.weights.h5 uncompressed, and rnnx reads it in place through a window
    onto the archive; the same archive re-zipped with its members deflated reads the same."""
    import zipfile

    _save_model(tmp_path)
    stored = tmp_path / "m.keras"
    with zipfile.ZipFile(stored) as archive:
        assert archive.getinfo("model.weights.h5").compress_type == zipfile.ZIP_STORED
        deflated = tmp_path / "deflated.keras"
        with zipfile.ZipFile(deflated, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for info in archive.infolist():
                out.writestr(info.filename, archive.read(info.filename))
    for group in FILE_LAYERS:
        assert rnnx.load(deflated, select=group).equal(rnnx.load(stored, select=group)), group


def test_weights_h5_files_read_from_shapes(tmp_path: Path) -> None:
    _save_model(tmp_path)
    h5, full = tmp_path / "m.weights.h5", tmp_path / "m.keras"
    # The same group names as the .keras archive: Keras's own paths, from class names.
    assert sorted(rnnx.groups(h5)) == sorted(FILE_LAYERS)
    for group in ("lstm", "bidirectional", "rnn"):
        assert rnnx.load(h5, select=group).equal(rnnx.load(full, select=group)), group
    # What the weights alone cannot say: tanh or relu, and go_backwards (taken as forward).
    with pytest.raises(RNNXError, match=r"m.weights.h5: layer 'simple_rnn': .*tanh or relu; pass spec=rnn_tanh,input=4,hidden=3,no_bias or"):
        rnnx.load(h5, select="simple_rnn")
    with pytest.raises(RNNXError, match=r"5 recurrent groups \('bidirectional', 'lstm', 'lstm_1', 'rnn', 'simple_rnn'\); pass select=GROUP$"):
        rnnx.load(h5)
    assert rnnx.load(h5, select="simple_rnn", spec="rnn_relu,input=4,hidden=3,reverse,no_bias").equal(rnnx.load(full, select="decoder"))
    assert rnnx.load(h5, select="lstm_1").spec == RNNSpec.parse("lstm,input=2,hidden=2")
    with pytest.raises(RNNXError, match=r"expected shape \(5, 16\)"):
        rnnx.load(h5, select="lstm", spec="lstm,input=5,hidden=4")


def test_nested_models_are_walked(tmp_path: Path) -> None:
    inner = keras.Sequential(
        [keras.Input((None, 3)), keras.layers.GRU(2, return_sequences=True, name="g1"), keras.layers.GRU(2, name="g2", use_bias=False, reset_after=False)]
    )
    outer = keras.Sequential([keras.Input((None, 3)), inner, keras.layers.Dense(1)])
    outer.save(tmp_path / "n.keras")
    outer.save_weights(tmp_path / "n.weights.h5")
    for path in (tmp_path / "n.keras", tmp_path / "n.weights.h5"):
        assert rnnx.groups(path) == ["sequential/gru", "sequential/gru_1"]
        assert rnnx.load(path, select="sequential/gru").spec == RNNSpec.parse("gru,input=3,hidden=2")
    assert rnnx.load(tmp_path / "n.keras", select="g2").spec == RNNSpec.parse("gru,input=2,hidden=2,no_bias,reset_before")
    with pytest.raises(RNNXError, match="GRU without bias does not say its reset mode"):
        rnnx.load(tmp_path / "n.weights.h5", select="sequential/gru_1")
    with pytest.raises(RNNXError, match="no recurrent group 'g2'"):  # layer names come from config.json only
        rnnx.load(tmp_path / "n.weights.h5", select="g2")


def test_bfloat16_weights_widen_exactly(tmp_path: Path) -> None:
    inp = keras.Input((None, 3))
    layer = keras.layers.LSTM(2, dtype="bfloat16", recurrent_initializer="glorot_uniform")  # torch's CPU QR has no bfloat16
    model = keras.Model(inp, layer(inp))
    model.save(tmp_path / "b.keras")
    weights = rnnx.load(tmp_path / "b.keras")
    assert weights.dtype == np.float32
    want = [np.asarray(w, dtype=np.float32) for w in layer.get_weights()]
    assert all(np.array_equal(a, b) for a, b in zip(rnnx.to_format(weights, "keras"), want))


@pytest.mark.parametrize(
    "text", ["gru,input=3,hidden=4,layers=2,bidirectional,reset_before", "lstm,input=2,hidden=3,reverse", "rnn_relu,input=3,hidden=2,layers=2,no_bias"]
)
def test_written_weights_h5_loads_into_keras(tmp_path: Path, text: str) -> None:
    spec = RNNSpec.parse(text)
    weights = RNNWeights.random(spec, seed=8, scale=0.8)
    path = tmp_path / "w.weights.h5"
    rnnx.save(weights, path)
    model = _model(spec)
    model.load_weights(path)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), rnnx.to_format(weights, "keras")))
    if spec.num_layers == 1:
        x = np.random.default_rng(1).standard_normal((2, 5, spec.input_size)).astype(np.float32)
        np.testing.assert_allclose(_np(model(x)), _reference_y(weights, x), atol=ATOL)
    # The file records its spec: read back whole, options included, as Keras's arrays say.
    assert rnnx.load(path).equal(rnnx.from_format(rnnx.to_format(weights, "keras"), "keras", spec=spec))
    assert rnnx.load(path, spec=spec).spec == spec
    assert len(rnnx.groups(path)) == spec.num_layers
    # --select reads one layer, like any .weights.h5: here the last one.
    last = rnnx.load(path, select=rnnx.groups(path)[-1], spec=spec.with_(num_layers=1, input_size=spec.layer_input_size(spec.num_layers - 1)))
    per_layer = len(rnnx.to_format(weights, "keras")) // spec.num_layers
    assert all(np.array_equal(a, b) for a, b in zip(rnnx.to_format(last, "keras"), rnnx.to_format(weights, "keras")[-per_layer:]))
    with pytest.raises(RNNXError, match="disagrees with the file's own spec"):
        rnnx.load(path, spec=spec.with_(hidden_size=spec.hidden_size + 1))


def test_keras_archives_are_not_written(tmp_path: Path) -> None:
    with pytest.raises(RNNXError, match=r"writes Keras weights as .weights.h5 only"):
        rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=2,hidden=3")), tmp_path / "x.keras")
    assert not list(tmp_path.iterdir())


def test_damaged_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(RNNXError, match="not a readable .keras archive"):
        rnnx.load(bad)
    empty = tmp_path / "empty.keras"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("config.json", "{}")
    with pytest.raises(RNNXError, match=r"expected config.json and model.weights.h5 in the .keras archive, found \['config.json'\]"):
        rnnx.load(empty)
    h5 = tmp_path / "bad.weights.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(RNNXError, match="cannot read the weights as HDF5"):
        rnnx.load(h5)


def test_links_out_of_the_file_are_not_followed(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=2,hidden=3")), tmp_path / "real.weights.h5")
    path = tmp_path / "links.weights.h5"
    with h5py.File(path, "w") as f:
        f["layers/lstm"] = h5py.ExternalLink(str(tmp_path / "real.weights.h5"), "/layers/lstm")
        f["layers/gru"] = h5py.SoftLink("/layers")
    with pytest.raises(RNNXError, match="found none"):
        rnnx.load(path)


@pytest.mark.parametrize(("text", "fragment"), [("lstm,input=2,hidden=4,proj=2", "no projection"), ("lstm,input=2,hidden=4,peepholes", "no peepholes")])
def test_refusals(tmp_path: Path, text: str, fragment: str) -> None:
    weights = RNNWeights.random(RNNSpec.parse(text))
    with pytest.raises(RNNXError, match=fragment):
        rnnx.to_format(weights, "keras")
    with pytest.raises(RNNXError, match=fragment):
        rnnx.from_format([np.zeros((2, 16)), np.zeros((4, 16)), np.zeros(16)], "keras", spec=text)
    with pytest.raises(RNNXError, match=fragment):
        rnnx.save(weights, tmp_path / "w.weights.h5")
    assert not list(tmp_path.iterdir())


# Two fresh processes that start Keras per cell (~14 s a cell): the check's Keras run and its
# failure on a planted gate order are the same for both cells, so the GRU runs with --slow (its
# gate order against Keras: test_keras_layer_with_our_weights_matches_reference; its written
# .weights.h5 in Keras: test_written_weights_h5_loads_into_keras).
@pytest.mark.parametrize("text", ["lstm,input=3,hidden=4,layers=2,bidirectional",
                                  pytest.param("gru,input=2,hidden=3,reset_before", marks=pytest.mark.slow)])
def test_convert_runs_the_written_file_in_keras_and_a_wrong_gate_order_fails(tmp_path: Path, text: str) -> None:
    """convert's check of a .weights.h5 is Keras loading the file into the model it is for and
    running it: with the writer's gate order planted wrong it fails and leaves nothing behind."""
    import json

    from tests.helpers import convert_as_shipped_and_planted

    weights = RNNWeights.random(RNNSpec.parse(text), seed=9)
    rnnx.save(weights, tmp_path / "w.safetensors")
    swapped = {"lstm": "('i', 'g', 'f', 'o')", "gru": "('r', 'z', 'n')"}[weights.spec.cell]
    plant = f"fmt.layout.GATE_ORDER = {{**fmt.layout.GATE_ORDER, '{weights.spec.cell}': {swapped}}}; "  # rnnx.layouts.keras
    good, bad = convert_as_shipped_and_planted(tmp_path / "w.safetensors", tmp_path / "m.weights.h5", "keras", plant)
    assert good.returncode == 0, good.stderr
    rows = json.loads(good.stdout)["check"]["rows"]
    assert {r["backend"] for r in rows} == {"keras"} and all(r["ran"] for r in rows)
    assert bad.returncode == 1, bad.stdout[-1000:] + bad.stderr
    assert "parity check failed: keras" in bad.stderr and not (tmp_path / "m.weights.h5").exists()
