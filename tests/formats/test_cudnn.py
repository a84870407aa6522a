"""The cuDNN blob on the CPU: the offset formula of layouts.md, round trips, the forum answer,
and PyTorch's flat weights read as a blob running as PyTorch runs them.

The owner's check of the table itself (torch's own flattened cuDNN buffer,
cudnnGetRNNWeightParams' offsets for every linLayerID, cuDNN's outputs) needs a GPU:
tests/gpu/test_cudnn_gpu.py and tests/engines (marked ``gpu``). Here, where cuDNN cannot
run, PyTorch on the CPU stands in for it: the tensors a module hands cuDNN, in the order of
its ``_flat_weights_names``, unpacked by rnnx's table, must compute what torch computes.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, parity, reference
from rnnx.engines import cudnn_check
from rnnx.layouts import cudnn


def test_offsets_follow_the_layouts_formula() -> None:
    """2-layer bidirectional LSTM with projection, offset by offset (layouts.md)."""
    I, H, P = 5, 7, 3
    spec = RNNSpec.parse(f"lstm,input={I},hidden={H},layers=2,bidirectional,proj={P}")
    table = cudnn.offset_table(spec)
    in_p = {0: I, 1: I, 2: 2 * P, 3: 2 * P}
    block = {p: 4 * H * I + 5 * H * P if p < 2 else 13 * H * P for p in range(4)}
    M = {p: sum(block[q] for q in range(p)) for p in range(4)}
    bias_start = 8 * H * I + 36 * H * P
    seen = set()
    for e in table:
        p, g = e.pseudo_layer, e.lin_layer_id
        if e.kind == "W":
            want = M[p] + g * H * in_p[p]
            assert e.shape == (H, in_p[p])
        elif e.kind == "R":
            want = M[p] + 4 * H * in_p[p] + (g - 4) * H * P
            assert e.shape == (H, P)
        elif e.kind == "proj":
            want = M[p] + 4 * H * in_p[p] + 4 * H * P
            assert (g, e.shape) == (8, (P, H))
        elif e.kind == "bW":
            want = bias_start + 8 * H * p + g * H
        else:
            want = bias_start + 8 * H * p + 4 * H + (g - 4) * H
        assert e.offset == want, (e, want)
        seen.add((p, e.kind, g))
    assert len(seen) == len(table) == 4 * (4 + 4 + 1 + 4 + 4)
    assert cudnn.blob_size(spec) == 8 * H * I + 36 * H * P + 32 * H
    assert cudnn.blob_size(spec) == RNNWeights.random(spec).num_parameters()


def _torch_flat_blob(module: object) -> np.ndarray:
    """What PyTorch hands cuDNN, in the order torch keeps it (``_flat_weights_names``: per
    layer and direction, its matrices and biases): each tensor as it is, no permutation, no
    transpose, every matrix before every bias (cuDNN's weight space, layouts.md)."""
    flat = dict(zip(module._flat_weights_names, module._flat_weights))  # type: ignore[attr-defined]
    matrices = [t for name, t in flat.items() if name.startswith("weight_")]
    biases = [t for name, t in flat.items() if name.startswith("bias_")]
    return np.concatenate([t.detach().numpy().reshape(-1) for t in matrices + biases])


def _run(torch: object, module: object, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The module's output sequence from the same inputs and initial states as the reference's."""
    h0 = torch.from_numpy(inputs["h0"])  # type: ignore[attr-defined]
    state = (h0, torch.from_numpy(inputs["c0"])) if "c0" in inputs else h0  # type: ignore[attr-defined]
    with torch.no_grad():  # type: ignore[attr-defined]
        return module(torch.from_numpy(inputs["X"]), state)[0].numpy()  # type: ignore[attr-defined,operator]


TORCH_MODULES = {
    "lstm,input=5,hidden=7,layers=2,bidirectional,proj=3": lambda nn: nn.LSTM(5, 7, num_layers=2, bidirectional=True, proj_size=3),
    "gru,input=3,hidden=4,layers=3": lambda nn: nn.GRU(3, 4, num_layers=3),
    "rnn_tanh,input=2,hidden=3,bidirectional,no_bias": lambda nn: nn.RNN(2, 3, bidirectional=True, bias=False),
    "rnn_relu,input=3,hidden=5,layers=2": lambda nn: nn.RNN(3, 5, num_layers=2, nonlinearity="relu"),
}


@pytest.mark.parametrize("text", list(TORCH_MODULES))
def test_torch_flat_weights_read_as_a_blob_compute_what_torch_computes(text: str) -> None:
    """Weights torch chose, taken in the order torch feeds cuDNN and unpacked by rnnx's table
    (its linLayerIDs and offsets): the reference on them gives torch's outputs, and rnnx packs
    the same blob back. A wrong linLayerID order or offset puts a gate's rows under another
    gate's name, which the outputs show."""
    torch = pytest.importorskip("torch")
    spec = RNNSpec.parse(text)
    torch.manual_seed(zlib.crc32(text.encode()))
    module = TORCH_MODULES[text](torch.nn).eval()
    for p in module.parameters():
        torch.nn.init.uniform_(p, -0.6, 0.6)
    blob = _torch_flat_blob(module)
    weights = rnnx.from_format(blob, "cudnn", spec=spec)
    inputs = parity.random_inputs(weights, 7, 3, seed=1)
    np.testing.assert_allclose(_run(torch, module, inputs), parity.reference_outputs(weights, inputs)["Y"], atol=2e-5, rtol=0)
    np.testing.assert_array_equal(rnnx.to_format(weights, "cudnn"), blob)


@pytest.mark.parametrize("text", cudnn_check.DEFAULT_SPECS)
def test_every_doctor_spec_reads_torchs_flat_weights_as_torch_computes(text: str) -> None:
    """The specs the GPU doctor checks, each held first on the CPU: torch's parameters in its
    cuDNN order, unpacked by rnnx's table, run by the reference as torch runs them, and
    packed back to the same blob."""
    torch = pytest.importorskip("torch")
    from rnnx.engines.torch import build_module

    spec = RNNSpec.parse(text)
    torch.manual_seed(zlib.crc32(text.encode()))
    module = build_module(RNNWeights.random(spec, seed=0))
    for p in module.parameters():
        torch.nn.init.uniform_(p, -0.6, 0.6)
    blob = _torch_flat_blob(module)
    weights = rnnx.from_format(blob, "cudnn", spec=spec)
    for steps, batch in ((5, 1), (3, 4)):
        inputs = parity.random_inputs(weights, steps, batch, seed=zlib.crc32(f"{text}/{steps}/{batch}".encode()))
        np.testing.assert_allclose(_run(torch, module, inputs), parity.reference_outputs(weights, inputs)["Y"], atol=2e-5, rtol=0)
    np.testing.assert_array_equal(rnnx.to_format(weights, "cudnn"), blob)


def test_the_doctor_specs_cover_what_the_gpu_check_promises() -> None:
    """At least 30 specs: each cell kind at 1-3 layers in both directions, projections with and
    without bias, no_bias for each kind, and input 1 with hidden 3."""
    specs = [RNNSpec.parse(t) for t in cudnn_check.DEFAULT_SPECS]
    assert len(set(specs)) == len(specs) >= 30
    for cell in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        for layers in (1, 2, 3):
            for direction in ("forward", "bidirectional"):
                assert any(s.cell == cell and s.num_layers == layers and s.direction == direction for s in specs), (cell, layers, direction)
        assert any(s.cell == cell and not s.bias for s in specs), cell
    assert any(s.proj_size and s.bias for s in specs) and any(s.proj_size and not s.bias for s in specs)
    assert any(s.input_size == 1 and s.hidden_size == 3 for s in specs)


def test_a_wrong_lin_layer_id_order_is_caught_by_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: with f and g swapped in the table, torch's weights unpack
    under the wrong names and the reference drifts from torch."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.LSTM(3, 4).eval()
    blob = _torch_flat_blob(module)
    spec = RNNSpec.parse("lstm,input=3,hidden=4")
    monkeypatch.setitem(cudnn.LIN_LAYER_IDS, "lstm", {"W": {"i": 0, "g": 1, "f": 2, "o": 3}, "R": {"i": 4, "g": 5, "f": 6, "o": 7}})
    weights = rnnx.from_format(blob, "cudnn", spec=spec)
    inputs = parity.random_inputs(weights, 6, 2, seed=2)
    assert np.abs(_run(torch, module, inputs) - parity.reference_outputs(weights, inputs)["Y"]).max() > 1e-2


def test_round_trip_is_bit_exact_and_unpacking_copies_nothing() -> None:
    spec = RNNSpec.parse("gru,input=3,hidden=4,layers=2,bidirectional")
    weights = RNNWeights.random(spec, seed=1, dtype=np.float16)
    blob = rnnx.to_format(weights, "cudnn")
    assert blob.dtype == np.float16 and blob.ndim == 1
    back = rnnx.from_format(blob, "cudnn", spec=spec)
    assert back.equal(weights)
    assert all(np.shares_memory(t, blob) for t in back.tensors.values())


def _forum_pack(weights: RNNWeights, transpose: bool = True, order: str = "ifog", biases_per_layer: bool = True) -> np.ndarray:
    """The widely copied answer: per layer, transposed matrices in i,f,o,g order, that layer's biases right after."""
    parts: list[list[np.ndarray]] = []
    for layer, d in weights.cells():
        mats = [np.concatenate([weights.get(layer, d, kind, g) for g in order]) for kind in ("W", "R")]
        mats = [m.T if transpose else m for m in mats]
        biases = [np.concatenate([weights.get(layer, d, kind, g) for g in order]) for kind in ("bW", "bR")]
        parts.append([m.reshape(-1) for m in mats] + biases)
    if biases_per_layer:
        return np.concatenate([a for p in parts for a in p])
    return np.concatenate([a for p in parts for a in p[:2]] + [a for p in parts for a in p[2:]])


def test_the_forum_answer_gives_a_different_blob_and_different_outputs() -> None:
    spec = RNNSpec.parse("lstm,input=4,hidden=5,layers=2")
    weights = RNNWeights.random(spec, seed=0, scale=1.0)
    right = rnnx.to_format(weights, "cudnn")
    x = np.random.default_rng(1).standard_normal((6, 2, 4))
    y_right = reference.forward(weights, x).y

    def damage(blob: np.ndarray) -> tuple[float, float]:
        wrong = rnnx.from_format(blob, "cudnn", spec=spec)
        return float(np.mean(blob != right)), float(np.abs(reference.forward(wrong, x).y - y_right).max())

    forum = damage(_forum_pack(weights))
    assert forum[0] > 0.9 and forum[1] > 0.1, forum
    # Each of the three errors alone already breaks it.
    only_order = damage(_forum_pack(weights, transpose=False, biases_per_layer=False))
    only_transpose = damage(_forum_pack(weights, order="ifgo", biases_per_layer=False))
    only_biases = damage(_forum_pack(weights, transpose=False, order="ifgo"))
    for name, (changed, out_err) in {"order": only_order, "transpose": only_transpose, "biases": only_biases}.items():
        assert changed > 0.1 and out_err > 1e-2, (name, changed, out_err)
    # With all three fixed, the forum code gives our blob.
    np.testing.assert_array_equal(_forum_pack(weights, transpose=False, order="ifgo", biases_per_layer=False), right)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("lstm,input=3,hidden=4,peepholes", "no peepholes"),
        ("gru,input=3,hidden=4,reset_before", "reset_before GRU has no cuDNN form"),
        ("rnn_tanh,input=3,hidden=4,reverse", "no reverse-only mode"),
    ],
)
def test_refusals(text: str, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment):
        rnnx.to_format(RNNWeights.random(RNNSpec.parse(text)), "cudnn")


def test_wrong_size_is_refused() -> None:
    with pytest.raises(RNNXError, match=r"expected 144 elements for spec lstm,input=3,hidden=4, found 143"):
        rnnx.from_format(np.zeros(143, np.float32), "cudnn", spec="lstm,input=3,hidden=4")


def test_file_carries_spec_and_table(tmp_path) -> None:
    from safetensors.numpy import save_file

    spec = RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional,proj=2")
    weights = RNNWeights.random(spec, seed=8)
    path = tmp_path / "blob.safetensors"
    rnnx.save(weights, path, format="cudnn")
    assert rnnx.load(path).equal(weights)  # sniffed as cudnn by its metadata
    meta = rnnx.fileio.safetensors_metadata(path)
    assert json.loads(meta["table"])[8] == [e.offset for e in cudnn.offset_table(spec)][8:9] + [[2, 4]]
    tampered = json.loads(meta["table"])
    tampered[0][0] = 1
    save_file({"blob": rnnx.to_format(weights, "cudnn")}, str(path), metadata={**meta, "table": json.dumps(tampered)})
    with pytest.raises(RNNXError, match="offset table differs"):
        rnnx.load(path)
