"""One ``torch.library.custom_op`` per recurrence, and its ONNX translation.

torch.export sees each op as one opaque call; ``TRANSLATIONS`` (passed to torch.onnx's
dynamo exporter as ``custom_translation_table``) turns it into one native LSTM / GRU /
RNN node, or, for a projected LSTM, into the ``rnnx.lower::LSTMProjected`` placeholder
that :mod:`rnnx.graphs.lower` rewrites into Scans. Weights arrive in ONNX layout
(:func:`rnnx.layouts.onnx.layer_arrays`). Every op returns Y already merged to
(seq, batch, dirs*size), like a PyTorch layer's output, plus the final states.

The eager bodies compute the same math in torch, so a swapped model still runs.
"""

from __future__ import annotations

from typing import Any

import torch

from rnnx.formats.onnx_scan import DOMAIN as LOWER_DOMAIN, LSTM_PROJECTED
from rnnx.layouts.onnx import GATE_ORDER, PEEPHOLE_ORDER

_ACT = {"tanh": torch.tanh, "relu": torch.relu}


def _gates(stacked: torch.Tensor, cell: str) -> dict[str, torch.Tensor]:
    return dict(zip(GATE_ORDER[cell], stacked.chunk(len(GATE_ORDER[cell]), dim=-1)))


def _run(
    cell: str, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, seq_lens: torch.Tensor | None,
    h0: torch.Tensor | None, c0: torch.Tensor | None, p: torch.Tensor | None, proj: torch.Tensor | None,
    direction: str, linear_before_reset: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager ONNX semantics (with masking for ragged batches), gates by name."""
    T, B, _ = x.shape
    D, GH, _ = w.shape
    H = GH // len(GATE_ORDER[cell])
    out = proj.shape[1] if proj is not None else H
    lens = seq_lens.long() if seq_lens is not None else torch.full((B,), T, dtype=torch.long)
    ys, hs, cs = [], [], []
    for d in range(D):
        reverse = direction == "reverse" or d == 1
        wb, rb = (b[d].chunk(2) if b is not None else (x.new_zeros(GH), x.new_zeros(GH)))
        h = h0[d] if h0 is not None else x.new_zeros(B, out)
        c = c0[d] if c0 is not None else x.new_zeros(B, H)
        y = x.new_zeros(T, B, out)
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            active = (t < lens).unsqueeze(1)
            xg = _gates(x[t] @ w[d].T + wb, cell)
            hg = _gates(h @ r[d].T + rb, cell)
            if cell == "lstm":
                peep = dict(zip(PEEPHOLE_ORDER, p[d].chunk(3))) if p is not None else None
                i = torch.sigmoid(xg["i"] + hg["i"] + (peep["i"] * c if peep else 0))
                f = torch.sigmoid(xg["f"] + hg["f"] + (peep["f"] * c if peep else 0))
                c_new = f * c + i * torch.tanh(xg["g"] + hg["g"])
                o = torch.sigmoid(xg["o"] + hg["o"] + (peep["o"] * c_new if peep else 0))
                h_new = o * torch.tanh(c_new)
                if proj is not None:
                    h_new = h_new @ proj[d].T
                c = torch.where(active, c_new, c)
            elif cell == "gru":
                z = torch.sigmoid(xg["z"] + hg["z"])
                rr = torch.sigmoid(xg["r"] + hg["r"])
                if linear_before_reset:
                    n = torch.tanh(xg["n"] + rr * hg["n"])
                else:
                    n_rows = slice(GATE_ORDER[cell].index("n") * H, (GATE_ORDER[cell].index("n") + 1) * H)
                    n = torch.tanh(xg["n"] + (rr * h) @ r[d][n_rows].T + rb[n_rows])
                h_new = (1 - z) * n + z * h
            else:
                h_new = _ACT[cell](xg["h"] + hg["h"])
            h = torch.where(active, h_new, h)
            y[t] = torch.where(active, h_new, torch.zeros_like(h_new))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return torch.cat(ys, dim=2), torch.stack(hs), torch.stack(cs)


def _expect(ok: Any, what: str) -> None:
    # torch._check both raises eagerly and, while tracing, tells torch the shapes agree:
    # that is how a state's batch becomes the input's batch and feature sizes become static.
    torch._check(ok, lambda: what)


def check_shapes(x: torch.Tensor, w: torch.Tensor, seq_lens: torch.Tensor | None, h0: torch.Tensor | None,
                 c0: torch.Tensor | None, hidden_size: int, out: int, step: bool = False) -> None:
    """What the ONNX node requires of its inputs (and the torch module too)."""
    D = w.shape[0]
    batch = x.shape[0] if step else x.shape[1]
    features = x.shape[-1]
    _expect(x.dim() == (2 if step else 3), f"expected a {'2' if step else '3'}-D input, found {x.dim()}-D")
    _expect(features == w.shape[2], f"expected input size {w.shape[2]}, found {features}")
    for name, state, size in (("h", h0, out), ("c", c0, hidden_size)):
        if state is None:
            continue
        want = (batch, size) if step else (D, batch, size)
        _expect(state.dim() == len(want), f"expected {name} of {len(want)} dimensions, found {state.dim()}")
        for k, (got, expected) in enumerate(zip(state.shape, want)):
            _expect(got == expected, f"expected {name} of shape {tuple(want)}, found dim {k} = {got}")
    if seq_lens is not None:
        _expect(seq_lens.dim() == 1, f"expected 1-D sequence lengths, found {seq_lens.dim()}-D")
        _expect(seq_lens.shape[0] == batch, f"expected {batch} sequence lengths (one per batch entry), found {seq_lens.shape[0]}")


def _fake(x: torch.Tensor, w: torch.Tensor, hidden_size: int, out: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    T, B, _ = x.shape
    D = w.shape[0]
    return x.new_empty(T, B, D * out), x.new_empty(D, B, out), x.new_empty(D, B, hidden_size)


@torch.library.custom_op("rnnx::lstm", mutates_args=())
def lstm(
    x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, seq_lens: torch.Tensor | None,
    h0: torch.Tensor | None, c0: torch.Tensor | None, p: torch.Tensor | None, proj: torch.Tensor | None,
    hidden_size: int, direction: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    check_shapes(x, w, seq_lens, h0, c0, hidden_size, proj.shape[1] if proj is not None else hidden_size)
    return _run("lstm", x, w, r, b, seq_lens, h0, c0, p, proj, direction)


@lstm.register_fake
def _(x, w, r, b, seq_lens, h0, c0, p, proj, hidden_size, direction):
    check_shapes(x, w, seq_lens, h0, c0, hidden_size, proj.shape[1] if proj is not None else hidden_size)
    return _fake(x, w, hidden_size, proj.shape[1] if proj is not None else hidden_size)


@torch.library.custom_op("rnnx::gru", mutates_args=())
def gru(
    x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, seq_lens: torch.Tensor | None,
    h0: torch.Tensor | None, hidden_size: int, direction: str, linear_before_reset: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_shapes(x, w, seq_lens, h0, None, hidden_size, hidden_size)
    y, h, _ = _run("gru", x, w, r, b, seq_lens, h0, None, None, None, direction, linear_before_reset)
    return y, h


@gru.register_fake
def _(x, w, r, b, seq_lens, h0, hidden_size, direction, linear_before_reset):
    check_shapes(x, w, seq_lens, h0, None, hidden_size, hidden_size)
    return _fake(x, w, hidden_size, hidden_size)[:2]


@torch.library.custom_op("rnnx::rnn", mutates_args=())
def rnn(
    x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, seq_lens: torch.Tensor | None,
    h0: torch.Tensor | None, hidden_size: int, direction: str, activation: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_shapes(x, w, seq_lens, h0, None, hidden_size, hidden_size)
    y, h, _ = _run("rnn_" + activation, x, w, r, b, seq_lens, h0, None, None, None, direction)
    return y, h


@rnn.register_fake
def _(x, w, r, b, seq_lens, h0, hidden_size, direction, activation):
    check_shapes(x, w, seq_lens, h0, None, hidden_size, hidden_size)
    return _fake(x, w, hidden_size, hidden_size)[:2]


# --- ONNX translations (onnxscript, traced by torch.onnx) -------------------------------


def _merge(op: Any, y: Any) -> Any:
    # (seq, dirs, batch, size) -> (seq, batch, dirs*size); 0 keeps a dim, so nothing is baked in.
    return op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))


def _lstm_projected_op() -> Any:
    from onnx.defs import OpSchema
    from onnxscript.values import Op, Opset

    optional = OpSchema.FormalParameterOption.Optional
    single = OpSchema.FormalParameterOption.Single
    schema = OpSchema(
        LSTM_PROJECTED, LOWER_DOMAIN, 1,
        inputs=[OpSchema.FormalParameter(n, "T1" if n == "seq_lens" else "T", param_option=single if n in ("X", "W", "R", "proj") else optional)
                for n in ("X", "W", "R", "B", "seq_lens", "h0", "c0", "P", "proj")],
        outputs=[OpSchema.FormalParameter(n, "T") for n in ("Y", "Y_h", "Y_c")],
        type_constraints=[("T", ["tensor(float)", "tensor(double)", "tensor(float16)"], ""), ("T1", ["tensor(int32)"], "")],
        attributes=[OpSchema.Attribute("hidden_size", OpSchema.AttrType.INT, ""), OpSchema.Attribute("direction", OpSchema.AttrType.STRING, "")],
    )
    return Op(Opset(LOWER_DOMAIN, 1), LSTM_PROJECTED, op_schema=schema)


def _lstm_onnx(x, w, r, b, seq_lens, h0, c0, p, proj, hidden_size: int, direction: str):
    from onnxscript import opset17 as op

    if proj is not None:
        return _lstm_projected_op()(x, w, r, b, seq_lens, h0, c0, p, proj, hidden_size=hidden_size, direction=direction)
    y, y_h, y_c = op.LSTM(x, w, r, b, seq_lens, h0, c0, p, hidden_size=hidden_size, direction=direction)
    return _merge(op, y), y_h, y_c


def _gru_onnx(x, w, r, b, seq_lens, h0, hidden_size: int, direction: str, linear_before_reset: int):
    from onnxscript import opset17 as op

    y, y_h = op.GRU(x, w, r, b, seq_lens, h0, hidden_size=hidden_size, direction=direction, linear_before_reset=linear_before_reset)
    return _merge(op, y), y_h


def _rnn_onnx(x, w, r, b, seq_lens, h0, hidden_size: int, direction: str, activation: str):
    from onnxscript import opset17 as op

    acts = [activation.capitalize()] * (2 if direction == "bidirectional" else 1)
    y, y_h = op.RNN(x, w, r, b, seq_lens, h0, hidden_size=hidden_size, direction=direction, activations=acts)
    return _merge(op, y), y_h


TRANSLATIONS = {
    torch.ops.rnnx.lstm.default: _lstm_onnx,
    torch.ops.rnnx.gru.default: _gru_onnx,
    torch.ops.rnnx.rnn.default: _rnn_onnx,
}


# --- one step of a cell: a native node over a sequence of length 1 ----------------------
# A cell stepped in a Python loop is traced once per step; each step stays one native
# node, and rnnx.graphs.fuse_steps joins a chain of them into one node over the sequence.


@torch.library.custom_op("rnnx::lstm_cell", mutates_args=())
def lstm_cell(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    _, y_h, y_c = _run("lstm", x.unsqueeze(0), w, r, b, None, h.unsqueeze(0), c.unsqueeze(0), None, None, "forward")
    return y_h[0], y_c[0]


@lstm_cell.register_fake
def _(x, h, c, w, r, b, hidden_size):
    check_shapes(x, w, None, h, c, hidden_size, hidden_size, step=True)
    return h.new_empty(h.shape), c.new_empty(c.shape)


@torch.library.custom_op("rnnx::gru_cell", mutates_args=())
def gru_cell(x: torch.Tensor, h: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, hidden_size: int) -> torch.Tensor:
    _, y_h, _ = _run("gru", x.unsqueeze(0), w, r, b, None, h.unsqueeze(0), None, None, None, "forward", 1)
    return y_h[0]


@gru_cell.register_fake
def _(x, h, w, r, b, hidden_size):
    check_shapes(x, w, None, h, None, hidden_size, hidden_size, step=True)
    return h.new_empty(h.shape)


@torch.library.custom_op("rnnx::rnn_cell", mutates_args=())
def rnn_cell(x: torch.Tensor, h: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, hidden_size: int, activation: str) -> torch.Tensor:
    _, y_h, _ = _run("rnn_" + activation, x.unsqueeze(0), w, r, b, None, h.unsqueeze(0), None, None, None, "forward")
    return y_h[0]


@rnn_cell.register_fake
def _(x, h, w, r, b, hidden_size, activation):
    check_shapes(x, w, None, h, None, hidden_size, hidden_size, step=True)
    return h.new_empty(h.shape)


def _step(op: Any, x: Any) -> Any:
    return op.Unsqueeze(x, op.Constant(value_ints=[0]))


def _unstep(op: Any, y: Any) -> Any:
    return op.Squeeze(y, op.Constant(value_ints=[0]))


def _lstm_cell_onnx(x, h, c, w, r, b, hidden_size: int):
    from onnxscript import opset17 as op

    _, y_h, y_c = op.LSTM(_step(op, x), w, r, b, None, _step(op, h), _step(op, c), hidden_size=hidden_size)
    return _unstep(op, y_h), _unstep(op, y_c)


def _gru_cell_onnx(x, h, w, r, b, hidden_size: int):
    from onnxscript import opset17 as op

    _, y_h = op.GRU(_step(op, x), w, r, b, None, _step(op, h), hidden_size=hidden_size, linear_before_reset=1)
    return _unstep(op, y_h)


def _rnn_cell_onnx(x, h, w, r, b, hidden_size: int, activation: str):
    from onnxscript import opset17 as op

    _, y_h = op.RNN(_step(op, x), w, r, b, None, _step(op, h), hidden_size=hidden_size, activations=[activation.capitalize()])
    return _unstep(op, y_h)


TRANSLATIONS.update(
    {
        torch.ops.rnnx.lstm_cell.default: _lstm_cell_onnx,
        torch.ops.rnnx.gru_cell.default: _gru_cell_onnx,
        torch.ops.rnnx.rnn_cell.default: _rnn_cell_onnx,
    }
)

#: What each op's first argument is: a whole sequence (T, B, F), its lengths the 5th
#: argument, or one step of a cell (B, F). The exporter names dimensions from this.
KINDS = {
    torch.ops.rnnx.lstm.default: "sequence",
    torch.ops.rnnx.gru.default: "sequence",
    torch.ops.rnnx.rnn.default: "sequence",
    torch.ops.rnnx.lstm_cell.default: "cell",
    torch.ops.rnnx.gru_cell.default: "cell",
    torch.ops.rnnx.rnn_cell.default: "cell",
}
