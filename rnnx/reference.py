"""The float64 numpy forward pass over canonical weights: the oracle for every backend.

Conventions follow PyTorch and cuDNN: ``x`` is (T, B, input) (or (B, T, input) with
``batch_first``), ``h0`` is (layers*directions, B, output) and ``c0`` is
(layers*directions, B, hidden), layer-major with forward before reverse. With
``seq_lens`` each sequence b runs over its first ``seq_lens[b]`` steps only (the reverse
direction starts at its own last valid step); outputs past the end are zero and the final
states hold the last valid step, as in cuDNN and ONNX.

A spec's activations, ``clip`` and ``input_forget`` are computed as ONNX Runtime's CPU
kernels compute ONNX's definitions: ``clip`` bounds each gate's pre-activation (peepholes
and biases included) and not the cell state given to h; ``input_forget`` makes an LSTM's
forget gate 1 - i, so the forget weights go unused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rnnx import blas_threads
from rnnx.errors import RNNXError, shape_error
from rnnx.spec import Activation
from rnnx.weights import RNNWeights


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warning for large |x|


# ONNX's recurrent activation functions, as its LSTM/GRU/RNN operator text defines them
# (ThresholdedRelu as ONNX's ThresholdedRelu operator and ONNX Runtime: x > alpha).
_FUNCTIONS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "Relu": lambda x, a, b: np.maximum(x, 0.0),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Sigmoid": lambda x, a, b: _sigmoid(x),
    "Affine": lambda x, a, b: a * x + b,
    "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0.0),
    "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0.0, 1.0),
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0.0))),
    "Softsign": lambda x, a, b: x / (1.0 + np.abs(x)),
    "Softplus": lambda x, a, b: np.logaddexp(0.0, x),
}


def activation_function(activation: Activation) -> Callable[[np.ndarray], np.ndarray]:
    """``activation`` as a float64 function of one array."""
    fn, alpha, beta = _FUNCTIONS[activation.name], activation.alpha or 0.0, activation.beta or 0.0
    return lambda x: fn(x, alpha, beta)


@dataclass(frozen=True)
class ReferenceOutput:
    y: np.ndarray
    h_n: np.ndarray
    c_n: np.ndarray | None


class _Cell:
    """One (layer, direction) cell's weights in float64 (or the dtype it computes in), looked up by gate name."""

    def __init__(self, weights: RNNWeights, layer: int, direction: str, dtype: type[np.floating] = np.float64) -> None:
        spec = weights.spec
        self.spec = spec

        def held(kind: str, gate: str | None = None) -> np.ndarray:
            a = weights.get(layer, direction, kind, gate)
            assert a is not None, kind  # RNNWeights holds every tensor its spec has
            return a

        def f64(a: np.ndarray) -> np.ndarray:
            return np.asarray(a, dtype=dtype)

        self.W = {g: f64(held("W", g)) for g in spec.gates}
        # The recurrent matrices stacked in gate order: one product per step instead of one per
        # gate. Cast straight into the stack, whose rows are each gate's matrix: no second copy.
        self.R_all = np.concatenate([held("R", g) for g in spec.gates], axis=0, dtype=dtype)
        rows = spec.hidden_size
        self.R = {g: self.R_all[k * rows:(k + 1) * rows] for k, g in enumerate(spec.gates)}
        zeros = np.zeros(spec.hidden_size, dtype)
        self.bW = {g: f64(held("bW", g)) if spec.bias else zeros for g in spec.gates}
        self.bR = {g: f64(held("bR", g)) if spec.bias else zeros for g in spec.gates}
        self.P = {g: f64(held("P", g)) for g in ("i", "f", "o")} if spec.peepholes else None
        self.proj = f64(held("proj")) if spec.proj_size else None

        self.bR_all = np.concatenate([self.bR[g] for g in spec.gates])
        # ONNX's per-direction slots: f for gates, g for the candidate, h for the cell output
        self.act = [activation_function(a) for a in spec.activation_functions]
        bound = spec.clip
        self.clip: Callable[[np.ndarray], np.ndarray] = (lambda x: np.clip(x, -bound, bound)) if bound else (lambda x: x)

    def x_parts(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Every step's input product at once, (T, B, hidden) per gate: it does not depend on the state."""
        return {g: x @ self.W[g].T + self.bW[g] for g in self.spec.gates}

    def h_parts(self, h: np.ndarray) -> dict[str, np.ndarray]:
        parts = np.split(h @ self.R_all.T + self.bR_all, len(self.spec.gates), axis=-1)
        return dict(zip(self.spec.gates, parts))

    def step(self, xp: dict[str, np.ndarray], h: np.ndarray, c: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """One step from this step's input products ``xp`` (by gate) and the state."""
        cell, act, clip = self.spec.cell, self.act, self.clip
        hp = self.h_parts(h)
        if cell == "lstm":
            assert c is not None
            pre = {g: xp[g] + hp[g] for g in "ifgo"}
            if self.P is not None:
                pre["i"] = pre["i"] + self.P["i"] * c
                pre["f"] = pre["f"] + self.P["f"] * c
            i, g = act[0](clip(pre["i"])), act[1](clip(pre["g"]))
            f = 1.0 - i if self.spec.input_forget else act[0](clip(pre["f"]))
            c_new = f * c + i * g
            if self.P is not None:
                pre["o"] = pre["o"] + self.P["o"] * c_new
            h_new = act[0](clip(pre["o"])) * act[2](c_new)
            if self.proj is not None:
                h_new = h_new @ self.proj.T
            return h_new, c_new
        if cell == "gru":
            r = act[0](clip(xp["r"] + hp["r"]))
            z = act[0](clip(xp["z"] + hp["z"]))
            if self.spec.reset_after:
                n = act[1](clip(xp["n"] + r * hp["n"]))
            else:  # the reset gate scales the state before its product: that product cannot be shared
                n = act[1](clip(xp["n"] + (r * h) @ self.R["n"].T + self.bR["n"]))
            return (1.0 - z) * n + z * h, None
        return act[0](clip(xp["h"] + hp["h"])), None


def forward(
    weights: RNNWeights,
    x: np.ndarray,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
    seq_lens: np.ndarray | None = None,
    batch_first: bool = False,
    dtype: type[np.floating] = np.float64,
) -> ReferenceOutput:
    """Run the stack in float64 and return ``y``, ``h_n`` and (LSTM only) ``c_n``.

    ``dtype=np.float32`` runs the same arithmetic in float32: an honest float32 computation,
    whose distance from the float64 run is the rounding floor the checks calibrate against
    (:mod:`rnnx.tolerance`)."""
    spec = weights.spec
    x = np.asarray(x, dtype=dtype)
    if x.ndim != 3:
        raise RNNXError(f"input x: expected 3 dimensions (seq, batch, input), found shape {x.shape}")
    if batch_first:
        x = x.transpose(1, 0, 2)
    T, B, _ = x.shape
    if x.shape[2] != spec.input_size:
        raise shape_error("x", (T, B, spec.input_size), x.shape)
    n_states = spec.num_layers * spec.num_directions
    h_shape = (n_states, B, spec.output_size)
    c_shape = (n_states, B, spec.hidden_size)
    h0 = np.zeros(h_shape, dtype) if h0 is None else np.asarray(h0, dtype=dtype)
    if h0.shape != h_shape:
        raise shape_error("h0", h_shape, h0.shape)
    if spec.cell == "lstm":
        c0 = np.zeros(c_shape, dtype) if c0 is None else np.asarray(c0, dtype=dtype)
        if c0.shape != c_shape:
            raise shape_error("c0", c_shape, c0.shape)
    lens = np.full(B, T, dtype=np.int64) if seq_lens is None else np.asarray(seq_lens, dtype=np.int64)
    if lens.shape != (B,) or np.any(lens < 0) or np.any(lens > T):
        raise RNNXError(f"seq_lens: expected {B} lengths between 0 and {T}, found {lens.tolist()}")

    h_n = np.zeros(h_shape, dtype)
    c_n = np.zeros(c_shape, dtype) if spec.cell == "lstm" else None
    layer_in = x
    # BLAS threads (see rnnx.blas_threads): the one large whole-sequence product may use the
    # cores that are free; the small per-step products run on one thread, because handing them
    # to a pool costs more than they take and collapses when other processes hold the cores.
    with blas_threads.reference_threads() as threads:
        for layer in range(spec.num_layers):
            outs = []
            for d, direction in enumerate(spec.directions):
                k = layer * spec.num_directions + d
                cell = _Cell(weights, layer, direction, dtype)
                h = h0[k].copy()
                c = c0[k].copy() if c0 is not None else None
                y = np.zeros((T, B, spec.output_size), dtype)
                steps = range(T - 1, -1, -1) if direction == "reverse" else range(T)
                threads.whole_sequence()
                xp = cell.x_parts(layer_in)
                threads.per_step()
                for t in steps:
                    active = (t < lens)[:, None]
                    h_new, c_new = cell.step({g: part[t] for g, part in xp.items()}, h, c)
                    h = np.where(active, h_new, h)
                    if c is not None:
                        c = np.where(active, c_new, c)
                    y[t] = np.where(active, h_new, dtype(0))
                h_n[k] = h
                if c_n is not None:
                    c_n[k] = c
                outs.append(y)
                del cell, xp  # one cell's float64 weights at a time, however large the stack
            layer_in = np.concatenate(outs, axis=2)
    y = layer_in.transpose(1, 0, 2) if batch_first else layer_in
    return ReferenceOutput(y=y, h_n=h_n, c_n=c_n)
