"""Recognise GRU and plain RNN cells that an exporter decomposed into elementwise ops, with the
vocabulary every cell matcher shares: :class:`CellMatch`, :func:`pick_state`, what may leave a cell.

Each matcher is a pattern (the anchor that makes a candidate) and checks; a candidate that
fails a check is a :class:`~rnnx.pass_result.Declined` naming the rule, and a node that is
no candidate at all is None.

LSTM cells: :mod:`rnnx.graphs.lstm_match`, with this module's vocabulary.

GRU, anchored at a ``Tanh`` of ``Add(a, Mul(b, r))`` with a and b parts of 3-way Splits, as
PyTorch's GRUCell decomposes (reset after the recurrent product, ONNX ``linear_before_reset=1``):
- ``gru.reset``: the candidate's recurrent part is ``r * (h part)``;
- ``gru.gates``: r and z are Sigmoids of (x part + h part) at one position each;
- ``gru.linear_inputs``: both Splits read constant linear maps (plus bias) of x and of h, 3H wide;
- ``gru.output``: ``h' = (h - n) * z + n``;
- ``gru.private``: nothing else inside the cell is used outside it.
GRUs in other algebraic forms are :mod:`rnnx.graphs.gru_forms`.

Plain RNN (:func:`match_rnn`), anchored at a ``Tanh`` or ``Relu`` of a sum of two constant
linear maps, one of which may read a state: ``rnn.linear_inputs``, ``rnn.state``, ``rnn.private``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.graphs import walk
from rnnx.graphs.index import GraphIndex
from rnnx.graphs.linear_terms import Linear, LinearSum, linear_sum
from rnnx.graphs.time_slice import time_slice
from rnnx.layouts.onnx import GATE_ORDER
from rnnx.pass_result import Declined


@dataclass(frozen=True)
class CellMatch:
    """A decomposed cell: the tensors it reads and writes, its weights as the exporter laid them
    out (rows in the exporter's gate positions) and which gate sits at which position."""

    op: str  # "LSTM" or "GRU"
    x: str
    h: str
    h_new: str
    hidden: int
    W: np.ndarray  # (gates*H, I), exporter's positions
    R: np.ndarray  # (gates*H, H)
    biases: tuple[np.ndarray, np.ndarray]  # input-side and recurrent-side, exporter's positions, float64
    positions: dict[str, int]  # gate name -> its position in the exporter's layout
    remove: tuple[Any, ...]  # the nodes whose outputs the fused node now writes (the rest then falls dead)
    weights_key: tuple[Any, ...]  # equal for steps of one cell: they share one set of weights
    c: str | None = None  # LSTM only
    c_new: str | None = None
    activations: tuple[str, ...] = ()  # ONNX's activations attribute; () for the op's defaults
    activation_params: tuple[float, float] | None = None  # (alpha, beta) of the first activation, where it takes them
    linear_before_reset: int = 1  # GRU only: 0 when the reset gate multiplies h before R

    @property
    def cell(self) -> str:
        """The canonical cell name (the key of GATE_ORDER)."""
        if self.op == "RNN":
            return "rnn_relu" if self.activations == ("Relu",) else "rnn_tanh"
        return self.op.lower()

    def onnx_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """W, R and B in ONNX's gate order, B = [input-side; recurrent-side] in W's dtype.
        Reordered only when asked: the steps of one cell share one set."""
        H = self.hidden
        rows = np.concatenate([np.arange(self.positions[gate] * H, (self.positions[gate] + 1) * H) for gate in GATE_ORDER[self.cell]])
        B = np.concatenate([self.biases[0][rows], self.biases[1][rows]]).astype(self.W.dtype)
        return self.W[rows], self.R[rows], B


def _single_consumer(g: GraphIndex, name: str, op_type: str) -> Any:
    users = g.consumers.get(name, [])
    return users[0] if len(users) == 1 and users[0].op_type == op_type and name not in g.outputs else None


def _used_outside(g: GraphIndex, inner: list[Any], results: set[str]) -> str | None:
    """The first tensor computed by ``inner`` (other than ``results``) that something else reads."""
    inner_ids = {id(n) for n in inner}
    for name in {o for n in inner for o in n.output} - results:
        # A Shape reads no value (torch.jit.script's chunk sizes its Slices so); the rewrite
        # removes only the cell's results, so whatever still reads a shape keeps its producer.
        if name in g.outputs or any(id(u) not in inner_ids and u.op_type != "Shape" for u in g.consumers.get(name, [])):
            return name
    return None


_PASS = ("Identity", "Squeeze", "Unsqueeze", "Reshape", "Cast")  # what may lie between a state and where it is carried


def _reaches(g: GraphIndex, name: str, ends: set[str]) -> set[str]:
    """The names of ``ends`` that ``name`` reaches through shape-only ops."""
    return set(walk.forward(name, g.consumers, _PASS, ends))


def pick_state(g: GraphIndex, terms: list[Linear], H: int, cell: str, h_new: str,
               c_pair: tuple[str, str] | None = None, anchor_op: str | None = None) -> Linear | Declined:
    """Which of a cell's two linear terms reads the state h. By shape when only one matrix is
    (H, H); otherwise by structure, not shape (rule ``<cell>.state``):
    - in a Loop or Scan body, h is the carried input whose next value is h';
    - in an unrolled loop, the input is the one sliced from the sequence (Gather, Slice or Split
      along time, :mod:`rnnx.graphs.time_slice`);
    - in an unrolled chain, the state is the operand that an earlier step of the same cell
      computed (a step's h' read as the next step's state), or, for the chain's first step, the
      operand whose weight the next step applies to this step's h';
    - a constant (an initial zero state) is the state;
    - in a streaming step (state in, state out as graph inputs and outputs), h sits beside c among
      the graph's inputs, (h, c) as every framework passes them (LSTM); otherwise h is the graph
      input of the two, and when both are, the later one, as every cell's call is written:
      step(x, state); either way h' must leave as a graph output."""
    square = [t for t in terms if t.W.shape[1] == H]
    if len(square) == 1:
        return square[0]
    if len(square) != 2:
        return Declined(f"{cell}.state", f"{len(square)} of the linear terms are (hidden, hidden) maps, expected the state's")
    rule = f"{cell}.state"
    carried = [t for t in square if t.input in g.carried and _reaches(g, h_new, {g.carried[t.input]})]
    if len(carried) == 1:
        return carried[0]
    free = [t for t in square if time_slice(g, t.input) is None]
    if len(free) == 1:
        return free[0]
    chained = _chained_state(g, square, h_new, anchor_op)
    if chained is not None:
        return chained
    consts = [t for t in square if t.input in g.constants or g.prod(t.input, "ConstantOfShape") is not None]
    if len(consts) == 1:
        return consts[0]
    inputs = [t for t in square if t.input in g.input_order]
    outs = g.output_order
    h_out = [k for k, o in enumerate(outs) if _reaches(g, h_new, {o})]
    if c_pair is not None and len(inputs) == 2 and c_pair[0] in g.input_order:
        k_c = g.input_order.index(c_pair[0])
        for want in (k_c - 1, k_c + 1):  # (h, c), as torch, Keras and ONNX's initial_h, initial_c pass them
            paired = [t for t in inputs if g.input_order.index(t.input) == want]
            if len(paired) == 1:
                return paired[0]
    if h_out and len(inputs) == 1:
        return inputs[0]
    if h_out and len(inputs) == 2:
        return max(inputs, key=lambda t: g.input_order.index(t.input))
    return Declined(rule, "cannot tell the input from the state: both are (hidden, hidden) maps, neither is carried by a Loop or Scan, "
                    "sliced from a sequence, computed by an earlier step of the same cell, nor a graph input whose new value is a graph output")


def _step_terms(g: GraphIndex, act: Any) -> dict[tuple[Any, ...], str] | None:
    """The weight origins of a plain RNN step anchored at ``act``, each with its operand."""
    found = linear_sum(g, act.input[0]) if act.op_type in _RNN_ACTIVATIONS else None
    return {t.origin: g.through(t.input, _PASS) for t in found.linear} if found is not None and len(found.linear) == 2 else None


def _chained_state(g: GraphIndex, square: list[Linear], h_new: str, anchor_op: str | None) -> Linear | None:
    """The state by the chain's structure, for a plain RNN step (``anchor_op`` its activation):
    an operand computed by an earlier step with the same two weights is that step's h'; for a
    first step, the weight that a next step with the same two weights applies to this step's h'
    marks the state. Each step looks at its neighbours only, so a chain costs linear time."""
    if anchor_op not in _RNN_ACTIVATIONS:
        return None
    origins = {t.origin for t in square}
    if len(origins) != 2:
        return None
    earlier = []
    for t in square:
        node = g.producer.get(g.through(t.input, _PASS))
        terms = _step_terms(g, node) if node is not None and node.op_type == anchor_op else None
        if terms is not None and set(terms) == origins:
            earlier.append(t)
    if len(earlier) == 1:
        return earlier[0]
    if earlier:
        return None
    reads = set()
    frontier, seen = [h_new], 0
    while frontier and seen < 64:  # h' reaches the next step's product through shape-only ops and one or two Adds
        name = frontier.pop()
        seen += 1
        for user in g.consumers.get(name, []):
            if user.op_type == anchor_op:
                terms = _step_terms(g, user)
                if terms is not None and set(terms) == origins:
                    reads |= {o for o, operand in terms.items() if operand == h_new}
            elif user.op_type in _PASS or user.op_type in ("MatMul", "Gemm", "Add"):
                frontier.extend(o for o in user.output if o)
    if len(reads) == 1:
        (origin,) = reads
        return next(t for t in square if t.origin == origin)
    return None


def _one_linear(g: GraphIndex, name: str) -> LinearSum | None:
    found = linear_sum(g, name)
    return found if found is not None and len(found.linear) == 1 else None


def _split_part(g: GraphIndex, name: str) -> tuple[Any, int] | None:
    node = g.producer.get(name)
    if node is None or node.op_type != "Split" or len(node.output) != 3:
        return None
    return node, list(node.output).index(name)


def match_gru(g: GraphIndex, tanh: Any) -> CellMatch | Declined | None:
    """A GRU cell whose candidate is ``tanh``; None when ``tanh`` is no candidate."""
    add_n = g.prod(tanh.input[0], "Add")
    if add_n is None:
        return None
    for a, m in (add_n.input, reversed(add_n.input)):
        mul = g.prod(m, "Mul")
        if mul is not None and _split_part(g, a) is not None:
            break
    else:
        return None
    sx, k_n = _split_part(g, a)  # type: ignore[misc]
    parts = [(_split_part(g, i), g.prod(i, "Sigmoid")) for i in mul.input]
    hn = next((p for p, _ in parts if p is not None), None)
    r_sig = next((s for _, s in parts if s is not None), None)
    if hn is None or r_sig is None or hn[1] != k_n:
        return Declined("gru.reset", "the candidate's recurrent part is not r * (h part)")
    sh = hn[0]

    def position(sig: Any) -> int | None:
        add = g.prod(sig.input[0], "Add")
        if add is None:
            return None
        found = [_split_part(g, i) for i in add.input]
        if any(f is None for f in found) or {id(f[0]) for f in found} != {id(sx), id(sh)} or found[0][1] != found[1][1]:  # type: ignore[index]
            return None
        return found[0][1]  # type: ignore[index]

    k_r = position(r_sig)
    z_sigs = [u for p in sh.output for add in g.consumers.get(p, []) if add.op_type == "Add"
              for u in g.consumers.get(add.output[0], []) if u.op_type == "Sigmoid" and u is not r_sig]
    k_z = position(z_sigs[0]) if len(z_sigs) == 1 else None
    if k_r is None or k_z is None:
        return Declined("gru.gates", "r and z are not sigmoids of (x part + h part)")
    z_sig = z_sigs[0]
    lin_x, lin_h = _one_linear(g, sx.input[0]), _one_linear(g, sh.input[0])
    if lin_x is None or lin_h is None:
        return Declined("gru.linear_inputs", "the gates' inputs are not constant linear maps")
    h_prev = lin_h.linear[0].input
    n = tanh.output[0]

    def same_h(name: str) -> bool:  # exporters may repeat a constant initial state under two names
        if name == h_prev:
            return True
        a, b = g.constants.get(name), g.constants.get(h_prev)
        return a is not None and b is not None and a.shape == b.shape and bool(np.array_equal(a, b))

    sub = next((u for u in g.consumers.get(n, []) if u.op_type == "Sub" and u.input[1] == n and same_h(u.input[0])), None)
    mul_z = _single_consumer(g, sub.output[0], "Mul") if sub is not None else None
    out = _single_consumer(g, mul_z.output[0], "Add") if mul_z is not None else None
    if mul_z is None or z_sig.output[0] not in mul_z.input or out is None or n not in out.input:
        return Declined("gru.output", "h' is not (h - n) * z + n")
    W, R = lin_x.linear[0].W, lin_h.linear[0].W
    H = R.shape[1]
    if R.shape[0] != 3 * H or W.shape[0] != 3 * H:
        return Declined("gru.linear_inputs", "the linear maps are not 3*hidden wide")
    inner = [sx, sh, tanh, add_n, mul, r_sig, z_sig, sub, mul_z, out,
             g.producer[r_sig.input[0]], g.producer[z_sig.input[0]], g.producer[sx.input[0]], g.producer[sh.input[0]]]
    leak = _used_outside(g, inner, {out.output[0]})
    if leak is not None:
        return Declined("gru.private", f"{leak} is used outside the cell")
    positions = {"z": k_z, "r": k_r, "n": k_n}
    return CellMatch(
        op="GRU", x=lin_x.linear[0].input, h=h_prev, h_new=out.output[0], hidden=H, W=W, R=R,
        biases=(lin_x.bias(3 * H), lin_h.bias(3 * H)), positions=positions, remove=(out,),
        weights_key=("GRU", tuple(sorted(positions.items())), lin_x.origin, lin_h.origin),
    )


_RNN_ACTIVATIONS = {"Tanh": (), "Relu": ("Relu",)}  # ONNX RNN's default activation is Tanh


def _state_like(g: GraphIndex, name: str, anchor_op: str) -> bool:
    """Whether ``name`` can be a recurrence's state: a constant or zeros of the batch's shape
    (the initial state), a graph or body input, or the output of an earlier step's activation."""
    name = g.through(name, _PASS)
    node = g.producer.get(name)
    return name in g.constants or node is None or node.op_type in (anchor_op, "ConstantOfShape", "Expand")


def match_rnn(g: GraphIndex, act: Any) -> CellMatch | Declined | None:
    """A plain RNN cell ``h' = act(W x + R h + b)`` whose activation is ``act`` (Tanh or Relu);
    None when ``act`` is no candidate: its input is not a sum of two constant linear maps of
    which one may read a state. Rules: ``rnn.linear_inputs``, ``rnn.state``, ``rnn.private``."""
    if act.op_type not in _RNN_ACTIVATIONS:
        return None
    found = linear_sum(g, act.input[0])
    if found is not None and len(found.linear) == 1:
        return _first_rnn_step(g, act, found)
    if found is None or len(found.linear) != 2 or not any(_state_like(g, t.input, act.op_type) for t in found.linear):
        return None
    H = found.linear[0].W.shape[0]
    if any(t.W.shape[0] != H for t in found.linear) or any(np.asarray(b).shape[-1] != H for b in found.biases) \
            or any(np.asarray(b).ndim > 1 and np.asarray(b).shape[0] != 1 for b in found.biases):
        return Declined("rnn.linear_inputs", "the linear terms disagree on hidden (or a bias varies across the batch)")
    h_new = act.output[0]
    state = pick_state(g, found.linear, H, "rnn", h_new, anchor_op=act.op_type)
    if isinstance(state, Declined):
        return state
    (inp,) = [t for t in found.linear if t is not state]
    leak = _used_outside(g, [act, *found.nodes], {h_new})
    if leak is not None:
        return Declined("rnn.private", f"{leak} is used outside the cell")
    activations = _RNN_ACTIVATIONS[act.op_type]
    bias = _rows_equal(_bias_sum(found, H), H)
    if bias is None:
        return Declined("rnn.linear_inputs", "the bias varies across the batch")
    return CellMatch(
        op="RNN", x=inp.input, h=state.input, h_new=h_new, hidden=H, W=inp.W, R=state.W,
        biases=(bias, np.zeros(H)), positions={"h": 0}, remove=(act,), activations=activations,
        weights_key=("RNN", activations, inp.origin, state.origin, bias.tobytes()),
    )


def _bias_sum(found: LinearSum, H: int) -> np.ndarray:
    """The biases added up in float64, broadcast as ONNX's Add does ((H,) with (batch, H))."""
    return sum((np.asarray(b, dtype=np.float64) for b in found.biases), np.zeros(H))


def _rows_equal(value: np.ndarray, H: int) -> np.ndarray | None:
    """A bias as one (H,) row; None when its rows differ (it varies across the batch)."""
    value = np.asarray(value, dtype=np.float64).reshape(-1, H) if np.asarray(value).size % H == 0 else None  # type: ignore[assignment]
    return value[0] if value is not None and bool(np.all(value == value[0])) else None


def _first_rnn_step(g: GraphIndex, act: Any, found: LinearSum) -> CellMatch | None:
    """An unrolled loop's first step, whose zero initial state the exporter folded away:
    ``act(W x + b)``, its result read as the state of a next step ``act(W x' + R h + b)`` with the
    same W. It becomes a step with no initial state (zeros) and the next step's R, so that the
    steps chain; the bias may have been broadcast to the batch (``0 @ R + b`` folded)."""
    (inp,) = found.linear
    H = inp.W.shape[0]
    h_new = act.output[0]
    bias = _rows_equal(_bias_sum(found, H), H) if all(np.asarray(b).shape[-1] == H for b in found.biases) else None
    if bias is None or time_slice(g, inp.input) is None:
        return None
    for user in g.consumers.get(h_new, []):
        node = user
        for _ in range(6):  # from the next step's product with h to its activation
            nxt = [u for o in node.output for u in g.consumers.get(o, []) if u.op_type in ("Add", act.op_type)]
            if len(nxt) != 1:
                break
            node = nxt[0]
            if node.op_type == act.op_type:
                after = linear_sum(g, node.input[0])
                terms = {t.input: t for t in after.linear} if after is not None and len(after.linear) == 2 else {}
                state = terms.get(h_new)
                if state is not None and any(t.origin == inp.origin for t in terms.values() if t is not state) and state.W.shape == (H, H):
                    activations = _RNN_ACTIVATIONS[act.op_type]
                    return CellMatch(
                        op="RNN", x=inp.input, h="", h_new=h_new, hidden=H, W=inp.W, R=state.W, biases=(bias, np.zeros(H)), positions={"h": 0},
                        remove=(act,), activations=activations, weights_key=("RNN", activations, inp.origin, state.origin, bias.tobytes()),
                    )
                break
    return None
