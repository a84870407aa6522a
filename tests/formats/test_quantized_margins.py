"""The quantized LSTM's tolerance (rnnx.formats.onnx_quantized.error_bound) measured over a grid
of real files: torch LSTMs (1 and 2 layers, bidirectional or not) exported by torch.onnx,
quantized by onnxruntime.quantization.quantize_dynamic (reduce_range, per tensor and per
channel), run by ONNX Runtime at several lengths up to 200 and batches 1 to 8. Real rounding
must pass with margin, against the dequantized weights and against the float ones; mistakes
planted in the weights the float64 reference runs must fail: every bias zeroed, a gate pair
swapped, W scaled as a 1.5x scale would, and (in nearly every case) one gate's W 25% off."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import parity
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats.onnx_quantized import error_bound, error_bounds, main_graph_quantizations

torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")

MODELS = {  # name -> (input, hidden, layers, bidirectional, per_channel)
    "tensor": (5, 7, 1, False, False),
    "channel_bi": (16, 32, 1, True, True),
    "tensor_2l": (8, 24, 2, False, False),
    "channel_bi_2l": (6, 12, 2, True, True),
}
SHAPES = [(1, 1), (17, 1), (64, 8), (200, 3)]  # (seq_len, batch)


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


def _made(name: str, folder: Path) -> tuple[rnnx.RNNWeights, rnnx.RNNWeights, Path]:
    """(the float weights, the file's dequantized ones, the quantized file) for one model."""
    inp, hidden, layers, bidi, per_channel = MODELS[name]
    torch.manual_seed(_seed(name))
    module = torch.nn.LSTM(inp, hidden, num_layers=layers, bidirectional=bidi).eval()
    x = torch.zeros(3, 2, inp)
    h = torch.zeros(layers * (2 if bidi else 1), 2, hidden)
    float_path, quant_path = folder / f"{name}.onnx", folder / f"{name}_int8.onnx"
    torch.onnx.export(module, (x, (h, h.clone())), str(float_path), input_names=["X", "h0", "c0"], output_names=["Y", "h_n", "c_n"],
                      dynamic_axes={"X": {0: "seq", 1: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"}}, opset_version=17, dynamo=False)
    logging.getLogger().setLevel(logging.ERROR)
    quantization.quantize_dynamic(float_path, quant_path, per_channel=per_channel, reduce_range=True)
    return rnnx.load(float_path), rnnx.load(quant_path), quant_path


def _planted(weights: rnnx.RNNWeights) -> dict[str, dict[str, np.ndarray]]:
    t = weights.tensors
    planted = {"biases zeroed": {k: (np.zeros_like(v) if ".bW." in k or ".bR." in k else v) for k, v in t.items()},
               "W 1.5x": {k: (v * 1.5 if k.startswith("l0.forward.W.") else v) for k, v in t.items()}}
    for a, b in (("g", "o"), ("i", "f")):
        swapped = dict(t)
        for kind in ("W", "R"):
            swapped[f"l0.forward.{kind}.{a}"], swapped[f"l0.forward.{kind}.{b}"] = t[f"l0.forward.{kind}.{b}"], t[f"l0.forward.{kind}.{a}"]
        planted[f"{a},{b} swapped"] = swapped
    for gate in "ifgo":
        planted[f"W.{gate} 25%"] = {k: (v * 1.25 if k == f"l0.forward.W.{gate}" else v) for k, v in t.items()}
    return planted


def _ratio(got: dict[str, np.ndarray], want: dict[str, np.ndarray], bound: float) -> float:
    return max(float(np.abs(got[k] - want[k]).max()) for k in want) / bound


@pytest.fixture(scope="module")
def ratios(tmp_path_factory) -> dict[str, list[float]]:
    """Largest error over the bound, by what the reference ran, over every model and shape."""
    folder = tmp_path_factory.mktemp("margins")
    found: dict[str, list[float]] = {}
    for name in MODELS:
        source, own, path = _made(name, folder)
        layers = main_graph_quantizations(onnx.load(str(path)))
        runner = OnnxRuntimeRunner(path)
        planted = _planted(own)
        for T, B in SHAPES:
            inputs = parity.random_inputs(own, T, B, seed=_seed(f"{name} {T},{B}"))
            got = runner(inputs)
            bound = error_bound(layers, own, inputs, from_float=False)
            found.setdefault("real, dequantized weights", []).append(_ratio(got, parity.reference_outputs(own, inputs), bound))
            found.setdefault("real, float weights", []).append(
                _ratio(got, parity.reference_outputs(source, inputs), error_bound(layers, own, inputs, from_float=True)))
            for label, tensors in planted.items():
                key = "one gate's W 25%" if label.startswith("W.") else label
                found.setdefault(key, []).append(_ratio(got, parity.reference_outputs(rnnx.RNNWeights(own.spec, tensors), inputs), bound))
    return found


@pytest.mark.parametrize("basis", ["real, dequantized weights", "real, float weights"])
def test_real_rounding_passes_with_margin(ratios, basis: str) -> None:
    """Measured at 0.67 of the bound at worst over a larger grid (the bound's docstring); and
    the bound is not loose either: the real error reaches a fifth of it somewhere."""
    worst = max(ratios[basis])
    assert worst <= 0.8, f"{basis}: error up to {worst:.2f} of the bound"
    assert worst > 0.2, f"{basis}: error at most {worst:.2f} of the bound: the bound is loose"


@pytest.mark.parametrize("mistake", ["biases zeroed", "W 1.5x", "g,o swapped", "i,f swapped"])
def test_planted_mistakes_fail_everywhere(ratios, mistake: str) -> None:
    least = min(ratios[mistake])
    assert least > 2, f"{mistake}: error down to {least:.2f} of the bound"


def test_one_gate_25_percent_off_fails_nearly_everywhere(ratios) -> None:
    """Not everywhere: at T = 1 on a 5-input model one gate's W 25% off moves the outputs about
    as much as the int8 rounding does (the bound's docstring gives the rates)."""
    caught = [r > 1 for r in ratios["one gate's W 25%"]]
    assert np.mean(caught) >= 0.9, f"caught in {np.mean(caught):.0%} of {len(caught)} cases"


def test_each_output_has_its_own_bound(tmp_path) -> None:
    """The cell state's rounding noise is the largest: Y's own bound is tighter, still above Y's
    real error, and error_bound is the largest of the three."""
    _, own, path = _made("channel_bi_2l", tmp_path)
    layers = main_graph_quantizations(onnx.load(str(path)))
    inputs = parity.random_inputs(own, 64, 8, seed=_seed("own bounds"))
    bounds = error_bounds(layers, own, inputs, from_float=False)
    assert set(bounds) == {"Y", "h_n", "c_n"} and max(bounds.values()) == error_bound(layers, own, inputs, False)
    assert bounds["Y"] < bounds["c_n"]
    got, want = OnnxRuntimeRunner(path)(inputs), parity.reference_outputs(own, inputs)
    for name, bound in bounds.items():
        assert float(np.abs(got[name] - want[name]).max()) <= bound
