"""The jax format, pinned by jax.experimental.rnn's own unpacking and lstm_ref."""

from __future__ import annotations

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, parity
from rnnx.check import stack

jax = pytest.importorskip("jax")
from jax.experimental import rnn as jrnn  # noqa: E402

jax.config.update("jax_platforms", "cpu")
ATOL = 2e-5

JAX_SPECS = [RNNSpec.parse(s) for s in ("lstm,input=3,hidden=5", "lstm,input=4,hidden=6,layers=2,bidirectional", "lstm,input=2,hidden=3,layers=3")]


def _run_lstm_ref(weights: RNNWeights, inputs: dict[str, np.ndarray], vector: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """jax's own code on ``vector`` (default: what the jax format writes for ``weights``)."""
    spec = weights.spec
    bidirectional = spec.direction == "bidirectional"
    vector = rnnx.to_format(weights, "jax") if vector is None else vector
    W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(vector, spec.input_size, spec.hidden_size, spec.num_layers, bidirectional)
    x = inputs["X"].transpose(1, 0, 2)  # jax is batch-first
    lens = inputs.get("seq_lens", np.full(x.shape[0], x.shape[1])).astype(np.int32)
    y, h, c = jrnn.lstm_ref(x, inputs["h0"], inputs["c0"], W_ih, W_hh, b_ih, b_hh, lens,
                            spec.input_size, spec.hidden_size, spec.num_layers, 0.0, bidirectional)
    return {"Y": np.asarray(y).transpose(1, 0, 2), "h_n": np.asarray(h), "c_n": np.asarray(c)}


@pytest.mark.parametrize("spec", JAX_SPECS, ids=str)
def test_jax_lstm_ref_matches_reference(spec: RNNSpec) -> None:
    weights = RNNWeights.random(spec, seed=2)
    report = stack.check("jax lstm_ref", lambda inputs: _run_lstm_ref(weights, inputs), weights, shapes=[(1, 1), (7, 3), (12, 2)])
    assert report, str(report)
    assert report.worst().max_abs < ATOL


@pytest.mark.parametrize("spec", JAX_SPECS, ids=str)
def test_vector_size_is_jaxs(spec: RNNSpec) -> None:
    n = jrnn.get_num_params_in_lstm(spec.input_size, spec.hidden_size, spec.num_layers, spec.direction == "bidirectional")
    assert rnnx.to_format(RNNWeights.random(spec), "jax").size == n


@pytest.mark.parametrize("spec", JAX_SPECS, ids=str)
def test_jax_runs_rnnx_cudnn_blob(spec: RNNSpec) -> None:
    """jax's vector is cuDNN's weight space, so rnnx's jax layout reads cuDNN's offset table.
    jax's own unpack_lstm_weights ("CUDNN LSTM weight layout") and lstm_ref, fed the cuDNN
    blob rnnx packs, give the reference's outputs: jax holds cuDNN's table for LSTMs on a CPU."""
    weights = RNNWeights.random(spec, seed=6)
    blob = rnnx.to_format(weights, "cudnn")
    report = stack.check("jax lstm_ref on the cudnn blob", lambda inputs: _run_lstm_ref(weights, inputs, blob), weights, shapes=[(1, 1), (7, 3)])
    assert report, str(report)
    assert report.worst().max_abs < ATOL


def test_torch_weights_run_in_jax_give_torchs_outputs() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    module = torch.nn.LSTM(4, 5, num_layers=2, bidirectional=True).eval()
    weights = rnnx.from_format(module.state_dict(), "torch")
    inputs = parity.random_inputs(weights, 8, 3, seed=4)
    with torch.no_grad():
        y, (h, c) = module(torch.from_numpy(inputs["X"]), (torch.from_numpy(inputs["h0"]), torch.from_numpy(inputs["c0"])))
    got = _run_lstm_ref(weights, inputs)
    np.testing.assert_allclose(got["Y"], y.numpy(), atol=ATOL)
    np.testing.assert_allclose(got["h_n"], h.numpy(), atol=ATOL)
    np.testing.assert_allclose(got["c_n"], c.numpy(), atol=ATOL)


def test_file_round_trip(tmp_path) -> None:
    weights = RNNWeights.random(JAX_SPECS[1], seed=3)
    path = tmp_path / "w.npz"
    rnnx.save(weights, path)
    assert rnnx.load(path).equal(weights)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("gru,input=2,hidden=3", "only LSTMs"), ("lstm,input=2,hidden=3,proj=1", "projection"), ("lstm,input=2,hidden=3,no_bias", "no_bias")],
)
def test_refusals(text: str, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment):
        rnnx.to_format(RNNWeights.random(RNNSpec.parse(text)), "jax")


def test_convert_runs_the_written_vector_in_jax_and_a_wrong_gate_order_fails(tmp_path) -> None:
    """convert's check of a .npz is jax.experimental.rnn running the file: with the writer's gate
    order planted wrong (i,g,f,o for i,f,g,o in cuDNN's table, which jax's layout reads) it
    must fail and leave nothing behind."""
    import json

    from tests.helpers import convert_as_shipped_and_planted

    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional"), seed=9)
    rnnx.save(weights, tmp_path / "w.safetensors")
    plant = (
        "import rnnx.layouts.cudnn as table; "
        "table.LIN_LAYER_IDS = {**table.LIN_LAYER_IDS, 'lstm': {'W': {'i': 0, 'g': 1, 'f': 2, 'o': 3}, 'R': {'i': 4, 'g': 5, 'f': 6, 'o': 7}}}; "
    )
    good, bad = convert_as_shipped_and_planted(tmp_path / "w.safetensors", tmp_path / "w.npz", "jax", plant)
    assert good.returncode == 0, good.stderr
    rows = json.loads(good.stdout)["check"]["rows"]
    assert {r["backend"] for r in rows} == {"jax"} and all(r["ran"] for r in rows)
    assert bad.returncode == 1, bad.stdout[-1000:] + bad.stderr
    assert "parity check failed: jax" in bad.stderr and not (tmp_path / "w.npz").exists()
