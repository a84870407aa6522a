"""A quantized file checked against float weights is held to the rounding those weights justify:
its own scales may tighten the bound, never loosen it (issue 49: a file at 100x the scale its
weights need passed, allowed errors as large as its outputs)."""

from __future__ import annotations

import numpy as np

from rnnx import RNNSpec, RNNWeights
from rnnx.formats.onnx_quantized import Quantization, QuantizedWeight
from rnnx.layouts.onnx import to_native
from rnnx.verify.quantized import COARSEST_LEVELS, capped_scales

WEIGHTS = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=2)


def _layer(times: float, per_channel: bool = False) -> Quantization:
    node = to_native(WEIGHTS)[0]
    weights = []
    for name in ("W", "R"):
        peak = np.abs(np.asarray(node[name], np.float64))
        scale = (peak.max(axis=2) if per_channel else peak.max(axis=(1, 2))) / 64 * times  # reduce_range's scale, times ``times``
        weights.append(QuantizedWeight(name, name, "int8", "per-channel" if per_channel else "per-tensor", scale.tolist(), np.zeros(scale.shape, int).tolist()))
    return Quantization("com.microsoft.DynamicQuantizeLSTM", weights)


def test_an_honest_scale_is_kept_as_the_file_has_it() -> None:
    for per_channel in (False, True):
        layer = _layer(1.0, per_channel)
        capped, note = capped_scales([layer], WEIGHTS)
        assert note == "" and [w.scale for w in capped[0].weights] == [w.scale for w in layer.weights]


def test_a_scale_100x_too_coarse_is_capped_at_what_the_float_weights_need_and_said() -> None:
    for per_channel in (False, True):
        capped, note = capped_scales([_layer(100.0, per_channel)], WEIGHTS)
        node = to_native(WEIGHTS)[0]
        for w in capped[0].weights:
            peak = np.abs(np.asarray(node[w.name], np.float64))
            need = (peak.max(axis=2) if per_channel else peak.max(axis=(1, 2))) / COARSEST_LEVELS
            assert np.allclose(w.scale, need)
        assert "layer 0 W up to 98.4x" in note and "layer 0 R" in note
