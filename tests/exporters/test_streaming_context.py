"""Streaming across convolutions: each causal ``nn.Conv1d`` / ``nn.Conv2d`` along time keeps a
cache of its left context, strides set the chunk length's multiple, and whatever reads
frames after t is refused, naming the module.

The models are written the way streaming projects write their front ends: an STFT-like
strided conv on raw samples padded with F.pad, a TCN block padded on both sides and chomped,
a ``CausalConv1d`` subclass that pads in its own forward under weight norm, and a speech
enhancer's Conv2d over (time, frequency) with ``nn.ZeroPad2d`` padding time on the left only.
Each is exported from forward(x) alone, then run with rnnx.StreamingSession chunk by chunk
against torch on the whole sequence, at batch 1 and 2. Planted mistakes (a cache one frame
short, an LSTM's h and c paired the wrong way round) must fail the export's own chunked check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
nn = torch.nn
F = torch.nn.functional

import rnnx  # noqa: E402
from rnnx.exporters import (
    stream_context,  # noqa: E402
    stream_plan,  # noqa: E402
)


class StftVAD(nn.Module):
    """Raw samples -> STFT-like conv (window 8, hop 4, padded so frame j ends at sample 4j+3)
    -> a dilated TCN block padded both sides and chomped -> LSTM -> speech probability."""

    def __init__(self) -> None:
        super().__init__()
        self.stft = nn.Conv1d(1, 12, kernel_size=8, stride=4, bias=False)
        self.tcn = nn.Conv1d(12, 12, kernel_size=3, dilation=2, padding=4)
        self.rnn = nn.LSTM(12, 16, batch_first=True)
        self.head = nn.Linear(16, 1)

    def forward(self, wav: Any) -> Any:
        x = torch.log1p(self.stft(F.pad(wav.unsqueeze(1), (4, 0))).abs())
        x = torch.relu(self.tcn(x)[..., :-4]) + x  # chomp: the frames the right padding made
        y, _ = self.rnn(x.transpose(1, 2))
        return torch.sigmoid(self.head(y)).squeeze(-1)


class CausalConv1d(nn.Conv1d):
    """As keyword spotters and WaveNet-style code write it: the left padding inside forward."""

    def forward(self, x: Any) -> Any:
        return super().forward(F.pad(x, ((self.kernel_size[0] - 1) * self.dilation[0], 0)))


class KeywordSpotter(nn.Module):
    """Log-mels (time first) -> two causal convs under weight norm -> GRU -> keyword logits per frame."""

    def __init__(self, mels: int = 10, keywords: int = 4) -> None:
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.conv1 = wn(CausalConv1d(mels, 16, kernel_size=3))
        self.conv2 = wn(CausalConv1d(16, 16, kernel_size=3, dilation=2))
        self.gru = nn.GRU(16, 20)
        self.out = nn.Linear(20, keywords)

    def forward(self, mels: Any) -> Any:  # (frames, batch, mels)
        x = mels.permute(1, 2, 0)
        x = F.gelu(self.conv2(F.gelu(self.conv1(x))))
        y, _ = self.gru(x.permute(2, 0, 1))
        return self.out(y)


class Enhancer(nn.Module):
    """A CRN-style speech enhancer: spectra (batch, 1, time, freq) -> Conv2d with time padded on
    the left only -> GRU over time -> a mask on the input spectrum."""

    def __init__(self, bins: int = 9) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d((1, 1, 1, 0))  # frequency both sides, time left only
        self.conv = nn.Conv2d(1, 4, kernel_size=(2, 3))
        self.gru = nn.GRU(4 * bins, 24, batch_first=True)
        self.mask = nn.Linear(24, bins)

    def forward(self, spec: Any) -> Any:
        x = F.elu(self.conv(self.pad(spec)))  # (b, 4, t, f)
        b, c, t, f = x.shape
        y, _ = self.gru(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        return spec.squeeze(1) * torch.sigmoid(self.mask(y))


# name: (model, example at batch 2, time axis of the input, frames per chunk step)
MODELS = {
    "stft_vad": (StftVAD, lambda b, t: torch.randn(b, t), 1, 4),
    "keyword_spotter": (KeywordSpotter, lambda b, t: torch.randn(t, b, 10), 0, 1),
    "enhancer": (Enhancer, lambda b, t: torch.randn(b, 1, t, 9).abs(), 2, 1),
}
FRAMES = 24  # samples for the VAD (6 hops), frames for the others


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path, Any]]:
    out = {}
    for name, (cls, make, _, _) in MODELS.items():
        torch.manual_seed(3)
        model = cls().eval()
        path = tmp_path_factory.mktemp("stream") / f"{name}.onnx"
        report = rnnx.export(model, (make(2, 16),), path, streaming=True)
        out[name] = (model, path, report)
    return out


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("batch", [1, 2])
def test_chunks_through_convolutions_match_the_whole_sequence(exported: dict[str, Any], name: str, batch: int) -> None:
    model, path, _ = exported[name]
    _, make, axis, step = MODELS[name]
    torch.manual_seed(10 + batch)
    x = make(batch, FRAMES)
    with torch.no_grad():
        whole = model(x).numpy()
    out_axis = 1 if name != "keyword_spotter" else 0
    for chunk in (step, 3 * step, FRAMES):
        session = rnnx.StreamingSession(path)
        pieces = [session.process(x.narrow(axis, s, min(chunk, FRAMES - s)).numpy())["output"] for s in range(0, FRAMES, chunk)]
        got = np.concatenate(pieces, axis=out_axis)
        assert got.shape == whole.shape, (name, chunk)
        np.testing.assert_allclose(got, whole, atol=1e-5, rtol=1e-4, err_msg=f"{name} in chunks of {chunk}")


def test_each_convolution_along_time_keeps_its_left_context(exported: dict[str, Any]) -> None:
    records = {}
    for name, (_, path, _) in exported.items():
        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        records[name] = json.loads(meta["rnnx.streaming"])
    caches = {name: {s["module"]: s["dims"] for s in r["states"] if s["input"].endswith(".cache_in")} for name, r in records.items()}
    assert caches == {
        "stft_vad": {"stft": ["batch", 1, 4], "tcn": ["batch", 12, 4]},  # F.pad's 4 samples; the TCN's own padding of 4
        "keyword_spotter": {"conv1": ["batch", 10, 2], "conv2": ["batch", 16, 4]},  # (k - 1) * dilation, padded in forward
        "enhancer": {"conv": ["batch", 1, 1, 11]},  # one frame of time, the frequency axis as ZeroPad2d widened it
    }
    assert {name: r["chunk_multiple"] for name, r in records.items()} == {"stft_vad": 4, "keyword_spotter": 1, "enhancer": 1}


def test_a_chunk_the_strides_do_not_allow_is_refused(exported: dict[str, Any]) -> None:
    _, path, _ = exported["stft_vad"]
    session = rnnx.StreamingSession(path)
    with pytest.raises(rnnx.RNNXError, match=r"expected a chunk of a multiple of 4 frames .*found 6"):
        session.process(np.zeros((1, 6), np.float32))
    assert session.process(np.zeros((1, 8), np.float32))["output"].shape == (1, 2)


class Centered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(6, 6, 3, padding=1)
        self.rnn = nn.GRU(6, 6, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(self.conv(x.transpose(1, 2)).transpose(1, 2))[0]


class Valid(Centered):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(6, 6, 3)


class Reflect(Centered):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(6, 6, 3, padding=2, padding_mode="replicate")

    def forward(self, x: Any) -> Any:
        return self.rnn(self.conv(x.transpose(1, 2))[..., :-2].transpose(1, 2))[0]


class Normalized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.InstanceNorm1d(6)
        self.rnn = nn.GRU(6, 6, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(self.norm(x.transpose(1, 2)).transpose(1, 2))[0]


class Attended(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(6, 6, batch_first=True)
        self.attn = nn.MultiheadAttention(6, 2, batch_first=True)

    def forward(self, x: Any) -> Any:
        y = self.rnn(x)[0]
        return self.attn(y, y, y)[0]


class MeanRemoved(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(6, 6, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(x - x.mean(1, keepdim=True))[0]


class Pooled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(6, 6, batch_first=True)
        self.pool = nn.AdaptiveAvgPool1d(1)

    def forward(self, x: Any) -> Any:
        return self.pool(self.rnn(x)[0].transpose(1, 2)).squeeze(-1)


class Upsampled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(6, 6, batch_first=True)
        self.up = nn.ConvTranspose1d(6, 6, kernel_size=2, stride=2)

    def forward(self, x: Any) -> Any:
        return self.up(self.rnn(x)[0].transpose(1, 2))


@pytest.mark.parametrize("model, fragment", [
    (Centered, "found conv (Conv1d) whose output at frame t changes with frames after t (its window reaches past frame t"),
    (Valid, "expected conv's windows of 3 frames, 1 apart, to be padded on the left or not to overlap, found neither"),
    (Reflect, "expected conv to pad with zeros, found padding_mode='replicate'"),
    (Normalized, "found norm (InstanceNorm1d) whose output at frame t changes with frames after t (a normalization over time"),
    (Attended, "found attn (MultiheadAttention) whose output at frame t changes with frames after t (attention over the whole sequence"),
    (MeanRemoved, "found rnn's input changing at frame t with frames after t, made by the model's forward before calling rnn"),
    (Pooled, "found pool (AdaptiveAvgPool1d) reducing it"),
    (Upsampled, "found up (a ConvTranspose1d along time"),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_what_reads_later_frames_is_refused_naming_the_module(tmp_path: Path, model: type, fragment: str) -> None:
    torch.manual_seed(0)
    with pytest.raises(rnnx.RNNXError) as refused:
        rnnx.export(model().eval(), (torch.randn(2, 12, 6),), tmp_path / "m.onnx", streaming=True)
    assert fragment in str(refused.value)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "m.onnx").exists()


def _fails_the_chunked_check(tmp_path: Path, model: Any, x: Any) -> list[str]:
    with pytest.raises(rnnx.ExportCheckFailed) as failed:
        rnnx.export(model, (x,), tmp_path / "m.onnx", streaming=True)
    assert not (tmp_path / "m.onnx").exists()
    cases = failed.value.report.check.cases
    assert all(c.passed for c in cases if not c.name.startswith("streamed"))  # the whole-sequence runs are right
    return [c.name for c in cases if not c.passed]


def test_a_cache_one_frame_short_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache keeps the right number of frames, ending one frame early: each chunk's first
    output reads a frame one step stale."""
    def one_short(joined: Any, spec: Any) -> Any:
        t = spec.axis
        return joined.narrow(t, joined.shape[t] - spec.frames - 1, spec.frames)

    monkeypatch.setattr(stream_context, "kept", one_short)
    torch.manual_seed(1)
    failed = _fails_the_chunked_check(tmp_path, KeywordSpotter().eval(), torch.randn(16, 2, 10))
    assert "streamed in chunks of 1 frame, batch 1" in failed and "streamed in chunks of 7 frames, batch 3" in failed
    assert "streamed whole, as one chunk, batch 1" not in failed


def test_two_states_paired_wrongly_fail_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The LSTM's h and c have one shape; a runtime that pairs them the wrong way round (h_out fed
    to c_in, c_out to h_in) runs without complaint and must fail the chunked check."""
    def crossed(out: Any, record: Any) -> dict[str, Any]:
        carried = {s.input: out[s.output] for s in record.states}
        carried["rnn.h_in"], carried["rnn.c_in"] = carried["rnn.c_in"], carried["rnn.h_in"]
        return carried

    monkeypatch.setattr(stream_plan, "_carried", crossed)
    torch.manual_seed(1)
    failed = _fails_the_chunked_check(tmp_path, StftVAD().eval(), torch.randn(2, 16))
    assert "streamed in chunks of 4 frames, batch 1" in failed and "streamed in chunks of 28 frames, batch 3" in failed
    assert "streamed whole, as one chunk, batch 1" not in failed  # one chunk: nothing carried


class ClampedSpotter(KeywordSpotter):
    """A clamp with an int and a float bound, which torch.onnx's dynamo route has no overload
    for: the TorchScript route makes the file, and leaves the output's frames unnamed."""

    def __init__(self) -> None:
        super().__init__()
        self.fb = nn.Parameter(torch.rand(10, 10))

    def forward(self, mels: Any) -> Any:
        return super().forward(mels @ torch.clamp(self.fb, 0, 1.0))


def test_caches_through_the_torchscript_route(tmp_path: Path) -> None:
    from rnnx.exporters.torchscript_route import ROUTE

    torch.manual_seed(2)
    model = ClampedSpotter().eval()
    report = rnnx.export(model, (torch.randn(16, 2, 10),), tmp_path / "k.onnx", streaming=True)
    assert report.route == ROUTE and all(c.passed for c in report.check.cases if c.name.startswith("streamed"))
    x = torch.randn(FRAMES, 1, 10, generator=torch.Generator().manual_seed(4))
    session = rnnx.StreamingSession(tmp_path / "k.onnx")
    got = np.concatenate([session.process(x[t:t + 5].numpy())["output"] for t in range(0, FRAMES, 5)], axis=0)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5, rtol=1e-4)


def test_torch_onnx_dynamic_axes_keep_the_caches_batch_dynamic(tmp_path: Path) -> None:
    torch.manual_seed(5)
    model = StftVAD().eval()
    rnnx.export(model, (torch.randn(2, 16),), tmp_path / "v.onnx", streaming=True, dynamic_axes={"wav": {0: "batch", 1: "samples"}})
    meta = json.loads({p.key: p.value for p in onnx.load(str(tmp_path / "v.onnx")).metadata_props}["rnnx.streaming"])
    assert {s["input"]: s["dims"] for s in meta["states"] if "cache" in s["input"]} == {"stft.cache_in": ["batch", 1, 4], "tcn.cache_in": ["batch", 12, 4]}
    x = torch.randn(3, FRAMES, generator=torch.Generator().manual_seed(6))
    session = rnnx.StreamingSession(tmp_path / "v.onnx")
    got = np.concatenate([session.process(x[:, t:t + 8].numpy())["output"] for t in range(0, FRAMES, 8)], axis=1)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5, rtol=1e-4)


class StepLoop(nn.Module):
    """A cell stepped over the frames as online recognisers write it: zeros made in forward,
    ``x[:, t]`` per step, the states stacked and a head on the stack."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(6, 10)
        self.head = nn.Linear(10, 3)

    def forward(self, x: Any) -> Any:  # (batch, frames, 6)
        h = x.new_zeros(x.shape[0], 10)
        c = x.new_zeros(x.shape[0], 10)
        outs = []
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return self.head(torch.stack(outs, 1))


class UnbindLoop(nn.Module):
    """A GRU cell over ``x.unbind(0)`` (time first), starting from None."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(6, 12)

    def forward(self, x: Any) -> Any:
        h = None
        outs = []
        for frame in x.unbind(0):
            h = self.cell(frame, h)
            outs.append(h)
        return torch.stack(outs)


@pytest.mark.parametrize("cls, time_axis", [(StepLoop, 1), (UnbindLoop, 0)], ids=["lstm-cell-range", "gru-cell-unbind"])
def test_a_cell_stepped_in_python_carries_its_state_across_chunks(tmp_path: Path, cls: type, time_axis: int) -> None:
    torch.manual_seed(7)
    model = cls().eval()
    shape = (2, 12, 6) if time_axis == 1 else (12, 2, 6)
    report = rnnx.export(model, (torch.randn(*shape),), tmp_path / "c.onnx", streaming=True)
    assert "cell.h_in -> cell.h_out" in " ".join(report.notes)
    assert report.fused and report.fused[0]["dynamic_seq"]  # the steps fused into one native node, any chunk length
    for batch in (1, 3):
        x = torch.randn(*((batch, FRAMES, 6) if time_axis == 1 else (FRAMES, batch, 6)), generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            whole = model(x).numpy()
        session = rnnx.StreamingSession(tmp_path / "c.onnx")
        got = np.concatenate([session.process(x.narrow(time_axis, t, min(5, FRAMES - t)).numpy())["output"] for t in range(0, FRAMES, 5)],
                             axis=time_axis)
        np.testing.assert_allclose(got, whole, atol=1e-5, rtol=1e-4)


class OnlineNorm(nn.Module):
    """Online mean normalization before a GRU: a cumulative sum over the frames divided by a
    frame counter, as streaming front ends normalize without seeing the future."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(5, 8, batch_first=True)

    def forward(self, x: Any) -> Any:
        count = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
        return self.rnn(x - torch.cumsum(x, dim=1) / count)[0]


def test_a_running_mean_carries_its_sum_and_its_frame_count(tmp_path: Path) -> None:
    torch.manual_seed(4)
    model = OnlineNorm().eval()
    report = rnnx.export(model, (torch.randn(2, 12, 5),), tmp_path / "n.onnx", streaming=True)
    assert "frames0_in -> frames0_out, cumsum0_in -> cumsum0_out" in " ".join(report.notes)
    for batch in (1, 2):
        x = torch.randn(batch, FRAMES, 5, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            whole = model(x).numpy()
        session = rnnx.StreamingSession(tmp_path / "n.onnx")
        got = np.concatenate([session.process(x[:, t:t + 5].numpy())["output"] for t in range(0, FRAMES, 5)], axis=1)
        np.testing.assert_allclose(got, whole, atol=1e-5, rtol=1e-4)


class RunningProduct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(5, 8, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(torch.cumprod(torch.sigmoid(x), 1))[0]


class FunctionalConv(nn.Module):
    """A smoothing filter written with F.conv1d in forward (no module to cache): its F.pad's
    zeros before the frames are carried as a look-back."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("taps", torch.tensor([[[0.25, 0.25, 0.5]]]).repeat(5, 1, 1))
        self.rnn = nn.GRU(5, 8, batch_first=True)

    def forward(self, x: Any) -> Any:
        smooth = F.conv1d(F.pad(x.transpose(1, 2), (2, 0)), self.taps, groups=5)
        return self.rnn(smooth.transpose(1, 2))[0]


class ConcatenatedPrevious(nn.Module):
    """The previous frame made by concatenating zeros before the frames: right on the whole
    sequence, wrong in chunks, and nothing rnnx carries."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(10, 8, batch_first=True)

    def forward(self, x: Any) -> Any:
        previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)
        return self.rnn(torch.cat([x, x - previous], -1))[0]


def test_running_operations_rnnx_does_not_carry_are_refused_or_named(tmp_path: Path) -> None:
    torch.manual_seed(0)
    with pytest.raises(rnnx.RNNXError, match=r"found cumprod along time in the model's forward, at test_streaming_context.py:\d+ \(.*cumprod.*\); carry it yourself"):
        rnnx.export(RunningProduct().eval(), (torch.randn(2, 12, 5),), tmp_path / "p.onnx", streaming=True)
    with pytest.raises(rnnx.ExportCheckFailed) as failed:
        rnnx.export(ConcatenatedPrevious().eval(), (torch.randn(2, 12, 5),), tmp_path / "f.onnx", streaming=True)
    message = str(failed.value)
    assert "the whole sequence matches but chunks do not" in message and "\n" not in message
    # the operation where the chunks part: the Concat of the zeros and the frames before
    assert "the first operation whose chunked output differs from the whole sequence's is Concat" in message, message
    assert not (tmp_path / "p.onnx").exists() and not (tmp_path / "f.onnx").exists()


def test_a_functional_convolution_on_padded_frames_streams(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = FunctionalConv().eval()
    report = rnnx.export(model, (torch.randn(2, 12, 5),), tmp_path / "f.onnx", streaming=True)
    assert report.passed and "lookback0_in -> lookback0_out" in str(report), str(report)
    session = rnnx.StreamingSession(tmp_path / "f.onnx")
    x = torch.randn(1, 15, 5, generator=torch.Generator().manual_seed(3))
    got = np.concatenate([session.process(x[:, t:t + 2].numpy())["output"] for t in range(0, 15, 2)], axis=1)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5, rtol=1e-4)


def test_another_authors_forecaster_streams_step_by_step(tmp_path: Path) -> None:
    """deepecho's PARNet (an autoregressive time-series model: Linear, GRU over time first,
    Linear, with a per-series context fed whole each chunk), as the package builds it,
    exported from forward(x, c) and stepped one frame at a time as a generator runs it."""
    pytest.importorskip("deepecho")
    from deepecho.models.par import PARNet

    torch.manual_seed(0)
    model = PARNet(data_size=5, context_size=3, hidden_size=8).eval()
    rnnx.export(model, (torch.randn(12, 2, 5), torch.randn(2, 3)), tmp_path / "par.onnx", streaming=True)
    for batch in (1, 3):
        gen = torch.Generator().manual_seed(batch)
        x, c = torch.randn(FRAMES, batch, 5, generator=gen), torch.randn(batch, 3, generator=gen)
        session = rnnx.StreamingSession(tmp_path / "par.onnx")
        got = np.concatenate([session.process(x[t:t + 1].numpy(), c=c.numpy())["output"] for t in range(FRAMES)], axis=0)
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x, c).numpy(), atol=1e-5, rtol=1e-4)


STRIDED_CODE = """
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.frames = nn.Conv1d(1, 8, kernel_size=4, stride=2)
        self.rnn = nn.GRU(8, 8, batch_first=True)

    def forward(self, wav):
        x = torch.relu(self.frames(F.pad(wav.unsqueeze(1), (2, 0))))
        return self.rnn(x.transpose(1, 2))[0]


torch.manual_seed(0)
model = Net().eval()
example_inputs = (torch.randn(2, 16),)
"""


def test_cli_exports_and_verifies_a_strided_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.main import main

    (tmp_path / "net.py").write_text(STRIDED_CODE)
    # in-process: tests/test_cli.py runs the export verb as a subprocess
    assert main(["export", f"{tmp_path / 'net.py'}:model", "-o", str(tmp_path / "s.onnx"), "--streaming", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["passed"] is True
    assert main(["verify", str(tmp_path / "s.onnx"), "--against", f"{tmp_path / 'net.py'}:model", "--chunks", "2,6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    # without --chunks, a streaming file is still verified as it runs: chunk by chunk, at the default chunks the strides allow
    assert main(["verify", str(tmp_path / "s.onnx"), "--against", f"{tmp_path / 'net.py'}:model", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is True and report["check"] == "chunked" and all(c % 2 == 0 for c in report["chunks"])
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["verify", str(tmp_path / "s.onnx"), "--against", f"{tmp_path / 'net.py'}:model", "--chunks", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "expected a chunk of a multiple of 2 frames (the model's strides along time), found 3" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_session_on_one_thread(exported: dict[str, Any]) -> None:
    _, path, _ = exported["keyword_spotter"]
    session = rnnx.StreamingSession(path, threads=1)
    assert session.runner.session.get_session_options().intra_op_num_threads == 1
    assert session.process(np.zeros((3, 2, 10), np.float32))["output"].shape == (3, 2, 4)
