"""The tolerance of a quantized model under verify: derived, per case, from its scales and the
case's inputs (:func:`rnnx.formats.onnx_quantized.error_bound`: a few standard deviations of the
rounding noise they predict), not from a dtype."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.check import Rule
from rnnx.engines.ort_int8 import int8_pair_sums_saturate
from rnnx.errors import RNNXError
from rnnx.formats import files
from rnnx.formats.onnx_quantized import SIGMAS, Quantization, error_bounds, full_range, main_graph_quantizations
from rnnx.layouts.onnx import to_native
from rnnx.tolerance import Tolerance
from rnnx.weights import RNNWeights


@dataclass
class QuantizedModel:
    """A model file's quantized recurrences, the weights they hold, and whether the reference
    runs those weights or the float ones they were rounded from."""

    layers: list[Quantization]
    weights: RNNWeights  # the model's own, dequantized
    from_float: bool
    notes: list[str] = field(default_factory=list)
    _last: tuple[dict[str, np.ndarray], dict[str, float]] | None = field(default=None, repr=False)

    def rule(self, inputs: dict[str, np.ndarray], output: str | None = None) -> Rule:
        """The rule :func:`rnnx.check.judge` holds ONNX Runtime's ``output`` to on this case: every
        element within the bound, absolutely (rtol 0: a relative error says nothing here), never
        calibrated (the bound is the rounding the scales predict); ``output``'s own bound where it
        is named (Y, h_n or c_n: c_n carries the most noise), else the largest of the three."""
        if self._last is None or self._last[0] is not inputs:  # one noise propagation per case, asked for each output
            self._last = (inputs, error_bounds(self.layers, self.weights, inputs, self.from_float))
        bounds = self._last[1]
        return Rule(Tolerance(bounds[output] if output in bounds else max(bounds.values()), 0.0))


def quantized_model(model: Any, path: Path, source_weights: RNNWeights) -> QuantizedModel | None:
    """``model``'s quantization where its recurrences are quantized (else None)."""
    layers = main_graph_quantizations(model)
    if not layers:
        return None
    if len(layers) != source_weights.spec.num_layers:
        raise RNNXError(f"{path}: {len(layers)} quantized recurrent nodes, but the source is a {source_weights.spec.num_layers}-layer stack; "
                        "verify checks one quantized stack against its weights")
    own = files.load(path, format="onnx")
    if own.spec != source_weights.spec:
        raise RNNXError(f"{path}: its quantized stack is {own.spec}, the source is {source_weights.spec}; is it the model made from these weights?")
    exact = own.equal(source_weights.astype(own.dtype)) if source_weights.dtype != own.dtype else own.equal(source_weights)
    found = QuantizedModel(layers, own, from_float=not exact)
    if not exact:  # the weights' own rounding enters the bound: at the scale the float weights need, not the file's
        found.layers, note = capped_scales(layers, source_weights)
        found.notes += [note] if note else []
    basis = "the model's own dequantized weights" if exact else "float weights, rounded to the model's scales"
    found.notes.append(f"{path.name} holds {layers[0].op} ({', '.join(w.summary() for w in layers[0].weights)}); ONNX Runtime's rows are held "
                       f"to {SIGMAS:g} standard deviations of the rounding noise the scales and each case's inputs predict, "
                       f"against the reference on {basis} (rnnx.formats.onnx_quantized.error_bound)")
    found.notes += [n for n in [saturation_note(layers)] if n]
    return found


#: the fewest levels each side of zero an 8-bit weight is quantized to: 7 bits (quantize_dynamic's reduce_range:
#: |q - zero_point| up to 64, or an asymmetric uint8 range over 127 levels), with a little slack for float32 scales
COARSEST_LEVELS = 63


def capped_scales(layers: list[Quantization], source: RNNWeights) -> tuple[list[Quantization], str]:
    """``layers`` with each weight's scale at most the one its float weights in ``source`` need
    (their largest magnitude, over the rows the scale covers, in :data:`COARSEST_LEVELS` steps);
    and a note naming the weights whose file scale was larger ("" where none was).

    The bound on a file checked against the float weights includes the weights' rounding, which
    grows with the scale; taken from the file's own scales, a file quantized at 100x the scale
    its weights need (three levels, -1, 0 and 1) was allowed errors as large as its outputs and
    passed. Every honest quantizer of 7 bits or more picks a scale under the cap, so its bound is
    unchanged; a coarser file is held to the rounding its weights justify, and fails by its error."""
    nodes = to_native(source)
    capped, over = [], []
    for k, (layer, node) in enumerate(zip(layers, nodes)):
        weights = []
        for w in layer.weights:
            peak = np.abs(np.asarray(node[w.name], np.float64))  # [dirs, 4*hidden, columns], the rows the scales index
            scale = np.asarray(w.scale, np.float64)
            need = (peak.max(axis=(1, 2)) if scale.ndim == 1 else peak.max(axis=2)) / COARSEST_LEVELS
            coarse = (scale > need) & (need > 0)  # an all-zero row stores zeros at any scale (ONNX Runtime writes 1.0 there)
            if coarse.any():
                over.append(f"layer {k} {w.name} up to {float(np.max(scale[coarse] / need[coarse])):.3g}x")
            weights.append(replace(w, scale=np.minimum(scale, need).tolist()))
        capped.append(replace(layer, weights=weights))
    if not over:
        return capped, ""
    return capped, (f"its weight scales are larger than its float weights need ({'; '.join(over)} the scale of max |w| / {COARSEST_LEVELS}): "
                    "ONNX Runtime's rows are held to the rounding the float weights justify, not to the file's coarser scales")


def saturation_note(layers: list[Quantization]) -> str:
    """Why a full-range int8 model may fail here ("" where it cannot be the reason)."""
    if not full_range(layers) or int8_pair_sums_saturate() is not True:
        return ""
    return ("its int8 weights use the full 8-bit range (quantize_dynamic's default reduce_range=False), and this machine's ONNX Runtime "
            "sums pairs of u8 x s8 products in int16 with saturation (measured by rnnx.engines.ort_int8: an x86 CPU without VNNI), "
            "so its outputs can be far from the quantized arithmetic; quantize with reduce_range=True for such CPUs")
