"""A tensor as a sum of constant linear maps of other tensors plus constant biases, as
exporters write a cell's gate pre-activations: ``Gemm(t, W, b)`` (alpha = beta = 1,
transA = 0), ``MatMul(t, W)`` and ``Add`` of such sums; a product over ``Concat(x, h)``
along the last axis counts as one map per part (TensorFlow-style cells)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.graphs.index import GraphIndex, all_graphs

_MAX_DEPTH = 4  # Adds nested deeper than this are not a cell's gate sum


@dataclass(frozen=True)
class Linear:
    """``W @ input``, W rows by input columns. ``origin`` identifies W without its values
    (the constant's digest and how W was cut from it): equal origins mean equal W."""

    input: str
    W: np.ndarray
    origin: tuple[Any, ...]


@dataclass
class LinearSum:
    """The terms of the sum, its constant biases (with their digests) and the nodes that compute it."""

    linear: list[Linear] = field(default_factory=list)
    biases: list[np.ndarray] = field(default_factory=list)
    bias_origins: list[bytes] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)

    def __iadd__(self, other: LinearSum) -> LinearSum:
        self.linear += other.linear
        self.biases += other.biases
        self.bias_origins += other.bias_origins
        self.nodes += other.nodes
        return self

    def bias(self, width: int) -> np.ndarray:
        """The biases added up in float64 (zeros when there are none)."""
        return np.sum([np.asarray(b, dtype=np.float64) for b in self.biases], axis=0) if self.biases else np.zeros(width)

    @property
    def origin(self) -> tuple[Any, ...]:
        """Identifies every weight of the sum, in an order that does not depend on how it was written."""
        return (tuple(t.origin for t in self.linear), tuple(sorted(self.bias_origins)))


def linear_sum(g: GraphIndex, name: str, depth: int = 0) -> LinearSum | None:
    """``name`` as a :class:`LinearSum`, or None if it is computed otherwise."""
    if name in g.constants:
        return LinearSum(biases=[g.constants[name]], bias_origins=[g.digest(name)])
    node = g.producer.get(name)
    if node is None or depth > _MAX_DEPTH:
        return None
    if node.op_type == "Add":
        left, right = linear_sum(g, node.input[0], depth + 1), linear_sum(g, node.input[1], depth + 1)
        if left is None or right is None:
            return None
        left += right
        left.nodes.append(node)
        return left
    if node.op_type == "Gemm":
        if g.attr(node, "alpha", 1.0) != 1.0 or g.attr(node, "beta", 1.0) != 1.0 or g.attr(node, "transA", 0):
            return None
        if node.input[1] not in g.constants:
            return None
        trans_b = bool(g.attr(node, "transB", 0))
        W = g.constants[node.input[1]]
        found = _products(g, node.input[0], W if trans_b else W.T, (g.digest(node.input[1]), trans_b))
        found.nodes.append(node)
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in g.constants:
                return None
            found.biases.append(g.constants[node.input[2]])
            found.bias_origins.append(g.digest(node.input[2]))
        return found
    if node.op_type == "MatMul" and node.input[1] in g.constants:
        found = _products(g, node.input[0], g.constants[node.input[1]].T, (g.digest(node.input[1]), False))
        found.nodes.append(node)
        return found
    return None


def _products(g: GraphIndex, name: str, W: np.ndarray, origin: tuple[Any, ...]) -> LinearSum:
    """``W @ name``; over Concat(x, h), one term per part, using the parts' sizes from shape inference."""
    concat = g.prod(name, "Concat")
    if concat is None or g.attr(concat, "axis") not in (1, -1):
        return LinearSum(linear=[Linear(name, W, origin)])
    sizes = [g.last_dim.get(i) for i in concat.input]
    if None in sizes or sum(sizes) != W.shape[1]:  # type: ignore[arg-type]
        return LinearSum(linear=[Linear(name, W, origin)])
    bounds = np.cumsum([0, *sizes])
    terms = [Linear(i, W[:, a:b], (*origin, int(a), int(b))) for i, a, b in zip(concat.input, bounds[:-1], bounds[1:])]
    return LinearSum(linear=terms, nodes=[concat])


def products_over_concat(model: Any) -> bool:
    """Whether some graph of ``model`` multiplies a Concat's result (a TensorFlow-style cell):
    only then do the passes need the parts' sizes, which shape inference records."""
    for graph in all_graphs(model.graph):
        concats = {o for n in graph.node if n.op_type == "Concat" for o in n.output}
        if concats and any(n.op_type in ("MatMul", "Gemm") and n.input and n.input[0] in concats for n in graph.node):
            return True
    return False
