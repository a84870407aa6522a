"""ONNX Runtime's quantized LSTM (com.microsoft.DynamicQuantizeLSTM), made by its real producers:
torch.onnx exports an nn.LSTM, onnxruntime.quantization.quantize_dynamic quantizes it. Each
claim is pinned by running ONNX Runtime on the quantized file and torch on the dequantized
weights, held to the bound of rnnx.formats.onnx_quantized.error_bound, with a planted mistake
beside it to show the bound is tight enough to catch one."""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import rnnx
from rnnx import RNNXError, parity
from rnnx.cli import main as cli_main
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats.onnx_quantized import error_bound, main_graph_quantizations
from rnnx.pipelines.convert import convert

torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")

SHAPES = [(1, 1), (9, 1), (23, 4)]  # (seq_len, batch): batch 1 included
CASES = {  # name -> (input, hidden, layers, bidirectional, per_channel)
    "tensor": (5, 7, 1, False, False),
    "channel_bi_2l": (4, 6, 2, True, True),
}


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


def _quantize(src: Path, dst: Path, per_channel: bool, reduce_range: bool = True) -> None:
    logging.getLogger().setLevel(logging.ERROR)  # the tool advises pre-processing on every call
    quantization.quantize_dynamic(src, dst, per_channel=per_channel, reduce_range=reduce_range)


def _export(module, path: Path) -> None:
    x = torch.zeros(3, 2, module.input_size)
    dirs = 2 if module.bidirectional else 1
    h = torch.zeros(module.num_layers * dirs, 2, module.hidden_size)
    torch.onnx.export(module, (x, (h, h.clone())), str(path), input_names=["X", "h0", "c0"], output_names=["Y", "h_n", "c_n"],
                      dynamic_axes={"X": {0: "seq", 1: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"}}, opset_version=17, dynamo=False)


@pytest.fixture(scope="module", params=list(CASES))
def made(request, tmp_path_factory):
    """(torch module, its float ONNX file, the quantized file, its state_dict file) for one case."""
    inp, hidden, layers, bidi, per_channel = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(_seed(request.param))
    module = torch.nn.LSTM(inp, hidden, num_layers=layers, bidirectional=bidi).eval()
    float_path, quant_path, ck = folder / "float.onnx", folder / "quant.onnx", folder / "lstm.pt"
    _export(module, float_path)
    _quantize(float_path, quant_path, per_channel)
    torch.save(module.state_dict(), ck)
    return module, float_path, quant_path, ck, per_channel


def _initializers(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def _quantized_nodes(path: Path) -> list:
    return [n for n in onnx.load(str(path)).graph.node if n.op_type == "DynamicQuantizeLSTM"]


def _torch_run(module, weights: rnnx.RNNWeights, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """torch's own nn.LSTM, loaded with ``weights``, on ``inputs``."""
    clone = torch.nn.LSTM(module.input_size, module.hidden_size, num_layers=module.num_layers, bidirectional=module.bidirectional).eval()
    clone.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in rnnx.to_format(weights, "torch").items()})
    with torch.no_grad():
        y, (h, c) = clone(torch.from_numpy(inputs["X"]), (torch.from_numpy(inputs["h0"]), torch.from_numpy(inputs["c0"])))
    return {"Y": y.numpy(), "h_n": h.numpy(), "c_n": c.numpy()}


def test_the_producer_writes_the_op_rnnx_reads(made) -> None:
    _, _, quant, _, per_channel = made
    nodes = _quantized_nodes(quant)
    assert nodes and all(n.domain == "com.microsoft" for n in nodes)
    init = _initializers(quant)
    for n in nodes:
        assert init[n.input[1]].dtype == np.int8 and init[n.input[8]].ndim == (2 if per_channel else 1)


def test_read_dequantizes_the_stored_integers(made) -> None:
    """W and R come out as (q - zero_point) * scale, transposed to ONNX's [dirs, 4H, cols]:
    computed here from the initializers with numpy, layer by layer."""
    _, _, quant, _, _ = made
    init = _initializers(quant)
    got = rnnx.to_format(rnnx.load(quant), "onnx")
    for layer, node in enumerate(_quantized_nodes(quant)):
        for key, (q_at, s_at, z_at) in {"W": (1, 8, 9), "R": (2, 10, 11)}.items():
            q, s, z = (init[node.input[i]] for i in (q_at, s_at, z_at))
            s = s[:, None, :] if s.ndim == 2 else s[:, None, None]
            z = z[:, None, :] if z.ndim == 2 else z[:, None, None]
            want = np.transpose((q.astype(np.float64) - z) * s, (0, 2, 1))
            np.testing.assert_allclose(got[layer][key], want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("T,B", SHAPES)
def test_torch_on_the_dequantized_weights_matches_onnx_runtime_within_the_bound(made, T: int, B: int) -> None:
    """ONNX Runtime runs the int8 file; torch's nn.LSTM runs the weights rnnx read from it.
    They agree within the bound, and not by far (the bound is a few times the real rounding,
    not a multiple of the outputs), while torch on the same weights with two gates swapped,
    with the float weights scaled as a 1.5x scale would, or with every bias zeroed, does not."""
    module, _, quant, _, _ = made
    weights = rnnx.load(quant)
    layers = main_graph_quantizations(onnx.load(str(quant)))
    inputs = parity.random_inputs(weights, T, B, seed=_seed(f"{T},{B}"))
    got = OnnxRuntimeRunner(quant)(inputs)
    bound = error_bound(layers, weights, inputs, from_float=False)
    want = _torch_run(module, weights, inputs)
    err = max(float(np.abs(got[k] - want[k]).max()) for k in want)
    assert bound / 20 < err <= bound / 1.2, f"error {err:.3e} against a bound {bound:.3e}"
    assert bound < 0.2 * max(float(np.abs(w).max()) for w in want.values())

    swapped = dict(weights.tensors)
    for kind in ("W", "R"):
        swapped[f"l0.forward.{kind}.g"], swapped[f"l0.forward.{kind}.o"] = swapped[f"l0.forward.{kind}.o"], swapped[f"l0.forward.{kind}.g"]
    scaled = {k: (v * 1.5 if k.startswith("l0.forward.W.") else v) for k, v in weights.tensors.items()}
    unbiased = {k: (np.zeros_like(v) if ".bW." in k or ".bR." in k else v) for k, v in weights.tensors.items()}
    assert any(".bW." in k for k in unbiased)
    for planted in (swapped, scaled, unbiased):
        wrong = _torch_run(module, rnnx.RNNWeights(weights.spec, planted), inputs)
        assert max(float(np.abs(got[k] - wrong[k]).max()) for k in want) > bound


def test_inspect_lists_the_quantization_in_text_and_json(made, capsys) -> None:
    _, _, quant, _, per_channel = made
    init = _initializers(quant)
    nodes = _quantized_nodes(quant)
    assert cli_main(["inspect", str(quant), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["nodes"]
    assert len(listed) == len(nodes)
    for node, report in zip(nodes, listed):
        q = report["quantization"]
        assert q["op"] == "com.microsoft.DynamicQuantizeLSTM"
        by_name = {w["name"]: w for w in q["weights"]}
        for key, (_q_at, s_at, z_at) in {"W": (1, 8, 9), "R": (2, 10, 11)}.items():
            w = by_name[key]
            assert w["type"] == "int8" and w["granularity"] == ("per-channel" if per_channel else "per-tensor")
            np.testing.assert_array_equal(np.asarray(w["scale"], np.float32), init[node.input[s_at]])
            np.testing.assert_array_equal(np.asarray(w["zero_point"]), init[node.input[z_at]])
        assert "X" in q["dynamic"] and "B" in q["float"]
        assert report["backends"]["tensorrt"] and not report["backends"]["onnxruntime"]
    assert cli_main(["inspect", str(quant)]) == 0
    text = capsys.readouterr().out
    granularity = "per-channel" if per_channel else "per-tensor"
    assert "com.microsoft.DynamicQuantizeLSTM" in text and f"W int8 {granularity}" in text and f"R int8 {granularity}" in text
    assert "no LSTM, GRU or RNN node found" not in text


def test_convert_select_reads_the_dequantized_weights_and_says_so(made, tmp_path, capsys) -> None:
    _, _, quant, _, _ = made
    name = rnnx.groups(quant)[0]
    out = tmp_path / "deq.pt"
    assert cli_main(["convert", str(quant), "-o", str(out), "--select", name, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert any("dequantized from int8 weights" in n for n in result["notes"])
    assert rnnx.load(out).equal(rnnx.load(quant, select=name))
    assert cli_main(["convert", str(quant), "-o", str(tmp_path / "deq.safetensors")]) == 0
    assert "dequantized from int8 weights" in capsys.readouterr().out


def test_verify_passes_the_real_file_and_fails_a_planted_scale(made, tmp_path, capsys) -> None:
    _, _, quant, ck, _ = made
    assert cli_main(["verify", str(quant), "--against", str(quant), "--backends", "ort,reference", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and any(r["backend"] == "ort" and r["rtol"] == 0 and r["atol"] > 0 for r in report["rows"])
    # against the float weights it was quantized from: their rounding is in the bound too
    assert cli_main(["verify", str(quant), "--against", str(ck), "--backends", "ort,reference"]) == 0
    capsys.readouterr()

    model = onnx.load(str(quant))
    scale_name = _quantized_nodes(quant)[0].input[8]
    for init in model.graph.initializer:
        if init.name == scale_name:
            scale = numpy_helper.to_array(init).copy()
            scale[0] *= 1.5  # the first direction's W scale(s)
            init.CopyFrom(numpy_helper.from_array(scale, scale_name))
    planted = tmp_path / "planted.onnx"
    onnx.save(model, str(planted))
    assert cli_main(["verify", str(planted), "--against", str(quant), "--backends", "ort,reference"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_verify_fails_a_file_whose_biases_were_zeroed(made, tmp_path, capsys) -> None:
    """A user trial: the quantized file with every LSTM bias zeroed and only Y kept, verified
    against the float checkpoint it came from. The bound must fail it (an earlier bound, built
    on the worst case of every rounding, passed it); the untouched file passes."""
    _, _, quant, ck, _ = made
    model = onnx.load(str(quant))
    biases = {n.input[3] for n in _quantized_nodes(quant)}
    for init in model.graph.initializer:
        if init.name in biases:
            init.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(init)), init.name))
    while len(model.graph.output) > 1:
        model.graph.output.pop()
    planted = tmp_path / "nobias_Y.onnx"
    onnx.save(model, str(planted))
    assert cli_main(["verify", str(planted), "--against", str(ck), "--backends", "ort,reference"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "standard deviations" in out
    assert cli_main(["verify", str(quant), "--against", str(ck), "--backends", "ort,reference"]) == 0


def test_lower_says_it_left_the_quantized_node_alone(made, tmp_path, capsys) -> None:
    _, _, quant, _, _ = made
    assert cli_main(["lower", str(quant), "-o", str(tmp_path / "lowered.onnx")]) == 0
    out = capsys.readouterr().out
    assert "left alone" in out and "DynamicQuantizeLSTM" in out and "float model it was quantized from" in out
    assert out.count("(rule quantized)") == len(_quantized_nodes(quant))


def test_convert_quantize_dynamic_end_to_end(made, tmp_path, capsys) -> None:
    """--quantize dynamic: the producer's tool writes the file; its own check holds it to the
    bound; ONNX Runtime on it agrees with the torch module it came from within that bound."""
    module, _, _, ck, _ = made
    out = tmp_path / "int8.onnx"
    assert cli_main(["convert", str(ck), "-o", str(out), "--quantize", "dynamic", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    q = result["quantization"]
    assert result["written"] and result["check"]["passed"] and q["options"]["reduce_range"] is True
    assert 0 < q["max_abs"] <= q["bound"] and 0 < q["relative"] < 1
    assert len(_quantized_nodes(out)) == module.num_layers
    weights = rnnx.load(ck)
    layers = main_graph_quantizations(onnx.load(str(out)))
    for T, B in SHAPES:
        inputs = parity.random_inputs(weights, T, B, seed=_seed(f"e2e {T},{B}"))
        got = OnnxRuntimeRunner(out)(inputs)
        want = _torch_run(module, weights, inputs)
        bound = error_bound(layers, rnnx.load(out), inputs, from_float=True)
        assert max(float(np.abs(got[k] - want[k]).max()) for k in want) <= bound
    assert cli_main(["convert", str(ck), "-o", str(tmp_path / "again.onnx"), "--quantize", "dynamic"]) == 0
    text = capsys.readouterr().out
    assert "quantized by onnxruntime.quantization.quantize_dynamic" in text and "max abs error" in text


def test_quantize_is_refused_where_it_cannot_apply(tmp_path, capsys) -> None:
    torch.manual_seed(_seed("refusals"))
    ck = tmp_path / "lstm.pt"
    torch.save(torch.nn.LSTM(3, 4).state_dict(), ck)
    assert cli_main(["convert", str(ck), "-o", str(tmp_path / "x.safetensors"), "--quantize", "dynamic"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--quantize dynamic applies to --to onnx only, not rnnx" in err and "\n" not in err
    gru = tmp_path / "gru.pt"
    torch.save(torch.nn.GRU(3, 4).state_dict(), gru)
    assert cli_main(["convert", str(gru), "-o", str(tmp_path / "g.onnx"), "--quantize", "dynamic"]) == 2
    assert "native LSTM nodes only" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.onnx"))
    with pytest.raises(RNNXError, match="quantize: expected dynamic"):
        convert(ck, tmp_path / "y.onnx", quantize="static")


def test_a_damaged_scale_is_refused_in_one_line(made, tmp_path) -> None:
    _, _, quant, _, _ = made
    scale_name = _quantized_nodes(quant)[0].input[8]
    scale = _initializers(quant)[scale_name]
    nan = scale.copy()
    nan.flat[0] = np.nan
    for value, message in [(np.ones(5, np.float32), "W_scale and W_zero_point must both be"),
                           (nan, rf"W_scale must be finite, found NaN in 1 of its {scale.size} value"),
                           (scale.astype(np.float16).astype(np.int32), "W_scale must be float")]:
        model = onnx.load(str(quant))
        for init in model.graph.initializer:
            if init.name == scale_name:
                init.CopyFrom(numpy_helper.from_array(value, scale_name))
        damaged = tmp_path / "damaged.onnx"
        onnx.save(model, str(damaged))
        with pytest.raises(RNNXError, match=message) as caught:
            rnnx.load(damaged)
        assert "\n" not in str(caught.value)


def test_full_range_weights_saturate_onnx_runtime_where_its_kernel_does(made, tmp_path, capsys) -> None:
    """quantize_dynamic's default full 8-bit weights: where ONNX Runtime's int16 pair sums
    saturate (x86 without VNNI, measured by the probe), the file leaves the bound and verify
    says why. The same model with reduce_range (what --quantize dynamic uses) stays within it
    (the tests above); where the kernel is exact, so does the full-range file (next test)."""
    from rnnx.engines.ort_int8 import int8_pair_sums_saturate

    if int8_pair_sums_saturate() is not True:
        pytest.skip("this machine's ONNX Runtime sums u8 x s8 products exactly (VNNI, or not x86): nothing saturates here")
    module, float_path, _, _, per_channel = made
    full = tmp_path / "full.onnx"
    _quantize(float_path, full, per_channel, reduce_range=False)
    weights, layers = rnnx.load(full), main_graph_quantizations(onnx.load(str(full)))
    worst = 0.0
    for T, B in [(17, 8), (64, 8)]:
        inputs = parity.random_inputs(weights, T, B, seed=_seed(f"full {T},{B}"))
        got, want = OnnxRuntimeRunner(full)(inputs), _torch_run(module, weights, inputs)
        worst = max(worst, max(float(np.abs(got[k] - want[k]).max()) for k in want) / error_bound(layers, weights, inputs, False))
    assert worst > 1
    assert cli_main(["verify", str(full), "--against", str(full), "--backends", "ort,reference"]) == 1
    assert "saturation" in capsys.readouterr().out


def test_full_range_weights_stay_within_the_bound_where_the_kernel_is_exact(made, tmp_path, capsys) -> None:
    """The other behaviour: where the probe finds exact int32 sums (VNNI, ARM), full 8-bit
    weights are plain quantized arithmetic, held to the same bound as 7-bit ones, and verify
    passes without a saturation note."""
    from rnnx.engines.ort_int8 import int8_pair_sums_saturate

    if int8_pair_sums_saturate() is not False:
        pytest.skip("this machine's ONNX Runtime saturates its int16 pair sums (or the probe could not tell): the test above runs instead")
    module, float_path, _, _, per_channel = made
    full = tmp_path / "full.onnx"
    _quantize(float_path, full, per_channel, reduce_range=False)
    weights, layers = rnnx.load(full), main_graph_quantizations(onnx.load(str(full)))
    for T, B in [(1, 1), (17, 8), (64, 8)]:
        inputs = parity.random_inputs(weights, T, B, seed=_seed(f"full exact {T},{B}"))
        got, want = OnnxRuntimeRunner(full)(inputs), _torch_run(module, weights, inputs)
        assert max(float(np.abs(got[k] - want[k]).max()) for k in want) <= error_bound(layers, weights, inputs, False)
    assert cli_main(["verify", str(full), "--against", str(full), "--backends", "ort,reference"]) == 0
    assert "saturation" not in capsys.readouterr().out


def test_weights_fed_at_run_time_are_listed_and_refused_on_read(made, tmp_path, capsys) -> None:
    _, _, quant, _, _ = made
    model = onnx.load(str(quant))
    w_name = _quantized_nodes(quant)[0].input[1]
    (init,) = [i for i in model.graph.initializer if i.name == w_name]
    model.graph.input.append(onnx.helper.make_tensor_value_info(w_name, init.data_type, list(init.dims)))
    model.graph.initializer.remove(init)
    fed = tmp_path / "fed.onnx"
    onnx.save(model, str(fed))
    assert cli_main(["inspect", str(fed)]) == 0
    assert "W graph input" in capsys.readouterr().out
    with pytest.raises(RNNXError, match="W comes from graph input"):
        rnnx.load(fed, select=_quantized_nodes(quant)[0].name)


WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"


def _wild_quantized() -> list[str]:
    manifest = WILD / "manifest.json"
    if not manifest.is_file():
        return []
    entries = json.loads(manifest.read_text())
    return sorted(name for name, e in entries.items() if isinstance(e, dict) and e.get("producer") == "onnxruntime.quantization.quantize_dynamic"
                  and any(k.endswith("DynamicQuantizeLSTM") for k in e.get("recurrence_carriers", [])))


@pytest.mark.parametrize("name", _wild_quantized() or [pytest.param("none", marks=pytest.mark.skip(reason="no quantized fixture in tests/fixtures/wild"))])
def test_the_wild_quantized_fixture(name: str, tmp_path, capsys) -> None:
    """A file onnxruntime's quantizer made from a tf2onnx export: inspect lists its quantization;
    its weights read dequantized lie within half a scale of the float file it was quantized
    from; ONNX Runtime on it gives the outputs recorded beside it; verify passes it or, where
    its full 8-bit weights meet a kernel that saturates, fails saying why; and the same float
    file quantized with reduce_range passes."""
    from rnnx.engines.ort_int8 import int8_pair_sums_saturate
    from rnnx.formats.onnx_quantized import full_range
    from rnnx.verify import verify

    path = WILD / name
    entry = json.loads((WILD / "manifest.json").read_text())[name]
    assert cli_main(["inspect", str(path), "--json"]) == 0
    nodes = [n for n in json.loads(capsys.readouterr().out)["nodes"] if n.get("quantization")]
    assert nodes and all(n["quantization"]["op"] == "com.microsoft.DynamicQuantizeLSTM" for n in nodes)
    weights = rnnx.load(path, select=nodes[0]["stack"])
    assert weights.spec.cell == "lstm" and weights.spec.input_size == entry["input_size"]
    source = rnnx.load(WILD / entry["quantized_from"])
    half_step = max(max(w["scale"]) for w in nodes[0]["quantization"]["weights"]) / 2
    assert source.spec == weights.spec
    assert max(float(np.abs(weights.tensors[k] - source.tensors[k]).max()) for k in source.tensors if ".W." in k or ".R." in k) <= half_step * 1.001

    saturating = full_range(main_graph_quantizations(onnx.load(str(path)))) and int8_pair_sums_saturate() is True
    recorded = np.load(WILD / entry["outputs"])
    runner = OnnxRuntimeRunner(path)
    for key in [k for k in recorded.files if k.startswith("x_")]:
        got = runner({entry["input_name"]: recorded[key]})[entry["output_name"]]
        if not saturating:  # held to the quantization bound around Keras's float outputs, not to the recording machine's bits
            bound = error_bound(main_graph_quantizations(onnx.load(str(path))), source, {"X": recorded[key].transpose(1, 0, 2)}, True)
            assert float(np.abs(got - recorded["y_producer_float_" + key[2:]]).max()) <= bound

    report = verify(path, path, backends=("ort", "reference"))
    assert report.passed or saturating, str(report)
    if saturating:
        assert any("saturation" in n for n in report.notes)
    seven_bit = tmp_path / "reduce_range.onnx"
    _quantize(WILD / entry["quantized_from"], seven_bit, per_channel=False, reduce_range=True)
    assert verify(seven_bit, seven_bit, backends=("ort", "reference")).passed
