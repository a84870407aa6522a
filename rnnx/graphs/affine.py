"""A tensor as an affine map of other tensors, ``sum_k W_k @ t_k + b``, however an exporter cut
its weights: products with constants (``MatMul``, ``Gemm``), sums, and ``Split`` / ``Slice``
parts along the last axis of such a sum (a gate's rows); constants may themselves be cut from
other constants (tf2onnx slices a recurrent kernel inside the loop), which are folded here.

Unlike :mod:`rnnx.graphs.linear_terms`, which keeps each term's origin so that unrolled steps
can share weights, this works on values (float64) and so serves matchers of cells written in
any algebraic form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.graphs.index import GraphIndex

_MAX_DEPTH = 8
_FOLDABLE = ("Identity", "Cast", "Squeeze", "Unsqueeze", "Split", "Slice", "Transpose")


@dataclass
class Affine:
    """``sum(W @ t for t, W in terms.items()) + bias``; W is (out, in), bias (out,) or 0."""

    terms: dict[str, np.ndarray] = field(default_factory=dict)
    bias: Any = 0.0
    nodes: list[Any] = field(default_factory=list)
    dtype: Any = None  # the weights' own dtype, where a product was read

    @property
    def width(self) -> int | None:
        for W in self.terms.values():
            return int(W.shape[0])
        b = np.asarray(self.bias)
        return int(b.shape[-1]) if b.ndim else None

    def rows(self, a: int, b: int) -> Affine:
        bias = np.asarray(self.bias)
        return Affine({k: W[a:b] for k, W in self.terms.items()}, bias[..., a:b] if bias.ndim else bias, list(self.nodes))

    def bias_vector(self, width: int) -> np.ndarray | None:
        """The bias as a (width,) vector; None when it varies across rows of the batch."""
        b = np.asarray(self.bias, dtype=np.float64)
        if b.ndim == 0:
            return np.full(width, float(b))
        if b.ndim > 1 and any(d != 1 for d in b.shape[:-1]):
            return None
        return b.reshape(-1) if b.shape[-1] == width else None


def const_value(g: GraphIndex, name: str, depth: int = 0) -> np.ndarray | None:
    """``name``'s value when it is a constant, or shape ops applied to constants."""
    if name in g.constants:
        return g.constants[name]
    node = g.producer.get(name)
    if node is None or node.op_type not in _FOLDABLE or depth > _MAX_DEPTH:
        return None
    data = const_value(g, node.input[0], depth + 1)
    if data is None:
        return None
    args = [g.constants.get(i) if i else None for i in node.input[1:]]
    if any(i and a is None for i, a in zip(node.input[1:], args)):
        return None
    op = node.op_type
    if op in ("Identity", "Cast"):
        return data
    if op in ("Squeeze", "Unsqueeze"):
        axes = g.axes(node)
        if op == "Squeeze":
            return np.squeeze(data, axis=tuple(axes)) if axes is not None else np.squeeze(data)
        for a in sorted(axes or []):
            data = np.expand_dims(data, a)
        return data
    if op == "Transpose":
        return np.transpose(data, g.attr(node, "perm"))
    if op == "Split":
        axis = g.attr(node, "axis", 0)
        sizes = args[0] if args and args[0] is not None else g.attr(node, "split")
        cuts = np.cumsum(sizes)[:-1] if sizes is not None else len(node.output)
        return np.split(data, cuts, axis=axis)[list(node.output).index(name)]
    if len(args) < 2 or args[0] is None or args[1] is None:
        return None  # a Slice without its starts or ends (ONNX requires both): nothing to fold, not a crash
    starts, ends = np.atleast_1d(args[0]), np.atleast_1d(args[1])
    sliced = np.atleast_1d(args[2]) if len(args) > 2 and args[2] is not None else np.arange(len(starts))
    steps = np.atleast_1d(args[3]) if len(args) > 3 and args[3] is not None else np.ones(len(starts), np.int64)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, sliced, steps):
        index[int(a)] = slice(int(s), int(e), int(st))
    return data[tuple(index)]


def affine(g: GraphIndex, name: str, depth: int = 0) -> Affine | None:
    """``name`` as an :class:`Affine`, or None when it is computed otherwise."""
    value = const_value(g, name)
    if value is not None:
        return Affine(bias=np.asarray(value, np.float64))
    node = g.producer.get(name)
    if node is None or depth > _MAX_DEPTH:
        return None
    op = node.op_type
    if op == "Add":
        left, right = affine(g, node.input[0], depth + 1), affine(g, node.input[1], depth + 1)
        if left is None or right is None:
            return None
        terms = dict(left.terms)
        for k, term in right.terms.items():
            if k in terms and terms[k].shape != term.shape:
                return None
            terms[k] = terms[k] + term if k in terms else term
        return Affine(terms, np.asarray(left.bias) + np.asarray(right.bias), left.nodes + right.nodes + [node], left.dtype or right.dtype)
    if op == "MatMul":
        W = const_value(g, node.input[1])
        return Affine({node.input[0]: np.asarray(W, np.float64).T}, 0.0, [node], W.dtype) if W is not None and W.ndim == 2 else None
    if op == "Gemm":
        W = const_value(g, node.input[1])
        if W is None or W.ndim != 2 or g.attr(node, "transA", 0) or g.attr(node, "alpha", 1.0) != 1.0 or g.attr(node, "beta", 1.0) != 1.0:
            return None
        dtype, W = W.dtype, np.asarray(W, np.float64)
        bias = const_value(g, node.input[2]) if len(node.input) > 2 and node.input[2] else 0.0
        return None if bias is None else Affine({node.input[0]: W if g.attr(node, "transB", 0) else W.T}, np.asarray(bias, np.float64), [node], dtype)
    if op in ("Split", "Slice"):
        whole = affine(g, node.input[0], depth + 1)
        width = whole.width if whole is not None else None
        if whole is None or width is None:
            return None
        cut = _last_axis_cut(g, node, name, width)
        if cut is None:
            return None
        part = whole.rows(*cut)
        part.nodes.append(node)
        part.dtype = whole.dtype
        return part
    return None


def _last_axis_cut(g: GraphIndex, node: Any, name: str, width: int) -> tuple[int, int] | None:
    """The rows [a, b) that a Split output or a Slice takes along the last axis of a (batch, width) tensor."""
    if node.op_type == "Split":
        if g.attr(node, "axis", 0) not in (1, -1):
            return None
        sizes = g.constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else g.attr(node, "split")
        sizes = [int(s) for s in np.atleast_1d(sizes)] if sizes is not None else [width // len(node.output)] * len(node.output)
        if sum(sizes) != width:
            return None
        k = list(node.output).index(name)
        return sum(sizes[:k]), sum(sizes[: k + 1])
    if any(i not in g.constants for i in node.input[1:4] if i) or len(node.input) < 4:
        return None
    starts, ends, axes = (np.atleast_1d(g.constants[i]) for i in node.input[1:4])
    steps = np.atleast_1d(g.constants[node.input[4]]) if len(node.input) > 4 and node.input[4] else np.ones(len(starts))
    cut = None
    for s, e, a, st in zip(starts, ends, axes, steps):
        if int(st) != 1:
            return None
        if int(a) in (1, -1):
            cut = (int(s), min(int(e), width))
        elif int(s) != 0 or int(e) < 2**31 - 1:
            return None  # cuts the batch
    return cut
