"""The flax format, pinned by running Flax's own cells (flax.linen and flax.nnx) against the
float64 reference: trees Flax made, read by rnnx; trees rnnx wrote, run by Flax against
torch; and .msgpack files both ways through flax.serialization."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, formats, parity
from rnnx.check import stack
from tests.test_spec import specs

flax = pytest.importorskip("flax")
jax = pytest.importorskip("jax")
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
from flax import (  # noqa: E402
    linen as nn,  # noqa: E402
    nnx,
    serialization,
)

SHAPES = [(1, 1), (6, 3), (4, 1)]  # (seq_len, batch)
CLASSES = ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"]
CELL_OF = {"LSTMCell": "lstm", "OptimizedLSTMCell": "lstm", "GRUCell": "gru", "SimpleCell": "rnn_tanh"}
DIRECTIONS = ["forward", "reverse", "bidirectional"]


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


# --- Flax modules, built and run as their users do ---------------------------------------


def _linen_cell(cls: str, spec: RNNSpec) -> nn.Module:
    extra = {"activation_fn": nn.relu} if spec.cell == "rnn_relu" else {}
    return getattr(nn, cls)(features=spec.hidden_size, **extra)


def _linen_module(cls: str, spec: RNNSpec) -> nn.Module:
    if spec.direction == "bidirectional":
        return nn.Bidirectional(nn.RNN(_linen_cell(cls, spec)), nn.RNN(_linen_cell(cls, spec)))
    return nn.RNN(_linen_cell(cls, spec), reverse=spec.direction == "reverse", keep_order=True)


def _nnx_cell(cls: str, spec: RNNSpec, seed: int) -> nnx.Module:
    extra = {"activation_fn": nnx.relu} if spec.cell == "rnn_relu" else {}
    return getattr(nnx, cls)(spec.input_size, spec.hidden_size, rngs=nnx.Rngs(seed), **extra)


def _nnx_module(cls: str, spec: RNNSpec, seed: int = 0) -> nnx.Module:
    if spec.direction == "bidirectional":
        return nnx.Bidirectional(nnx.RNN(_nnx_cell(cls, spec, seed)), nnx.RNN(_nnx_cell(cls, spec, seed + 1)), rngs=nnx.Rngs(seed + 2))
    return nnx.RNN(_nnx_cell(cls, spec, seed), reverse=spec.direction == "reverse", keep_order=True)


def _carry(spec: RNNSpec, inputs: dict[str, np.ndarray]) -> tuple:
    """Flax's initial carry per direction from rnnx's h0/c0: (c, h) for an LSTM, h otherwise."""
    carries = [(jnp.asarray(inputs["c0"][d]), jnp.asarray(inputs["h0"][d])) if spec.cell == "lstm" else jnp.asarray(inputs["h0"][d])
               for d in range(spec.num_directions)]
    return tuple(carries) if spec.direction == "bidirectional" else carries[0]


def _outputs(spec: RNNSpec, carry: object, y: object) -> dict[str, np.ndarray]:
    carries = carry if spec.direction == "bidirectional" else (carry,)
    out = {"Y": np.asarray(y).transpose(1, 0, 2), "h_n": np.stack([np.asarray(c[1] if spec.cell == "lstm" else c) for c in carries])}
    if spec.cell == "lstm":
        out["c_n"] = np.stack([np.asarray(c[0]) for c in carries])
    return out


def _run_linen(module: nn.Module, variables: dict, spec: RNNSpec):
    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = jnp.asarray(inputs["X"].transpose(1, 0, 2))  # Flax is batch-major
        carry, y = module.apply(variables, x, initial_carry=_carry(spec, inputs), return_carry=True)
        return _outputs(spec, carry, y)
    return run


def _run_nnx(module: nnx.Module, spec: RNNSpec):
    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        carry, y = module(jnp.asarray(inputs["X"].transpose(1, 0, 2)), initial_carry=_carry(spec, inputs), return_carry=True)
        return _outputs(spec, carry, y)
    return run


def _seeded(tree: object, seed: int) -> object:
    """Every leaf drawn afresh: Flax initialises biases to zero, which would test nothing."""
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(lambda a: jnp.asarray(rng.uniform(-0.6, 0.6, np.shape(a)).astype(np.float32)), tree)


def _nnx_params(module: nnx.Module) -> dict:
    return nnx.to_pure_dict(nnx.state(module, nnx.Param))


def _load_nnx(module: nnx.Module, pure: dict) -> None:
    state = nnx.state(module, nnx.Param)
    nnx.replace_by_pure_dict(state, jax.tree_util.tree_map(jnp.asarray, pure))
    nnx.update(module, state)


def _assert_parity(name: str, run, weights: RNNWeights, seed: int) -> None:
    report = stack.check(name, run, weights, shapes=SHAPES, seed=seed)
    assert report, str(report)


def _spec(cls: str, direction: str, relu: bool = False) -> RNNSpec:
    cell = "rnn_relu" if relu else CELL_OF[cls]
    return RNNSpec(cell, input_size=3, hidden_size=4, direction=direction)


CASES = [(cls, d) for cls in CLASSES for d in DIRECTIONS]


# --- Flax's trees, read by rnnx -------------------------------------------------------


@pytest.mark.parametrize(("cls", "direction"), CASES)
def test_linen_tree_read_by_rnnx_matches_flax(cls: str, direction: str) -> None:
    spec = _spec(cls, direction)
    module = _linen_module(cls, spec)
    variables = _seeded(module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, spec.input_size))), _seed("linen", cls, direction))
    weights = rnnx.from_format(variables, "flax", spec=spec if spec.cell.startswith("rnn") or direction == "reverse" else None)
    assert weights.spec == spec
    _assert_parity(f"flax.linen {cls}", _run_linen(module, variables, spec), weights, _seed("in", cls, direction))


@pytest.mark.parametrize(("cls", "direction"), CASES)
def test_nnx_tree_read_by_rnnx_matches_flax(cls: str, direction: str) -> None:
    spec = _spec(cls, direction)
    module = _nnx_module(cls, spec)
    _load_nnx(module, _seeded(_nnx_params(module), _seed("nnx", cls, direction)))
    weights = rnnx.from_format(_nnx_params(module), "flax", spec=spec)
    _assert_parity(f"flax.nnx {cls}", _run_nnx(module, spec), weights, _seed("in", cls, direction))


@pytest.mark.parametrize("flavor", ["linen", "nnx"])
def test_simple_cell_with_relu(flavor: str) -> None:
    spec = _spec("SimpleCell", "forward", relu=True)
    if flavor == "linen":
        module = _linen_module("SimpleCell", spec)
        variables = _seeded(module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 3))), 5)
        run, tree = _run_linen(module, variables, spec), variables
    else:
        module = _nnx_module("SimpleCell", spec)
        _load_nnx(module, _seeded(_nnx_params(module), 5))
        run, tree = _run_nnx(module, spec), _nnx_params(module)
    _assert_parity(f"flax.{flavor} SimpleCell(relu)", run, rnnx.from_format(tree, "flax", spec=spec), 6)
    with pytest.raises(RNNXError, match="rnn_tanh.*or spec=rnn_relu"):
        rnnx.from_format(tree, "flax")


def test_bare_cell_step_matches_reference() -> None:
    """A cell called for one step, outside any RNN: its tree is the cell's alone."""
    cell = nn.GRUCell(features=4)
    variables = _seeded(cell.init(jax.random.PRNGKey(0), jnp.zeros((2, 4)), jnp.zeros((2, 3))), 11)
    weights = rnnx.from_format(variables, "flax")
    assert weights.spec == _spec("GRUCell", "forward")

    def run(inputs):
        h, y = inputs["h0"][0], []
        for x in inputs["X"]:
            h, out = cell.apply(variables, jnp.asarray(h), jnp.asarray(x))
            y.append(np.asarray(out))
        return {"Y": np.stack(y), "h_n": np.asarray(h)[None]}
    _assert_parity("flax.linen GRUCell step", run, weights, 12)
    assert rnnx.to_format(weights, "flax", module="cell")["params"].keys() == variables["params"].keys()


# --- rnnx's trees, run by Flax against torch ------------------------------------------


TORCH = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN"}


def _torch_module(spec: RNNSpec, seed: int):
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    module = getattr(torch.nn, TORCH[spec.cell])(spec.input_size, spec.hidden_size, bidirectional=spec.direction == "bidirectional")
    return torch, module.eval()


def _run_torch(torch, module, spec: RNNSpec):
    def run(inputs):
        h0 = torch.from_numpy(inputs["h0"])
        with torch.no_grad():
            if spec.cell == "lstm":
                y, (h, c) = module(torch.from_numpy(inputs["X"]), (h0, torch.from_numpy(inputs["c0"])))
                return {"Y": y.numpy(), "h_n": h.numpy(), "c_n": c.numpy()}
            y, h = module(torch.from_numpy(inputs["X"]), h0)
            return {"Y": y.numpy(), "h_n": h.numpy()}
    return run


def _against(run, want_run, weights: RNNWeights, seed: int, atol: float = 2e-5) -> None:
    for k, (seq_len, batch) in enumerate(SHAPES):
        inputs = parity.random_inputs(weights, seq_len, batch, seed=seed + k)
        got, want = run(inputs), want_run(inputs)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=atol, err_msg=f"{name} at {(seq_len, batch)}")


@pytest.mark.parametrize(("cls", "direction"), [(c, d) for c in CLASSES for d in ("forward", "bidirectional")])
def test_torch_weights_written_for_linen_give_torchs_outputs(cls: str, direction: str) -> None:
    spec = _spec(cls, direction)
    torch, tmodule = _torch_module(spec, _seed("torch", cls, direction))
    weights = rnnx.from_format(tmodule.state_dict(), "torch", spec=spec)
    module = _linen_module(cls, spec)
    variables = rnnx.to_format(weights, "flax")
    _against(_run_linen(module, variables, spec), _run_torch(torch, tmodule, spec), weights, _seed("x", cls))


@pytest.mark.parametrize(("cls", "direction"), [(c, d) for c in CLASSES for d in ("forward", "bidirectional")])
def test_torch_weights_written_for_nnx_give_torchs_outputs(cls: str, direction: str) -> None:
    spec = _spec(cls, direction)
    torch, tmodule = _torch_module(spec, _seed("torch", cls, direction))
    weights = rnnx.from_format(tmodule.state_dict(), "torch", spec=spec)
    if cls == "GRUCell":
        # nnx's GRUCell has no bias inside the reset product: torch's bias_hh for n cannot go there.
        with pytest.raises(RNNXError, match=r"bR\.n.*no recurrent bias for gate n.*flavor='linen'"):
            rnnx.to_format(weights, "flax", flavor="nnx")
        with torch.no_grad():
            for name, p in tmodule.named_parameters():
                if name.startswith("bias_hh"):
                    p[2 * spec.hidden_size:] = 0
        weights = rnnx.from_format(tmodule.state_dict(), "torch", spec=spec)
    module = _nnx_module(cls, spec)
    _load_nnx(module, rnnx.to_format(weights, "flax", flavor="nnx", cell_class=cls if cls == "OptimizedLSTMCell" else None))
    _against(_run_nnx(module, spec), _run_torch(torch, tmodule, spec), weights, _seed("x", cls))


# --- files through flax.serialization ---------------------------------------------------


@pytest.mark.parametrize("cls", ["LSTMCell", "GRUCell"])
def test_file_saved_by_flax_is_read_by_rnnx(tmp_path, cls: str) -> None:
    """linen variables inside a TrainState-like dict, saved with to_bytes: the optimizer's
    copies of the tree are skipped, and the module found and read."""
    spec = _spec(cls, "bidirectional")
    module = _linen_module(cls, spec)
    variables = _seeded(module.init(jax.random.PRNGKey(1), jnp.zeros((1, 2, 3))), _seed("file", cls))
    state = {"step": jnp.asarray(7), "params": variables["params"], "opt_state": {"mu": variables["params"]}}
    path = tmp_path / "ckpt.msgpack"
    path.write_bytes(serialization.to_bytes(state))
    assert rnnx.groups(path) == ["params"]
    _assert_parity(f"flax.linen {cls} file", _run_linen(module, variables, spec), rnnx.load(path), _seed("file-in", cls))


def test_nnx_file_saved_by_flax_is_read_by_rnnx(tmp_path) -> None:
    spec = _spec("OptimizedLSTMCell", "forward")
    module = _nnx_module("OptimizedLSTMCell", spec)
    _load_nnx(module, _seeded(_nnx_params(module), 21))
    path = tmp_path / "nnx.msgpack"
    path.write_bytes(serialization.to_bytes(_nnx_params(module)))
    _assert_parity("flax.nnx OptimizedLSTMCell file", _run_nnx(module, spec), rnnx.load(path), 22)


@pytest.mark.parametrize("cls", CLASSES)
def test_file_written_by_rnnx_loads_in_flax_and_gives_torchs_outputs(tmp_path, cls: str) -> None:
    spec = _spec(cls, "bidirectional")
    torch, tmodule = _torch_module(spec, _seed("torch-file", cls))
    weights = rnnx.from_format(tmodule.state_dict(), "torch", spec=spec)
    path = tmp_path / "w.msgpack"
    rnnx.save(weights, path)
    module = _linen_module(cls, spec)
    template = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 3)))
    variables = serialization.from_bytes(template, path.read_bytes())
    _against(_run_linen(module, variables, spec), _run_torch(torch, tmodule, spec), weights, _seed("file-x", cls))
    assert rnnx.load(path, spec=spec).spec == spec


def test_a_stack_of_layers_is_read_one_layer_at_a_time(tmp_path) -> None:
    """Flax has no multi-layer module: a user's stack holds one RNN per layer, each a group,
    read with select= and stacked in the order the module calls them."""

    class Stack(nn.Module):
        def setup(self):
            self.layers = [nn.RNN(nn.LSTMCell(4)) for _ in range(2)]

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    class Compact(nn.Module):  # a cell made inline in a compact method belongs to its caller, not to the RNN
        @nn.compact
        def __call__(self, x):
            for _ in range(2):
                x = nn.RNN(nn.LSTMCell(4))(x)
            return x

    for module, names in ((Stack(), ["params/layers_0", "params/layers_1"]), (Compact(), ["params/LSTMCell_0", "params/LSTMCell_1"])):
        variables = _seeded(module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 3))), 41)
        path = tmp_path / "stack.msgpack"
        path.write_bytes(serialization.to_bytes(variables))
        assert rnnx.groups(path) == names
        with pytest.raises(RNNXError, match=rf"2 recurrent groups \({names[0]}, {names[1]}\); pass select=GROUP"):
            rnnx.load(path)
        first = rnnx.load(path, select=names[0])
        second = rnnx.load(path, select=names[1])
        assert (first.spec.input_size, second.spec.input_size) == (3, 4)
        stacked = RNNWeights(RNNSpec.parse("lstm,input=3,hidden=4,layers=2"),
                             {**first.tensors, **{k.replace("l0.", "l1.", 1): v for k, v in second.tensors.items()}})
        inputs = parity.random_inputs(stacked, 5, 2, seed=42, states=False)
        got = np.asarray(module.apply(variables, jnp.asarray(inputs["X"].transpose(1, 0, 2)))).transpose(1, 0, 2)
        np.testing.assert_allclose(got, parity.reference_outputs(stacked, inputs)["Y"], atol=2e-5)
    with pytest.raises(RNNXError, match="2 layers in one module"):
        rnnx.to_format(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,layers=2")), "flax")


# --- round trips over generated specs -------------------------------------------------


def _flax_spec(spec: RNNSpec) -> RNNSpec:
    """The generated spec cut down to what Flax holds: one layer with biases, no projection or peepholes."""
    return spec.with_(num_layers=1, bias=True, proj_size=0, peepholes=False, reset_after=True)


FLAX_SPECS = st.one_of(specs(), specs().map(_flax_spec))  # half refused somewhere, half held


@given(spec=FLAX_SPECS, seed=st.integers(0, 2**16), dtype=st.sampled_from([np.float32, np.float64, np.float16]),
       flavor=st.sampled_from(["linen", "nnx"]))
@settings(max_examples=60, deadline=None)
def test_native_round_trip(spec: RNNSpec, seed: int, dtype: type, flavor: str) -> None:
    """Flax keeps one bias where we keep two (except GRU n): writing what was read gives the
    same tree; what cannot be held is refused, never altered."""
    weights = RNNWeights.random(spec, seed=seed, dtype=dtype)
    refusals = formats.get("flax").refusals(spec)
    if refusals or (flavor == "nnx" and spec.cell == "gru"):
        with pytest.raises(RNNXError):
            rnnx.to_format(weights, "flax", flavor=flavor)
        return
    native = rnnx.to_format(weights, "flax", flavor=flavor)
    back = rnnx.from_format(native, "flax", spec=spec)
    again = rnnx.to_format(back, "flax", flavor=flavor)
    flat, flat_again = jax.tree_util.tree_leaves_with_path(native), jax.tree_util.tree_leaves_with_path(again)
    assert [p for p, _ in flat] == [p for p, _ in flat_again]
    assert all(a.dtype == b.dtype == dtype and a.tobytes() == b.tobytes() for (_, a), (_, b) in zip(flat, flat_again))


@given(spec=specs().map(_flax_spec), seed=st.integers(0, 2**16))
@settings(max_examples=25, deadline=None)
def test_file_round_trip(tmp_path_factory: pytest.TempPathFactory, spec: RNNSpec, seed: int) -> None:
    if formats.get("flax").refusals(spec):
        return
    weights = RNNWeights.random(spec, seed=seed)
    path = tmp_path_factory.mktemp("flax") / "w.msgpack"
    rnnx.save(weights, path)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: a.tobytes() == b.tobytes(), rnnx.to_format(rnnx.load(path, spec=spec), "flax"), rnnx.to_format(weights, "flax")))


# --- a planted error fails, refusals and hostile files ----------------------------------


def test_a_swapped_gate_in_the_layout_fails_against_flax(monkeypatch) -> None:
    """The tests above can fail: with linen's f and g dense names swapped in the layout, the
    weights rnnx reads from Flax's tree no longer compute Flax's outputs."""
    import dataclasses

    from rnnx.layouts import flax as layout

    spec = _spec("LSTMCell", "forward")
    module = _linen_module("LSTMCell", spec)
    variables = _seeded(module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 3))), 31)
    run = _run_linen(module, variables, spec)
    _assert_parity("as shipped", run, rnnx.from_format(variables, "flax"), 32)
    swap = {"if": "ig", "ig": "if", "hf": "hg", "hg": "hf"}
    planted = tuple(
        dataclasses.replace(c, denses=tuple(dataclasses.replace(d, name=swap.get(d.name, d.name)) for d in c.denses))
        if c.flavor == "linen" and c.cell == "lstm" else c
        for c in layout.CELLS
    )
    monkeypatch.setattr(layout, "CELLS", planted)
    report = stack.check("planted", run, rnnx.from_format(variables, "flax"), shapes=SHAPES, seed=32)
    assert not report


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("lstm,input=2,hidden=3,proj=1", "projection"), ("lstm,input=2,hidden=3,peepholes", "peepholes"),
     ("gru,input=2,hidden=3,reset_before", "reset_before"), ("rnn_tanh,input=2,hidden=3,no_bias", "no_bias")],
)
def test_refusals(text: str, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment):
        rnnx.to_format(RNNWeights.random(RNNSpec.parse(text)), "flax")
    assert fragment.split()[0] in " ".join(formats.get("flax").refusals(RNNSpec.parse(text)))


def test_non_default_activations_are_refused() -> None:
    """A tree holds no gate_fn or activation_fn: a spec that needs them cannot be written or read."""
    from rnnx.spec import Activation

    spec = RNNSpec("gru", input_size=2, hidden_size=3, activations=(Activation("HardSigmoid", 0.2, 0.5), Activation("Tanh")))
    with pytest.raises(RNNXError, match="parameter tree does not record"):
        rnnx.to_format(RNNWeights.random(spec), "flax")
    tree = rnnx.to_format(RNNWeights.random(spec.with_(activations=())), "flax")
    with pytest.raises(RNNXError, match="parameter tree does not record"):
        rnnx.from_format(tree, "flax", spec=spec)


def test_reverse_rnn_without_keep_order_and_time_major() -> None:
    """RNN(reverse=True) without keep_order returns its outputs in the order it ran (last step
    first); the weights are the same reverse layer's."""
    spec = _spec("LSTMCell", "reverse")
    module = nn.RNN(nn.LSTMCell(4), reverse=True, time_major=True)
    variables = _seeded(module.init(jax.random.PRNGKey(0), jnp.zeros((2, 1, 3))), 51)
    weights = rnnx.from_format(variables, "flax", spec=spec)

    def run(inputs):
        carry, y = module.apply(variables, jnp.asarray(inputs["X"]), initial_carry=_carry(spec, inputs), return_carry=True)
        return {"Y": np.asarray(y)[::-1], "h_n": np.asarray(carry[1])[None], "c_n": np.asarray(carry[0])[None]}
    _assert_parity("flax.linen RNN(reverse=True, time_major=True)", run, weights, 52)


def test_flax_file_converted_to_onnx_runs_in_onnx_runtime_as_in_flax(tmp_path) -> None:
    """Across frameworks: a file Flax saved, converted by rnnx to ONNX (convert checks it in
    ONNX Runtime against the reference), gives Flax's own outputs in ONNX Runtime."""
    from rnnx.engines.onnxruntime import OnnxRuntimeRunner
    from rnnx.pipelines.convert import convert

    spec = _spec("GRUCell", "bidirectional")
    module = _linen_module("GRUCell", spec)
    variables = _seeded(module.init(jax.random.PRNGKey(2), jnp.zeros((1, 2, 3))), 61)
    source = tmp_path / "gru.msgpack"
    source.write_bytes(serialization.to_bytes(variables))
    convert(source, tmp_path / "gru.onnx")
    weights = rnnx.load(source)
    _against(OnnxRuntimeRunner(tmp_path / "gru.onnx"), _run_linen(module, variables, spec), weights, 62)


def test_convert_runs_the_written_file_in_flax_and_a_wrong_gate_order_fails(tmp_path) -> None:
    """convert's check of a .msgpack is Flax loading it with from_bytes and running it: with
    linen GRUCell's r and z denses swapped in the layout it must fail and leave nothing behind."""
    import json

    from tests.helpers import convert_as_shipped_and_planted

    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4,bidirectional"), seed=71)
    rnnx.save(weights, tmp_path / "w.safetensors")
    plant = (
        "import dataclasses, rnnx.layouts.flax as t; swap = {'ir': 'iz', 'iz': 'ir', 'hr': 'hz', 'hz': 'hr'}; "
        "t.CELLS = tuple(dataclasses.replace(c, denses=tuple(dataclasses.replace(d, name=swap.get(d.name, d.name)) for d in c.denses)) "
        "if c.flavor == 'linen' and c.cell == 'gru' else c for c in t.CELLS); "
    )
    good, bad = convert_as_shipped_and_planted(tmp_path / "w.safetensors", tmp_path / "w.msgpack", "flax", plant)
    assert good.returncode == 0, good.stderr
    rows = json.loads(good.stdout)["check"]["rows"]
    assert {r["backend"] for r in rows} == {"flax"} and all(r["ran"] for r in rows)
    assert bad.returncode == 1, bad.stdout[-1000:] + bad.stderr
    assert "parity check failed: flax" in bad.stderr and not (tmp_path / "w.msgpack").exists()


def _one_line_refusal(path) -> str:
    with pytest.raises(RNNXError) as info:
        rnnx.load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_hostile_files_give_one_line(tmp_path) -> None:
    import msgpack

    spec = _spec("LSTMCell", "forward")
    good = serialization.to_bytes(rnnx.to_format(RNNWeights.random(spec, seed=1), "flax"))
    cut = tmp_path / "cut.msgpack"
    cut.write_bytes(good[: len(good) // 2])
    assert "damaged" in _one_line_refusal(cut)
    # An array record claiming 2**40 floats in 16 bytes: refused before anything is allocated.
    huge = msgpack.ExtType(1, msgpack.packb(((1 << 40,), "float32", b"\0" * 16), use_bin_type=True))
    liar = tmp_path / "liar.msgpack"
    liar.write_bytes(msgpack.packb({"params": {"cell": {"ii": {"kernel": huge}}}}))
    assert "needs 4398046511104 bytes, found 16" in _one_line_refusal(liar)
    # A map header claiming 2**31 entries in a 6-byte file.
    claim = tmp_path / "claim.msgpack"
    claim.write_bytes(b"\xdf\x80\x00\x00\x00\x00")
    assert "cannot read as Flax msgpack" in _one_line_refusal(claim)
    deep = tmp_path / "deep.msgpack"
    deep.write_bytes(b"\x81\xa1a" * 5000 + b"\xc0")
    _one_line_refusal(deep)
    text = tmp_path / "text.msgpack"
    text.write_bytes(b"not msgpack at all")
    _one_line_refusal(text)
