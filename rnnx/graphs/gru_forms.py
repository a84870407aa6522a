"""GRU cells in any of the algebraic forms published code and converters write, matched by
what they compute rather than by how (:mod:`rnnx.graphs.cell_match` holds PyTorch's form).

Anchored at the candidate's ``Tanh``; rules:
- ``gru.candidate``: the Tanh's input is ``Wn x + bn + r * (Rn h + bRn)`` (reset after the
  product, ONNX ``linear_before_reset=1``: Keras's ``reset_after=True``, PyTorch) or
  ``Wn x + bn + Rn (r * h)`` (reset before, ``linear_before_reset=0``: Keras's
  ``reset_after=False``), with r a Sigmoid;
- ``gru.gates``: r is a Sigmoid of an affine map of exactly x and h;
- ``gru.output``: some tensor computed from n, h and a Sigmoid z of x and h by Add, Sub, Mul
  and Neg equals, as a polynomial, ``z*h + (1-z)*n`` (ONNX's form; also written
  ``n + z*(h-n)`` or ``(h-n)*z + n``) or ``(1-z)*h + z*n`` (z meaning the other way round, as
  some code writes it: ONNX's z is then ``sigmoid(-pre)``, so its weights are negated);
- ``gru.private``: nothing inside the cell is used outside it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np

from rnnx.graphs.affine import Affine, affine, const_value
from rnnx.graphs.cell_match import CellMatch, _used_outside
from rnnx.graphs.index import GraphIndex
from rnnx.pass_result import Declined

Poly = dict[tuple[str, ...], float]  # monomial (sorted symbols) -> coefficient
_ARITH = ("Add", "Sub", "Mul", "Neg", "Identity")
_MAX_REGION = 32  # nodes from n to h': a cell's output is a handful


def _terms(g: GraphIndex, name: str, opened: list[Any], depth: int = 0) -> list[str]:
    """The summands of ``name``: Adds are opened down to affine maps and other products."""
    node = g.producer.get(name)
    if node is not None and node.op_type == "Add" and depth < 6 and const_value(g, name) is None:
        found = affine(g, name)
        if found is None:  # an Add over a non-affine part (the reset product): open it
            opened.append(node)
            return _terms(g, node.input[0], opened, depth + 1) + _terms(g, node.input[1], opened, depth + 1)
    return [name]


def _poly(g: GraphIndex, name: str, symbols: dict[str, str], seen: list[Any], depth: int = 0) -> Poly | None:
    if name in symbols:
        return {(symbols[name],): 1.0}
    value = const_value(g, name)
    if value is not None:
        return {(): float(value)} if np.asarray(value).size == 1 else None
    node = g.producer.get(name)
    if node is None or node.op_type not in _ARITH or depth > 12:
        return None
    args = [_poly(g, i, symbols, seen, depth + 1) for i in node.input]
    if any(a is None for a in args):
        return None
    seen.append(node)
    if node.op_type == "Identity":
        return args[0]
    if node.op_type == "Neg":
        return {k: -v for k, v in args[0].items()}  # type: ignore[union-attr]
    a, b = args
    out: Poly = {}
    if node.op_type in ("Add", "Sub"):
        sign = 1.0 if node.op_type == "Add" else -1.0
        for k, v in a.items():  # type: ignore[union-attr]
            out[k] = out.get(k, 0.0) + v
        for k, v in b.items():  # type: ignore[union-attr]
            out[k] = out.get(k, 0.0) + sign * v
    else:
        for ka, va in a.items():  # type: ignore[union-attr]
            for kb, vb in b.items():  # type: ignore[union-attr]
                k = tuple(sorted(ka + kb))
                out[k] = out.get(k, 0.0) + va * vb
    return {k: v for k, v in out.items() if v != 0.0}


_OUTPUT_FORMS = {
    "z": {("h", "z"): 1.0, ("n",): 1.0, ("n", "z"): -1.0},  # z*h + (1-z)*n
    "1-z": {("h",): 1.0, ("h", "z"): -1.0, ("n", "z"): 1.0},  # (1-z)*h + z*n
}


def _may_be_candidate(g: GraphIndex, name: str) -> bool:
    """A cheap look before any weight is read: a sum of an input part (no product) and a reset
    product, r * (...) or R (r * h). An LSTM's gate or its c' = f*c + i*g, or a plain RNN's
    sum, is not one."""
    leaves, stack = [], [(name, 0)]
    while stack:
        t, depth = stack.pop()
        node = g.producer.get(t)
        if node is not None and node.op_type == "Add" and depth < 6:
            stack += [(i, depth + 1) for i in node.input]
        else:
            leaves.append(node)
    if len(leaves) < 2:
        return False
    products = [n is not None and (n.op_type == "Mul" or (n.op_type in ("MatMul", "Gemm") and g.prod(n.input[0], "Mul") is not None)) for n in leaves]
    plain = [n is None or n.op_type != "Mul" for n in leaves]
    return any(products) and any(p and not q for p, q in zip(plain, products))


def match_gru_forms(g: GraphIndex, tanh: Any) -> CellMatch | Declined | None:
    """A GRU cell whose candidate is ``tanh``, in any of the forms above; None when ``tanh`` is no candidate."""
    if not _may_be_candidate(g, tanh.input[0]):
        return None
    opened: list[Any] = []
    terms = _terms(g, tanh.input[0], opened)
    plain, reset = [], []
    for t in terms:
        node = g.producer.get(t)
        if node is not None and node.op_type == "Mul":
            sig = [i for i in node.input if g.prod(i, "Sigmoid") is not None]
            if len(sig) == 1:
                reset.append((g.prod(sig[0], "Sigmoid"), next(i for i in node.input if i != sig[0]), node))
                continue
        plain.append(t)
    maps = [affine(g, t) for t in plain]
    parts = [part for part in maps if part is not None]
    if len(parts) != len(maps):
        return None
    n_in = Affine()
    for part in parts:
        for k, W in part.terms.items():
            n_in.terms[k] = n_in.terms[k] + W if k in n_in.terms else W
        n_in.bias = np.asarray(n_in.bias) + np.asarray(part.bias)
        n_in.nodes += part.nodes
    inner: list[Any] = [tanh, *opened, *n_in.nodes]
    if len(reset) > 1 or (reset and not plain):
        return None  # an LSTM's c' = f*c + i*g under tanh, say: not a GRU's candidate
    if len(reset) == 1:  # reset after: r * (Rn h + bRn)
        r_sig, rec_name, mul = reset[0]
        rec = affine(g, rec_name)
        if rec is None:
            return None
        if len(rec.terms) != 1 or len(n_in.terms) != 1:
            return Declined("gru.candidate", "the candidate's recurrent part is r * (a map of one tensor), but its input part is not one map of x")
        (h,) = rec.terms
        (x,) = n_in.terms
        lbr, Rn, bRn = 1, rec.terms[h], rec.bias
        inner += [mul, *rec.nodes]
    elif not reset:  # reset before: Rn (r * h)
        rh = [k for k in n_in.terms if g.prod(k, "Mul") is not None]
        muls = [g.prod(k, "Mul") for k in rh]
        found = [(m, [i for i in m.input if g.prod(i, "Sigmoid") is not None]) for m in muls]
        found = [(m, s) for m, s in found if len(s) == 1]
        if not found:
            return None  # no reset gate: not a GRU's candidate (a plain RNN's, perhaps)
        if len(found) != 1 or len(n_in.terms) != 2:
            return Declined("gru.candidate", "the candidate's input is neither Wx + r * (Rh) nor Wx + R(r * h)")
        mul, (r_out,) = found[0]
        r_sig = g.prod(r_out, "Sigmoid")
        h = next(i for i in mul.input if i != r_out)
        (x,) = [k for k in n_in.terms if k != mul.output[0]]
        lbr, Rn, bRn = 0, n_in.terms.pop(mul.output[0]), 0.0
        inner.append(mul)
    else:
        return None
    H = Rn.shape[0]
    Wn, bWn = n_in.terms[x], n_in.bias
    r_in = affine(g, r_sig.input[0])
    if r_in is None or h not in r_in.terms:
        return None  # the "reset" does not read the state it resets: not a GRU (an LSTM's o * tanh(c) is one such)
    if set(r_in.terms) != {x, h}:
        return Declined("gru.gates", "r is not a Sigmoid of a map of the input and the state")
    inner += [r_sig, *r_in.nodes]
    # The output: a polynomial in n, h and one more Sigmoid z of (x, h).
    zs = [u for k in (x, h) for m in g.consumers.get(k, []) for u in _downstream_sigmoids(g, m) if u is not r_sig]
    region: list[Any] = []
    frontier, best = [tanh.output[0]], None
    for z_sig in {id(z): z for z in zs}.values():
        z_in = affine(g, z_sig.input[0])
        if z_in is None or set(z_in.terms) != {x, h}:
            continue
        symbols = {tanh.output[0]: "n", h: "h", z_sig.output[0]: "z"}
        seen: set[int] = set()
        frontier = [tanh.output[0]]
        while frontier and len(seen) < _MAX_REGION and best is None:
            t = frontier.pop(0)
            for u in g.consumers.get(t, []):
                if id(u) in seen or u.op_type not in _ARITH:
                    continue
                seen.add(id(u))
                region = []
                p = _poly(g, u.output[0], symbols, region)
                if p is not None:
                    form = next((f for f, want in _OUTPUT_FORMS.items() if Counter(p) == Counter(want) and all(abs(p[k] - v) < 1e-12 for k, v in want.items())), None)
                    if form is not None:
                        best = (u, form, z_sig, z_in, list(region))
                        break
                frontier.append(u.output[0])
        if best is not None:
            break
    if best is None:
        return Declined("gru.output", "no tensor computed from n, h and a gate z equals z*h + (1-z)*n or (1-z)*h + z*n")
    out, form, z_sig, z_in, region = best
    inner += [z_sig, *z_in.nodes, *region]
    sign = -1.0 if form == "1-z" else 1.0  # 1 - sigmoid(a) = sigmoid(-a)
    leak = _used_outside(g, inner, {out.output[0]})
    if leak is not None:
        return Declined("gru.private", f"{leak} is used outside the cell")
    vectors = [v.bias_vector(H) if isinstance(v, Affine) else None for v in (z_in, r_in)]
    bWn_v, bRn_v = Affine(bias=bWn).bias_vector(H), Affine(bias=bRn).bias_vector(H)
    if any(v is None for v in (*vectors, bWn_v, bRn_v)):
        return Declined("gru.gates", "a gate's bias varies across the batch")
    dtype = z_in.dtype or r_in.dtype or np.float32  # the file's own weight dtype
    W = np.concatenate([sign * z_in.terms[x], r_in.terms[x], Wn]).astype(dtype)
    R = np.concatenate([sign * z_in.terms[h], r_in.terms[h], Rn]).astype(dtype)
    zeros = np.zeros(H)
    biases = (np.concatenate([sign * vectors[0], vectors[1], bWn_v]), np.concatenate([zeros, zeros, bRn_v]))  # type: ignore[operator]
    digest = hashlib.blake2b(b"".join(a.tobytes() for a in (W, R, *biases)) + bytes([lbr]), digest_size=16).digest()
    return CellMatch(
        op="GRU", x=x, h=h, h_new=out.output[0], hidden=H, W=W, R=R, biases=biases, positions={"z": 0, "r": 1, "n": 2},
        remove=(out,), linear_before_reset=lbr, weights_key=("GRU-form", digest),
    )


def _downstream_sigmoids(g: GraphIndex, node: Any, depth: int = 0) -> list[Any]:
    """The Sigmoids that a gate's affine map starting at ``node`` feeds (through the map's own ops)."""
    if node.op_type == "Sigmoid":
        return [node]
    if depth > 6 or node.op_type not in ("MatMul", "Gemm", "Add", "Split", "Slice"):
        return []
    return [s for o in node.output for u in g.consumers.get(o, []) for s in _downstream_sigmoids(g, u, depth + 1)]
