"""``jax``: the flat weight vector of ``jax.experimental.rnn`` (LSTM only, double bias).

Its documented layout: for every pseudo-layer (layer-major, forward before reverse)
``W_ih`` (4*hidden, in) then ``W_hh`` (4*hidden, hidden); after all of them, for every
pseudo-layer ``b_ih`` then ``b_hh`` (4*hidden,). Gates stack in :data:`GATE_ORDER`.
jax hands this vector to cuDNN unchanged, so it should equal rnnx's cuDNN blob for the
same weights; a test holds the two formats to that independently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, check_archive, library_write, require_file
from rnnx.formats.registry import Format, register, settle_spec
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights, split_gates, tensor_name

GATE_ORDER = ("i", "f", "g", "o")
# The vector's blocks: matrices of every pseudo-layer, then biases of every pseudo-layer.
MATRIX_BLOCKS = ("W", "R")
BIAS_BLOCKS = ("bW", "bR")
NPZ_KEY = "weights"


def _check_expressible(spec: RNNSpec) -> None:
    if spec.cell != "lstm":
        raise RNNXError(f"spec {spec}: jax.experimental.rnn has only LSTMs, found {spec.cell}")
    problems = [
        (not spec.bias, "no_bias (jax always has both biases)"),
        (spec.proj_size > 0, "a projection"),
        (spec.peepholes, "peepholes"),
        (spec.direction == "reverse", "a reverse-only layer"),
    ]
    for bad, what in problems:
        if bad:
            raise RNNXError(f"spec {spec}: jax.experimental.rnn cannot express {what}")


def _blocks(spec: RNNSpec) -> list[tuple[int, str, str, tuple[int, int] | tuple[int]]]:
    """(layer, direction, kind, stacked shape) in vector order."""
    cells = [(layer, d) for layer in range(spec.num_layers) for d in spec.directions]
    H = spec.hidden_size
    blocks: list[tuple[int, str, str, tuple[int, int] | tuple[int]]] = []
    for layer, d in cells:
        blocks.append((layer, d, "W", (4 * H, spec.layer_input_size(layer))))
        blocks.append((layer, d, "R", (4 * H, H)))
    for layer, d in cells:
        for kind in BIAS_BLOCKS:
            blocks.append((layer, d, kind, (4 * H,)))
    return blocks


def to_native(weights: RNNWeights) -> np.ndarray:
    _check_expressible(weights.spec)
    return np.concatenate([weights.stacked(layer, d, kind, GATE_ORDER).reshape(-1) for layer, d, kind, _ in _blocks(weights.spec)])


def from_native(vector: np.ndarray, spec: RNNSpec | None) -> RNNWeights:
    if spec is None:
        raise RNNXError("jax weight vector: the vector does not describe itself; pass its spec (--spec)")
    _check_expressible(spec)
    vector = np.asarray(vector).reshape(-1)
    blocks = _blocks(spec)
    expected = sum(int(np.prod(shape)) for *_, shape in blocks)
    if vector.size != expected:
        raise RNNXError(f"jax weight vector: expected {expected} elements for spec {spec}, found {vector.size}; check --spec")
    tensors: dict[str, np.ndarray] = {}
    offset = 0
    for layer, d, kind, shape in blocks:
        n = int(np.prod(shape))
        for gate, part in split_gates(vector[offset : offset + n].reshape(shape), GATE_ORDER).items():
            tensors[tensor_name(layer, d, kind, gate)] = part
        offset += n
    return RNNWeights(spec, tensors)


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    path = require_file(path)
    check_archive(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001  only numpy/zipfile parsing runs here: any failure means a damaged file
        raise RNNXError(f"{path}: cannot read as .npz ({exc}); the file is damaged or not numpy's format") from None
    if NPZ_KEY not in arrays:
        raise RNNXError(f"{path}: expected an array named {NPZ_KEY!r} (the flat vector), found {sorted(arrays) or 'none'}")
    spec = settle_spec(path, spec, str(arrays["spec"]) if "spec" in arrays else None)
    return from_native(arrays[NPZ_KEY], spec)


def write(weights: RNNWeights, path: Path) -> None:
    vector = to_native(weights)
    with atomic_output(path) as tmp, library_write(path):
        with open(tmp, "wb") as f:
            np.savez(f, **{NPZ_KEY: vector, "spec": np.array(str(weights.spec))})


register(
    Format(
        name="jax",
        to_native=to_native,
        from_native=from_native,
        read=read,
        write=write,
        extensions=(".npz",),
        description="jax.experimental.rnn's flat LSTM vector (.npz holding 'weights' and 'spec')",
    )
)
