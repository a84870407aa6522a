"""The torch format, pinned by running PyTorch's own modules against the float64 reference."""

from __future__ import annotations

import itertools
import zlib
from pathlib import Path

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, parity
from tests.helpers import SHAPES, TORCH_SPECS

torch = pytest.importorskip("torch")
from rnnx.engines.torch import TorchRunner, build_module  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """Modules torch initialises itself are seeded from the test's id, the same in every process."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


ATOL = 2e-5  # float32 torch against the float64 reference on the same float32 weights


def _assert_close(got: dict, want: dict, atol: float = ATOL) -> None:
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, atol=atol, rtol=0, err_msg=name)


@pytest.mark.parametrize("spec", TORCH_SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_torch_module_matches_reference(spec: RNNSpec, ragged: bool) -> None:
    weights = RNNWeights.random(spec, seed=zlib.crc32(str(spec).encode()) % 1000)  # the same seed in every process
    runner = TorchRunner(weights)
    for k, (T, B) in enumerate(SHAPES):
        inputs = parity.random_inputs(weights, T, B, seed=k, ragged=ragged)
        _assert_close(runner(inputs), parity.reference_outputs(weights, inputs))


@pytest.mark.parametrize("spec", TORCH_SPECS[:2], ids=str)
def test_module_initialised_by_torch_reads_back(spec: RNNSpec) -> None:
    """Weights torch chose itself, read through the format, give torch's outputs."""
    torch.manual_seed(3)
    module = build_module(RNNWeights.random(spec))
    for p in module.parameters():
        torch.nn.init.uniform_(p, -0.5, 0.5)
    weights = rnnx.from_format(module.state_dict(), "torch")
    assert weights.spec == spec
    inputs = parity.random_inputs(weights, 9, 4, seed=5)
    with torch.no_grad():
        y, (h, c) = module(torch.from_numpy(inputs["X"]), (torch.from_numpy(inputs["h0"]), torch.from_numpy(inputs["c0"])))
    _assert_close({"Y": y.numpy(), "h_n": h.numpy(), "c_n": c.numpy()}, parity.reference_outputs(weights, inputs))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_wrong_gate_order_in_the_layout_is_caught_by_torch(cell: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch check can fail: with any two gates of the layout's table swapped, torch's own
    module, loaded with what the format writes, is far from the reference."""
    from rnnx.layouts import torch as layout

    spec = RNNSpec(cell, input_size=3, hidden_size=4)
    weights = RNNWeights.random(spec, seed=0, scale=1.0)
    inputs = parity.random_inputs(weights, 6, 2)
    want = parity.reference_outputs(weights, inputs)["Y"]
    right = layout.GATE_ORDER[cell]
    for a, b in itertools.combinations(range(len(right)), 2):
        swapped = list(right)
        swapped[a], swapped[b] = swapped[b], swapped[a]
        monkeypatch.setitem(layout.GATE_ORDER, cell, tuple(swapped))
        got = TorchRunner(weights)(inputs)["Y"]  # nn.LSTM/GRU loaded with what the planted table packs
        assert np.abs(got - want).max() > 1e-2, swapped
    monkeypatch.setitem(layout.GATE_ORDER, cell, right)
    np.testing.assert_allclose(TorchRunner(weights)(inputs)["Y"], want, atol=ATOL)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_reference(cell: str, bias: bool) -> None:
    spec = RNNSpec(cell, input_size=5, hidden_size=6, bias=bias)
    weights = RNNWeights.random(spec, seed=11)
    module = {"lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell}.get(cell)
    module = module(5, 6, bias=bias) if module else torch.nn.RNNCell(5, 6, bias=bias, nonlinearity=cell[4:])
    state = rnnx.to_format(weights, "torch", cell=True)
    assert set(state) == set(module.state_dict())
    module.load_state_dict(state)
    assert rnnx.from_format(module.state_dict(), "torch", spec=spec).equal(weights)
    for k, (T, B) in enumerate(SHAPES):
        inputs = parity.random_inputs(weights, T, B, seed=k)
        h = torch.from_numpy(inputs["h0"][0])
        c = torch.from_numpy(inputs["c0"][0]) if cell == "lstm" else None
        ys = []
        with torch.no_grad():  # a cell stepped in a Python loop, as users write it
            for t in range(T):
                x = torch.from_numpy(inputs["X"][t])
                if cell == "lstm":
                    h, c = module(x, (h, c))
                else:
                    h = module(x, h)
                ys.append(h.numpy())
        ref = parity.reference_outputs(weights, inputs)
        np.testing.assert_allclose(np.stack(ys), ref["Y"], atol=ATOL, rtol=0)


def test_groups_in_a_whole_model(tmp_path) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(4, 6)
            self.encoder = torch.nn.GRU(6, 5, num_layers=2, bidirectional=True)
            self.decoder = torch.nn.LSTMCell(10, 3)
            self.head = torch.nn.Linear(3, 2)

    model = Model()
    path = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    assert sorted(rnnx.groups(path)) == ["model.decoder", "model.encoder"]
    with pytest.raises(RNNXError, match=r"2 recurrent groups .*pass select=GROUP"):
        rnnx.load(path)
    enc = rnnx.load(path, select="model.encoder")
    assert enc.spec == RNNSpec.parse("gru,input=6,hidden=5,layers=2,bidirectional")
    dec = rnnx.load(path, select="model.decoder")
    assert dec.spec == RNNSpec.parse("lstm,input=10,hidden=3")
    np.testing.assert_array_equal(dec.gate("g").W, model.decoder.weight_ih.detach().numpy()[6:9])
    with pytest.raises(RNNXError, match="no recurrent group 'nope'"):
        rnnx.load(path, select="nope")


def test_rnn_state_dict_needs_tanh_or_relu() -> None:
    module = torch.nn.RNN(3, 4, nonlinearity="relu")
    with pytest.raises(RNNXError, match=r"spec=rnn_tanh,input=3,hidden=4 or spec=rnn_relu,input=3,hidden=4"):
        rnnx.from_format(module.state_dict(), "torch")
    w = rnnx.from_format(module.state_dict(), "torch", spec="rnn_relu,input=3,hidden=4")
    assert w.spec.cell == "rnn_relu"


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".safetensors"])
def test_files_round_trip_bit_exact(tmp_path, suffix: str) -> None:
    spec = RNNSpec.parse("lstm,input=4,hidden=5,layers=2,bidirectional,proj=2")
    weights = RNNWeights.random(spec, seed=2)
    path = tmp_path / f"w{suffix}"
    rnnx.save(weights, path, format="torch")
    assert rnnx.load(path, format="torch").equal(weights)


def test_pt_files_load_weights_only(tmp_path) -> None:
    """A pickle carrying code is refused; the code never runs."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.pt"
    torch.save({"weight_ih_l0": torch.zeros(4, 2), "x": Payload()}, path)
    assert not marker.exists()
    with pytest.raises(RNNXError, match="weights only"):
        rnnx.load(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("lstm,input=3,hidden=4,peepholes", "no peepholes"),
        ("gru,input=3,hidden=4,reset_before", "reset_before has no torch form"),
        ("lstm,input=3,hidden=4,reverse", "no reverse-only"),
    ],
)
def test_torch_refusals(spec: str, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment):
        rnnx.to_format(RNNWeights.random(RNNSpec.parse(spec)), "torch")


def test_shape_mismatch_with_given_spec() -> None:
    module = torch.nn.GRU(3, 4)
    with pytest.raises(RNNXError, match="weight_ih_l0: expected 3\\*5 rows"):
        rnnx.from_format(module.state_dict(), "torch", spec="gru,input=3,hidden=5")


def test_bfloat16_safetensors_checkpoints_widen_exactly(tmp_path) -> None:
    """BF16 checkpoints are common: read exactly (bf16 is float32's top half), and run as torch runs them."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 4, num_layers=2).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    save_file({k: v.contiguous() for k, v in gru.state_dict().items()}, str(path))
    from rnnx import reference

    weights = rnnx.load(path)
    native = rnnx.to_format(weights, "torch")
    for key, value in gru.state_dict().items():
        assert np.array_equal(np.asarray(native[key], dtype=np.float32), value.float().numpy()), key
    x = torch.randn(5, 2, 3)
    want = gru.float()(x)[0].detach().numpy()
    got = reference.forward(weights, x.numpy().astype(np.float64)).y
    np.testing.assert_allclose(got, want, atol=1e-5)
    save_file({"weight_ih_l0": torch.zeros(12, 3).to(torch.float8_e4m3fn)}, str(tmp_path / "f8.safetensors"))
    with pytest.raises(RNNXError, match="F8_E4M3; rnnx reads float32/16/64 and bfloat16 weights: dequantize"):
        rnnx.load(tmp_path / "f8.safetensors")


def test_files_as_hugging_face_and_lightning_save_them_read_as_torch(tmp_path: Path) -> None:
    """safetensors written by ``safetensors.torch.save_file`` with Hugging Face's
    ``metadata={"format": "pt"}``, and a Lightning-style ``.ckpt`` (the state_dict under
    "state_dict", beside optimizer state), are found by content and read as the module's own
    weights, without --from."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(5)
    model = torch.nn.Module()
    model.encoder = torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.save({"state_dict": {f"model.{k}": v for k, v in state.items()}, "optimizer_states": [optimizer.state_dict()], "epoch": 3},
               str(tmp_path / "last.ckpt"))
    want = rnnx.from_format({k.removeprefix("encoder."): v for k, v in state.items()}, "torch")
    assert rnnx.load(tmp_path / "model.safetensors").equal(want)
    assert rnnx.load(tmp_path / "last.ckpt").equal(want)


def test_a_torchscript_archive_is_read_for_its_weights_and_a_pickle_is_refused_in_plain_text(tmp_path) -> None:
    """inspect/convert read a TorchScript archive's parameters (torch.jit.load compiles its
    TorchScript; nothing is called), as export and verify run it; a whole pickled model is
    refused in one plain line, without the colour codes torch's own message carries."""
    import subprocess
    import sys

    from rnnx.formats.torch import load_state

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, num_layers=2)
    torch.jit.script(lstm).save(str(tmp_path / "ts.pt"))
    state = load_state(tmp_path / "ts.pt")
    assert set(state) == set(lstm.state_dict()) and all(torch.equal(state[k], v) for k, v in lstm.state_dict().items())
    torch.save(torch.nn.Sequential(lstm), tmp_path / "whole.pt")
    done = subprocess.run([sys.executable, "-m", "rnnx.cli", "inspect", str(tmp_path / "whole.pt")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "\x1b" not in done.stderr and done.stderr.count("\n") == 1
    assert "it pickles Python objects, such as a whole model saved with torch.save(model)" in done.stderr
    ok = subprocess.run([sys.executable, "-m", "rnnx.cli", "inspect", str(tmp_path / "ts.pt")], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "lstm,input=3,hidden=4,layers=2" in ok.stdout


def test_library_colour_codes_never_reach_a_message() -> None:
    from rnnx.errors import RNNXError

    assert str(RNNXError("torch says \x1b[1mdo this\x1b[0m; rnnx says that")) == "torch says do this; rnnx says that"
