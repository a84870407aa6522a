"""The float64 reference as a runner, with the same interface as the others."""

from __future__ import annotations

import numpy as np

from rnnx.engines.runner import stack_input_names, stack_output_names
from rnnx.parity import reference_outputs
from rnnx.weights import RNNWeights


class ReferenceRunner:
    """:func:`rnnx.reference.forward` on named inputs; states not fed start at zeros there."""

    device = "cpu"
    precision = "fp64"

    def __init__(self, weights: RNNWeights, batch_first: bool = False) -> None:
        self.weights, self.batch_first = weights, batch_first
        self.input_names, self.output_names = stack_input_names(weights.spec), stack_output_names(weights.spec)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return reference_outputs(self.weights, inputs, batch_first=self.batch_first)
