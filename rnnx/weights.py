"""The canonical weights: :class:`RNNWeights`, every tensor under a name, never a position.

Each (layer, direction) holds, per gate ``g`` of :data:`rnnx.spec.GATES`:

==================  ====================  =========================================
name                shape                 meaning
==================  ====================  =========================================
``l0.forward.W.g``  (hidden, layer_in)    input matrix, applied as ``W @ x``
``l0.forward.R.g``  (hidden, output)      recurrent matrix, applied as ``R @ h``
``l0.forward.bW.g`` (hidden,)             input bias (absent with ``no_bias``)
``l0.forward.bR.g`` (hidden,)             recurrent bias (absent with ``no_bias``)
``l0.forward.P.g``  (hidden,)             LSTM peephole, gates i, f, o only
``l0.forward.proj`` (proj, hidden)        LSTM projection, ``h = proj @ (o * tanh c)``
==================  ====================  =========================================

``output`` is ``proj`` when there is a projection and ``hidden`` otherwise. Formats
convert to and from this form and never to each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rnnx.errors import RNNXError, shape_error
from rnnx.spec import PEEPHOLE_GATES, RNNSpec

MATRIX_KINDS = ("W", "R")
BIAS_KINDS = ("bW", "bR")


def tensor_name(layer: int, direction: str, kind: str, gate: str | None = None) -> str:
    """The canonical name of one tensor, e.g. ``tensor_name(1, "reverse", "R", "f")``."""
    return f"l{layer}.{direction}.{kind}" + (f".{gate}" if gate is not None else "")


def expected_shapes(spec: RNNSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor a spec needs, in canonical order, with its shape."""
    shapes: dict[str, tuple[int, ...]] = {}
    hidden, out = spec.hidden_size, spec.output_size
    for layer in range(spec.num_layers):
        layer_in = spec.layer_input_size(layer)
        for direction in spec.directions:
            for gate in spec.gates:
                shapes[tensor_name(layer, direction, "W", gate)] = (hidden, layer_in)
            for gate in spec.gates:
                shapes[tensor_name(layer, direction, "R", gate)] = (hidden, out)
            if spec.bias:
                for kind in BIAS_KINDS:
                    for gate in spec.gates:
                        shapes[tensor_name(layer, direction, kind, gate)] = (hidden,)
            if spec.peepholes:
                for gate in PEEPHOLE_GATES:
                    shapes[tensor_name(layer, direction, "P", gate)] = (hidden,)
            if spec.proj_size:
                shapes[tensor_name(layer, direction, "proj")] = (spec.proj_size, hidden)
    return shapes


@dataclass(frozen=True)
class Gate:
    """One gate of one cell: its matrices and (optional) biases and peephole."""

    name: str
    W: np.ndarray
    R: np.ndarray
    bW: np.ndarray | None
    bR: np.ndarray | None
    P: np.ndarray | None


class RNNWeights:
    """Weights of a recurrent stack in canonical form, validated against their spec.

    All tensors share one floating dtype. Arrays are kept as given (no copy, no cast), so
    a conversion that only moves data is bit-exact.
    """

    def __init__(self, spec: RNNSpec, tensors: Mapping[str, np.ndarray]) -> None:
        self.spec = spec
        self.tensors: dict[str, np.ndarray] = {}
        expected = expected_shapes(spec)
        unknown = sorted(set(tensors) - set(expected))
        if unknown:
            raise RNNXError(
                f"tensor {unknown[0]}: not part of spec {spec} ({len(unknown)} unexpected tensor(s)); "
                "check the spec's bias, peephole and projection options"
            )
        dtype = None
        for name, shape in expected.items():
            if name not in tensors:
                raise RNNXError(f"tensor {name}: expected shape {shape} for spec {spec}, found nothing")
            array = np.asarray(tensors[name])
            if array.shape != shape:
                raise shape_error(name, shape, array.shape, f"spec is {spec}")
            if array.dtype.kind != "f":
                raise RNNXError(f"tensor {name}: expected a floating dtype, found {array.dtype}")
            if dtype is None:
                dtype = array.dtype
            elif array.dtype != dtype:
                raise RNNXError(f"tensor {name}: expected dtype {dtype} like the others, found {array.dtype}")
            self.tensors[name] = array
        self.dtype = np.dtype(dtype)

    # --- access by name --------------------------------------------------------------
    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def direction_name(self, direction: int | str) -> str:
        if isinstance(direction, str):
            if direction not in self.spec.directions:
                raise RNNXError(f"direction: expected one of {self.spec.directions}, found {direction!r}")
            return direction
        return self.spec.directions[direction]

    def get(self, layer: int, direction: int | str, kind: str, gate: str | None = None) -> np.ndarray | None:
        return self.tensors.get(tensor_name(layer, self.direction_name(direction), kind, gate))

    def gate(self, name: str, layer: int = 0, direction: int | str = 0) -> Gate:
        """All tensors of one gate, e.g. ``weights.gate("f", layer=1, direction="reverse")``."""
        if name not in self.spec.gates:
            raise RNNXError(f"gate: expected one of {self.spec.gates} for {self.spec.cell}, found {name!r}")
        d = self.direction_name(direction)
        W, R = self.get(layer, d, "W", name), self.get(layer, d, "R", name)
        assert W is not None and R is not None
        return Gate(name, W, R, self.get(layer, d, "bW", name), self.get(layer, d, "bR", name), self.get(layer, d, "P", name))

    def proj(self, layer: int = 0, direction: int | str = 0) -> np.ndarray | None:
        return self.get(layer, direction, "proj")

    def cells(self) -> Iterator[tuple[int, str]]:
        """(layer, direction) pairs in cuDNN's pseudo-layer order: layer-major, forward first."""
        for layer in range(self.spec.num_layers):
            for direction in self.spec.directions:
                yield layer, direction

    def stacked(self, layer: int, direction: int | str, kind: str, order: Sequence[str]) -> np.ndarray:
        """Gates of one kind concatenated along axis 0 in a format's ``order``."""
        return np.concatenate([self.tensors[tensor_name(layer, self.direction_name(direction), kind, g)] for g in order])

    # --- whole-object helpers --------------------------------------------------------
    def astype(self, dtype: np.dtype | type) -> RNNWeights:
        return RNNWeights(self.spec, {k: v.astype(dtype) for k, v in self.tensors.items()})

    def equal(self, other: RNNWeights) -> bool:
        """Bit-exact equality of spec, names, dtypes and values."""
        return (
            self.spec == other.spec
            and self.tensors.keys() == other.tensors.keys()
            and all(
                self.tensors[k].dtype == other.tensors[k].dtype
                and self.tensors[k].tobytes() == np.ascontiguousarray(other.tensors[k]).tobytes()
                for k in self.tensors
            )
        )

    def num_parameters(self) -> int:
        return sum(int(v.size) for v in self.tensors.values())

    def nonfinite(self) -> list[str]:
        """Names of tensors holding NaN or Inf."""
        return [k for k, v in self.tensors.items() if not np.all(np.isfinite(v))]

    def __repr__(self) -> str:
        return f"RNNWeights({self.spec}, {len(self.tensors)} tensors, {self.num_parameters()} parameters, {self.dtype})"

    @classmethod
    def random(
        cls, spec: RNNSpec, seed: int = 0, dtype: np.dtype | type = np.float32, scale: float | None = None
    ) -> RNNWeights:
        """Uniform weights in ``[-scale, scale]`` (PyTorch's ``1/sqrt(hidden)`` by default)."""
        rng = np.random.default_rng(seed)
        bound = scale if scale is not None else 1.0 / np.sqrt(spec.hidden_size)
        return cls(
            spec,
            {name: rng.uniform(-bound, bound, size=shape).astype(dtype) for name, shape in expected_shapes(spec).items()},
        )


def split_gates(array: np.ndarray, order: Iterable[str], axis: int = 0) -> dict[str, np.ndarray]:
    """Split a gate-stacked array into equal parts named by a format's ``order``."""
    names = tuple(order)
    if array.shape[axis] % len(names):
        raise RNNXError(
            f"gate-stacked tensor: expected axis {axis} divisible by {len(names)} gates ({', '.join(names)}), "
            f"found shape {array.shape}"
        )
    return dict(zip(names, np.split(array, len(names), axis=axis)))
