"""Re-rolling loops that read a second sequence beside x: a per-step reset driven by an input
(``episode_starts``), a mask that holds a 2-layer stack's state on padded steps, a time-step
input of a wired continuous-time cell, and a running average that starts from the first frame.
Each model is exported by torch.onnx's TorchScript exporter at one length, re-rolled into one
ONNX Loop, and run by ONNX Runtime at lengths never traced against torch, on inputs where
episodes start in the middle of the window."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from torch import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from rnnx.graphs.reroll import reroll  # noqa: E402

TRACED = 8
LENGTHS = (1, 5, 13)  # never traced; 13 is prime


class ResetByProduct(nn.Module):
    """A recurrent policy: an LSTMCell whose state is zeroed where ``starts`` is 1,
    ``h * (1 - starts[:, t])``, then a head on every step."""

    def __init__(self, n_obs: int = 4, n_h: int = 6) -> None:
        super().__init__()
        self.cell, self.head, self.n_h = nn.LSTMCell(n_obs, n_h), nn.Linear(n_h, 3), n_h

    def forward(self, obs: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        h = obs.new_zeros(obs.size(0), self.n_h)
        c = h
        outs = []
        for t in range(obs.size(1)):
            keep = 1.0 - starts[:, t, None]
            h, c = self.cell(obs[:, t], (h * keep, c * keep))
            outs.append(self.head(h))
        return torch.stack(outs, 1)


class ResetByWhere(nn.Module):
    """A GRUCell policy that restarts from a learned state where ``starts[:, t] > 0``
    (``torch.where``), returning every step's state and the last one."""

    def __init__(self, n_obs: int = 4, n_h: int = 5) -> None:
        super().__init__()
        self.cell, self.h0 = nn.GRUCell(n_obs, n_h), nn.Parameter(torch.randn(n_h) * 0.5)

    def forward(self, obs: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.h0.expand(obs.size(0), -1)
        outs = []
        for t in range(obs.size(1)):
            h = torch.where(starts[:, t, None] > 0, self.h0.expand_as(h), h)
            h = self.cell(obs[:, t], h)
            outs.append(h)
        return torch.stack(outs, 1), h


class MaskedStack(nn.Module):
    """A pure-Python 2-layer LSTM, layer by layer inside each step, whose mask holds both
    layers' states on padded steps with ``torch.where`` (as RL libraries ship for policies)."""

    def __init__(self, n_in: int = 4, n_h: int = 5) -> None:
        super().__init__()
        self.cells, self.n_h = nn.ModuleList([nn.LSTMCell(n_in, n_h), nn.LSTMCell(n_h, n_h)]), n_h

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hs = [x.new_zeros(x.size(0), self.n_h) for _ in self.cells]
        cs = [x.new_zeros(x.size(0), self.n_h) for _ in self.cells]
        outs = []
        for t in range(x.size(1)):
            inp, valid = x[:, t], mask[:, t, None] > 0
            for k, cell in enumerate(self.cells):
                h, c = cell(inp, (hs[k], cs[k]))
                hs[k], cs[k] = torch.where(valid, h, hs[k]), torch.where(valid, c, cs[k])
                inp = hs[k]
            outs.append(inp)
        return torch.stack(outs, 1)


class WiredCell(nn.Module):
    """A closed-form continuous-time cell whose two heads are masked by a sparse wiring, its time
    gate driven by each step's elapsed time ``ts[:, t]``, with an LSTMCell for memory."""

    def __init__(self, n_in: int = 4, units: int = 6) -> None:
        super().__init__()
        self.memory = nn.LSTMCell(n_in, units)
        self.ff1, self.ff2 = nn.Linear(n_in + units, units), nn.Linear(n_in + units, units)
        self.time_a, self.time_b = nn.Linear(n_in + units, units), nn.Linear(n_in + units, units)
        wiring = (torch.rand(units, n_in + units, generator=torch.Generator().manual_seed(5)) > 0.5).float()
        self.register_buffer("wiring", wiring)
        self.units = units

    def forward(self, x: torch.Tensor, ts: torch.Tensor) -> torch.Tensor:
        h = c = x.new_zeros(x.size(0), self.units)
        outs = []
        for t in range(x.size(1)):
            h_mem, c = self.memory(x[:, t], (h, c))
            z = torch.cat([x[:, t], h_mem], 1)
            f1 = torch.tanh(nn.functional.linear(z, self.ff1.weight * self.wiring, self.ff1.bias))
            f2 = torch.tanh(nn.functional.linear(z, self.ff2.weight * self.wiring, self.ff2.bias))
            gate = torch.sigmoid(self.time_a(z) * ts[:, t, None] + self.time_b(z))
            h = f1 * (1 - gate) + gate * f2
            outs.append(h)
        return torch.stack(outs, 1)


class AverageFromFirst(nn.Module):
    """An exponential moving average that starts from the first frame (``m = x[:, 0]``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, ms = x[:, 0], []
        for t in range(x.size(1)):
            m = 0.75 * m + 0.25 * torch.tanh(x[:, t])
            ms.append(m)
        return torch.stack(ms, 1)


STYLES = [ResetByProduct, ResetByWhere, MaskedStack, WiredCell, AverageFromFirst]
SECOND = {ResetByProduct: "starts", ResetByWhere: "starts", MaskedStack: "mask", WiredCell: "ts"}


def _inputs(style: type, batch: int, length: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(100 * batch + length)
    x = torch.randn(batch, length, 4, generator=g)
    if style not in SECOND:
        return (x,)
    if style is WiredCell:
        return x, torch.rand(batch, length, generator=g) + 0.25
    flags = (torch.rand(batch, length, generator=g) < 0.3).float()
    if style is MaskedStack:  # valid steps, then padding where a row ends early
        ends = torch.tensor([[length, max(length - 2, 1), max(length // 2, 1)][b % 3] for b in range(batch)])
        return x, (torch.arange(length)[None] < ends[:, None]).float()
    flags[:, 0] = 1.0
    flags[0, length // 2] = 1.0  # an episode starting in the middle of the window
    return x, flags


def _export(model: nn.Module, args: tuple[torch.Tensor, ...]) -> object:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer warns that the loop is unrolled: that is the point
        torch.onnx.export(model, args, f, dynamo=False)
    return onnx.load_from_string(f.getvalue())


def _run(style: type, batch: int) -> tuple[nn.Module, object, dict]:
    torch.manual_seed(0)
    model = style().eval()
    proto = _export(model, _inputs(style, batch, TRACED))
    result = reroll(proto)
    assert not result.left_alone, result.left_alone
    (info,) = result.rewritten
    onnx.checker.check_model(proto, full_check=True)
    assert [n.op_type for n in proto.graph.node].count("Loop") == 1
    return model, proto, info


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.__name__)
def test_a_loop_reading_a_second_sequence_runs_at_lengths_never_traced(style: type, batch: int) -> None:
    model, proto, info = _run(style, batch)
    assert info["dynamic_seq"] and len(info["sources"]) == (2 if style in SECOND else 1)
    for vi in proto.graph.input:  # every sequence the steps slice takes the one length
        assert vi.type.tensor_type.shape.dim[1].dim_param == "seq", vi
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for length in LENGTHS:
        args = _inputs(style, batch, length)
        with torch.no_grad():
            want = model(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
        for g, w in zip(got, want, strict=True):
            assert g.shape == tuple(w.shape), (length, g.shape, tuple(w.shape))
            assert np.abs(g - w.numpy()).max() < 1e-5, (length, float(np.abs(g - w.numpy()).max()))


@pytest.mark.parametrize("style", [ResetByProduct, ResetByWhere], ids=lambda s: s.__name__)
def test_the_reset_is_computed_from_the_input_not_from_the_traced_starts(style: type) -> None:
    """Starts the trace never saw (none, and one at every step) move the file's outputs as they move torch's."""
    model, proto, _ = _run(style, 2)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    obs, _ = _inputs(style, 2, 11)
    answers = []
    for starts in (torch.zeros(2, 11), torch.ones(2, 11), (torch.arange(11) % 4 == 3).float().expand(2, 11)):
        with torch.no_grad():
            want = model(obs, starts)
        want = want[0] if isinstance(want, tuple) else want
        names = [i.name for i in session.get_inputs()]
        got = session.run(None, dict(zip(names, (obs.numpy(), starts.numpy()))))[0]
        assert np.abs(got - want.numpy()).max() < 1e-5
        answers.append(got)
    assert np.abs(answers[0] - answers[1]).max() > 1e-3 and np.abs(answers[0] - answers[2]).max() > 1e-3  # the resets matter
