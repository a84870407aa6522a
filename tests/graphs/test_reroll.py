"""Re-rolling a loop over time that torch.onnx's TorchScript exporter unrolled: models in the
styles published code loops over time in, exported at one length, re-rolled into one ONNX
Loop and run by ONNX Runtime at lengths never traced, against torch; loops whose steps differ
are refused with the step and the difference."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from torch import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from rnnx.graphs.fuse_passes import run_fuse_passes  # noqa: E402
from rnnx.graphs.reroll import reroll  # noqa: E402

TRACED = 8
LENGTHS = (1, 5, 13, 17, TRACED)  # never traced but the last; 13 and 17 are prime


class LayerNormLSTM(nn.Module):
    """A layer-normalised LSTM cell written from Linear layers, chunk, sigmoid and tanh, with a
    LayerNorm on c, looped over ``x[:, t]``."""

    def __init__(self, n_in: int = 5, n_h: int = 7) -> None:
        super().__init__()
        self.x2h, self.h2h, self.ln_c, self.n_h = nn.Linear(n_in, 4 * n_h), nn.Linear(n_h, 4 * n_h), nn.LayerNorm(n_h), n_h

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = x.new_zeros(x.size(0), self.n_h)
        c = x.new_zeros(x.size(0), self.n_h)
        outs = []
        for t in range(x.size(1)):
            i, f, g, o = (self.x2h(x[:, t]) + self.h2h(h)).chunk(4, 1)
            c = self.ln_c(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g))
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        return torch.stack(outs, 1), h, c


class NormedCell(nn.Module):
    """An ``nn.LSTMCell`` whose h is layer-normalised before it is fed back."""

    def __init__(self, n_in: int = 5, n_h: int = 7) -> None:
        super().__init__()
        self.cell, self.ln, self.n_h = nn.LSTMCell(n_in, n_h), nn.LayerNorm(n_h), n_h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.size(0), self.n_h)
        c = x.new_zeros(x.size(0), self.n_h)
        outs = []
        for t in range(x.size(1)):
            h, c = self.cell(x[:, t], (h, c))
            h = self.ln(h)
            outs.append(h)
        return torch.stack(outs, 1)


class AttentionDecoder(nn.Module):
    """A teacher-forced decoder (Luong style): the embedding of ``trg[:, t]`` joined with the
    last attentional vector (input feeding), an LSTMCell, dot attention over the encoder's
    outputs, the outputs stacked."""

    def __init__(self, vocab: int = 11, emb: int = 6, hid: int = 8) -> None:
        super().__init__()
        self.emb, self.cell = nn.Embedding(vocab, emb), nn.LSTMCell(emb + hid, hid)
        self.attn_out, self.out, self.hid = nn.Linear(2 * hid, hid), nn.Linear(hid, vocab), hid

    def forward(self, trg: torch.Tensor, enc: torch.Tensor) -> torch.Tensor:
        h, c, feed = (enc.new_zeros(trg.size(0), self.hid) for _ in range(3))
        outs = []
        for t in range(trg.size(1)):
            h, c = self.cell(torch.cat([self.emb(trg[:, t]), feed], 1), (h, c))
            a = torch.softmax(torch.bmm(enc, h.unsqueeze(2)).squeeze(2), 1)
            ctx = torch.bmm(a.unsqueeze(1), enc).squeeze(1)
            feed = torch.tanh(self.attn_out(torch.cat([h, ctx], 1)))
            outs.append(self.out(feed))
        return torch.stack(outs, 1)


class MovingAverageGRU(nn.Module):
    """An exponential moving average over frames, ``m = a*m + (1-a)*x[:, t]``, before a GRU."""

    def __init__(self, n_in: int = 4, n_h: int = 6, a: float = 0.9) -> None:
        super().__init__()
        self.a, self.gru = a, nn.GRU(n_in, n_h, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = torch.zeros_like(x[:, 0])
        ms = []
        for t in range(x.size(1)):
            m = self.a * m + (1 - self.a) * x[:, t]
            ms.append(m)
        return self.gru(torch.stack(ms, 1))


class MovingAverage(MovingAverageGRU):
    """The moving average alone: ONNX Runtime has no float64 GRU (and ONNX's reference
    evaluator stacks a Loop's scan outputs with np.vstack, which joins 2-D steps end to end)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        m, ms = torch.zeros_like(x[:, 0]), []
        for t in range(x.size(1)):
            m = self.a * m + (1 - self.a) * x[:, t]
            ms.append(m)
        return torch.stack(ms, 1)


class BranchOnStep(nn.Module):
    """Odd steps use tanh, even ones relu: not one step repeated."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5 + 7, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, outs = x.new_zeros(x.size(0), 7), []
        for t in range(x.size(1)):
            z = self.lin(torch.cat([x[:, t], h], 1))
            h = torch.tanh(z) if t % 2 else torch.relu(z)
            outs.append(h)
        return torch.stack(outs, 1)


class WeightByStep(nn.Module):
    """A weight chosen by the step index."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.randn(12, 7)) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, outs = x.new_zeros(x.size(0), 7), []
        for t in range(x.size(1)):
            h = torch.tanh(torch.cat([x[:, t], h], 1) @ self.w[t % 2])
            outs.append(h)
        return torch.stack(outs, 1)


def _inputs(style: type, batch: int, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1000 * batch + length)
    if style is AttentionDecoder:
        return torch.randint(0, 11, (batch, length), generator=g), torch.randn(batch, 5, 8, generator=g, dtype=dtype)
    return (torch.randn(batch, length, 4 if issubclass(style, MovingAverageGRU) else 5, generator=g, dtype=dtype),)


def _export(model: nn.Module, args: tuple[torch.Tensor, ...]) -> object:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer warns that the loop is unrolled: that is the point
        torch.onnx.export(model, args, f, dynamo=False)
    return onnx.load_from_string(f.getvalue())


def _max_errors(proto: object, model: nn.Module, style: type, batch: int, dtype: torch.dtype) -> dict[int, float]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    errors = {}
    for length in LENGTHS:
        args = _inputs(style, batch, length, dtype)
        with torch.no_grad():
            want = model(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == tuple(w.shape), (length, g.shape, tuple(w.shape))
        errors[length] = max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want))
    return errors


STYLES = [LayerNormLSTM, NormedCell, AttentionDecoder, MovingAverageGRU]


def _rerolled(style: type, batch: int, dtype: torch.dtype, fuse_first: bool = False) -> tuple[nn.Module, object, dict]:
    torch.manual_seed(0)
    model = style().to(dtype).eval()
    proto = _export(model, _inputs(style, batch, TRACED, dtype))
    if fuse_first:  # as rnnx fuse does: cells made native first, re-rolled where no chain fused
        proto, _ = run_fuse_passes(proto)
    result = reroll(proto)
    assert not result.left_alone, result.left_alone
    assert len(result.rewritten) == 1, result.rewritten
    onnx.checker.check_model(proto, full_check=True)
    loops = [n for n in proto.graph.node if n.op_type == "Loop"]
    assert len(loops) == 1
    assert not [n for n in proto.graph.node if n.op_type == "Gather" and n.input[0] == proto.graph.input[0].name], "a slice is left unrolled"
    return model, proto, result.rewritten[0]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.__name__)
def test_rerolled_loop_runs_at_lengths_never_traced(style: type, batch: int) -> None:
    model, proto, info = _rerolled(style, batch, torch.float32)
    assert info["steps"] == TRACED and info["dynamic_seq"]
    time_axis = proto.graph.input[0].type.tensor_type.shape.dim[1]
    assert time_axis.dim_param == "seq" and not time_axis.HasField("dim_value")
    errors = _max_errors(proto, model, style, batch, torch.float32)
    assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize("style", [LayerNormLSTM, NormedCell, AttentionDecoder, MovingAverage], ids=lambda s: s.__name__)
def test_rerolled_loop_in_float64_matches_torch_float64(style: type) -> None:
    model, proto, _ = _rerolled(style, 3, torch.float64)
    errors = _max_errors(proto, model, style, 3, torch.float64)
    # ONNX stores LayerNormalization's epsilon as a float32 (1e-5 is 9.9999997e-06): about 1e-12 apart from torch's
    assert max(errors.values()) < 1e-10, errors


@pytest.mark.parametrize("style", [NormedCell, LayerNormLSTM], ids=lambda s: s.__name__)
def test_reroll_after_the_fuse_passes_keeps_their_native_steps(style: type) -> None:
    model, proto, info = _rerolled(style, 3, torch.float32, fuse_first=True)
    if style is NormedCell:  # each LSTMCell step became a native LSTM node; the Loop runs one
        assert "LSTM" in info["body"]
    errors = _max_errors(proto, model, style, 3, torch.float32)
    assert max(errors.values()) < 1e-5, errors


def test_a_chain_fuse_steps_fuses_is_not_rerolled() -> None:
    """A plain stepped LSTMCell is one native node over the sequence; nothing is left to re-roll."""

    class Stepped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = nn.LSTMCell(5, 7)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = c = x.new_zeros(x.size(0), 7)
            outs = []
            for t in range(x.size(1)):
                h, c = self.cell(x[:, t], (h, c))
                outs.append(h)
            return torch.stack(outs, 1)

    proto, passes = run_fuse_passes(_export(Stepped().eval(), (torch.randn(2, TRACED, 5),)))
    assert passes.chains.rewritten
    assert not reroll(proto).rewritten


@pytest.mark.parametrize(("style", "says"), [
    (BranchOnStep, "step 2 differs from step 1: it computes Relu"),
    (WeightByStep, "reads initializer 'w.0' where step 1's MatMul"),
], ids=["branch", "weight"])
def test_steps_that_differ_are_refused_by_step_and_difference(style: type, says: str) -> None:
    torch.manual_seed(0)
    proto = _export(style().eval(), (torch.randn(2, TRACED, 5),))
    before = proto.SerializeToString()
    result = reroll(proto)
    assert not result.rewritten
    (declined,) = result.left_alone
    assert declined.rule == "reroll.same_step"
    assert says in declined.reason, declined.reason
    assert ("branch that depends on the step" if style is BranchOnStep else "a weight chosen by the step") in declined.reason
    assert proto.SerializeToString() == before  # a refused loop is left as it was


def test_a_value_read_after_the_loop_from_one_step_is_refused() -> None:
    class ReadsStepTwo(LayerNormLSTM):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            h, c, outs = x.new_zeros(x.size(0), 7), x.new_zeros(x.size(0), 7), []
            for t in range(x.size(1)):
                i, f, g, o = (self.x2h(x[:, t]) + self.h2h(h)).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            return torch.stack(outs, 1), outs[2] * 2

    result = reroll(_export(ReadsStepTwo().eval(), (torch.randn(2, TRACED, 5),)))
    assert not result.rewritten
    assert result.left_alone[0].rule == "reroll.same_step" and "step 2 computes Mul" in result.left_alone[0].reason
