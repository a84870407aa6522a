"""jax.experimental.rnn's flat LSTM weight vector: what it can hold, pack and unpack (pure numpy).

jax's cuDNN-backed LSTM hands this vector to cuDNN unchanged, so its layout is cuDNN's
weight space for a double-bias LSTM without projection, and it is read from cuDNN's
offset table (:mod:`rnnx.layouts.cudnn`) rather than written again: for every
pseudo-layer (layer-major, forward before reverse) ``W_ih`` (4*hidden, in) then ``W_hh``
(4*hidden, hidden), gates stacked in cuDNN's linLayerID order (i, f, g, o); after all of
them, for every pseudo-layer ``b_ih`` then ``b_hh`` (4*hidden,). jax's own
``unpack_lstm_weights`` and ``lstm_ref`` hold it in tests/formats/test_jax.py.
"""

from __future__ import annotations

import numpy as np

from rnnx.errors import RNNXError, refuse_spec
from rnnx.layouts import cudnn
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights


def refusals(spec: RNNSpec) -> list[str]:
    """Why jax.experimental.rnn cannot hold ``spec`` (empty when it can)."""
    if spec.cell != "lstm":
        return [f"jax.experimental.rnn has only LSTMs, found {spec.cell}"]
    cannot = [
        (not spec.bias, "no_bias (jax always has both biases)"),
        (spec.proj_size > 0, "a projection"),
        (spec.peepholes, "peepholes"),
        (spec.direction == "reverse", "a reverse-only layer"),
        (not spec.uses_default_activations, f"{spec.activation_text} (it hands cuDNN's fixed sigmoid/tanh LSTM its weights)"),
    ]
    return [f"jax.experimental.rnn cannot express {what}" for bad, what in cannot if bad]


def check_expressible(spec: RNNSpec) -> None:
    refuse_spec(spec, refusals(spec))


def vector_size(spec: RNNSpec) -> int:
    """How many elements the vector of ``spec`` holds (jax's ``get_num_params_in_lstm``)."""
    check_expressible(spec)
    return cudnn.blob_size(spec)


def to_native(weights: RNNWeights) -> np.ndarray:
    """The flat vector, in the weights' dtype."""
    check_expressible(weights.spec)
    return cudnn.to_native(weights)


def from_native(vector: np.ndarray, spec: RNNSpec | None) -> RNNWeights:
    """Canonical weights from the flat vector; its tensors are views into ``vector``."""
    if spec is None:
        raise RNNXError("jax weight vector: the vector does not describe itself; pass its spec (spec=SPEC)")
    vector = np.asarray(vector).reshape(-1)
    expected = vector_size(spec)
    if vector.size != expected:
        raise RNNXError(f"jax weight vector: expected {expected} elements for spec {spec}, found {vector.size}; check spec=")
    return cudnn.from_native(vector, spec)
