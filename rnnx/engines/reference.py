"""The float64 reference as a runner, with the same interface as the others."""

from __future__ import annotations

import numpy as np

from rnnx.parity import reference_outputs
from rnnx.weights import RNNWeights


class ReferenceRunner:
    device = "cpu"
    precision = "fp64"

    def __init__(self, weights: RNNWeights, batch_first: bool = False) -> None:
        self.weights, self.batch_first = weights, batch_first

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return reference_outputs(self.weights, inputs, batch_first=self.batch_first)
