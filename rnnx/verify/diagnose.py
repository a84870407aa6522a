"""Name the layout bug behind a mismatch: rerun the reference on deliberately wrong copies of
the weights (gates permuted, matrices transposed, biases swapped or dropped) and see which
one reproduces what the backend computed."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rnnx.parity import reference_outputs
from rnnx.tolerance import per_step_max
from rnnx.weights import RNNWeights


@dataclass(frozen=True)
class Hypothesis:
    name: str
    error: float  # max abs error of the reference on the altered weights against the backend
    per_step: list[float]


def _permuted(weights: RNNWeights, perm: tuple[str, ...]) -> RNNWeights:
    """Weights as a converter that read gate k from where gate perm[k] lives would produce."""
    gates = weights.spec.gates
    src = dict(zip(gates, perm))
    tensors = {}
    for name, array in weights.tensors.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[3] in src and parts[2] != "P":
            tensors[name] = weights.tensors[".".join(parts[:3] + [src[parts[3]]])]
        else:
            tensors[name] = array
    return RNNWeights(weights.spec, tensors)


def _transposed(weights: RNNWeights) -> RNNWeights | None:
    if weights.spec.input_size != weights.spec.hidden_size or weights.spec.proj_size:
        return None  # a transpose only fits square matrices
    return RNNWeights(weights.spec, {k: (v.T if v.ndim == 2 else v) for k, v in weights.tensors.items()})


def _biases(weights: RNNWeights, how: str) -> RNNWeights | None:
    if not weights.spec.bias:
        return None
    out = {}
    for k, v in weights.tensors.items():
        if ".bW." in k:
            out[k] = weights.tensors[k.replace(".bW.", ".bR.")] if how == "swapped" else np.zeros_like(v)
        elif ".bR." in k:
            out[k] = weights.tensors[k.replace(".bR.", ".bW.")] if how == "swapped" else np.zeros_like(v)
        else:
            out[k] = v
    return RNNWeights(weights.spec, out)


def _reversed_directions(weights: RNNWeights) -> RNNWeights | None:
    if weights.spec.direction != "bidirectional":
        return None
    swap = {"forward": "reverse", "reverse": "forward"}
    out = {}
    for layer, d in weights.cells():
        for name in weights.tensors:
            if name.startswith(f"l{layer}.{d}."):
                out[name.replace(f".{d}.", f".{swap[d]}.", 1)] = weights.tensors[name]
    return RNNWeights(weights.spec, out)


def hypotheses(weights: RNNWeights) -> Iterator[tuple[str, Callable[[], RNNWeights | None]]]:
    gates = weights.spec.gates
    for perm in itertools.permutations(gates):
        if perm != gates:
            yield f"gates read in order {','.join(perm)} instead of {','.join(gates)}", lambda p=perm: _permuted(weights, p)
    yield "matrices transposed", lambda: _transposed(weights)
    yield "input and recurrent biases swapped", lambda: _biases(weights, "swapped")
    yield "biases dropped", lambda: _biases(weights, "dropped")
    yield "forward and reverse directions swapped", lambda: _reversed_directions(weights)


def per_step_error(got: np.ndarray, want: np.ndarray) -> list[float]:
    """Max abs error at each time step of a (seq, batch, features) output."""
    return per_step_max(got, want, time_axis=0)


def diagnose(weights: RNNWeights, inputs: dict[str, np.ndarray], backend_y: np.ndarray, atol: float) -> tuple[list[Hypothesis], list[str]]:
    """Every hypothesis with its error against the backend's Y; and the names of those that match."""
    results = []
    for name, make in hypotheses(weights):
        altered = make()
        if altered is None:
            continue
        y = reference_outputs(altered, inputs)["Y"]
        err = per_step_error(backend_y, y)
        results.append(Hypothesis(name, max(err, default=0.0), err))
    results.sort(key=lambda h: h.error)
    matches = [h.name for h in results if h.error <= atol]
    return results, matches
