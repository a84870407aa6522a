"""Streaming styles that reduce the frame rate without padding: a convolution whose windows sit
side by side (kernel = stride, no padding; it was refused, "its first output needs 3 frames before
the sequence starts", which is false), and frames stacked by a reshape (ASR subsampling; it failed
as a parity error at chunks of 1 frame). Both stream at a multiple of their stride, found from the
model, against torch's whole sequence at batch 1 and 3. A convolution whose unpadded windows
overlap is refused with its true reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402


class Strided(torch.nn.Module):
    def __init__(self, stride: int = 4, kernel: int = 4) -> None:
        super().__init__()
        self.reduce = torch.nn.Conv1d(6, 8, kernel, stride=stride)
        self.rnn = torch.nn.LSTM(8, 5, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, 6)
        return self.rnn(torch.relu(self.reduce(x.transpose(1, 2))).transpose(1, 2))[0]


class Stacked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(12, 5, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, 6): two frames stacked into one
        b, t, d = x.shape
        return self.rnn(x.reshape(b, t // 2, 2 * d))[0]


def _stream(path: Path, model: torch.nn.Module, multiple: int) -> None:
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 7 * multiple * 2, 6)).astype(np.float32)
        with torch.no_grad():
            whole = model(torch.from_numpy(x)).numpy()
        for chunk in (multiple, 3 * multiple, 7 * multiple, x.shape[1]):
            session = rnnx.StreamingSession(path)
            got = np.concatenate([session.process(x[:, t:t + chunk])["output"] for t in range(0, x.shape[1], chunk)], 1)
            assert got.shape == whole.shape and np.abs(got - whole).max() < 1e-5, (batch, chunk)


@pytest.mark.parametrize("stride", [pytest.param(2, marks=pytest.mark.slow), 4])
def test_side_by_side_windows_stream_at_the_stride(tmp_path: Path, stride: int) -> None:
    torch.manual_seed(0)
    model = Strided(stride, stride).eval()
    report = rnnx.export(model, (torch.randn(1, 4 * stride, 6),), tmp_path / "s.onnx", streaming=True)
    assert report.passed and rnnx.StreamingSession(tmp_path / "s.onnx").record.multiple == stride
    _stream(tmp_path / "s.onnx", model, stride)


def test_frames_stacked_by_a_reshape_stream_in_pairs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Stacked().eval()
    report = rnnx.export(model, (torch.randn(1, 8, 6),), tmp_path / "r.onnx", streaming=True)
    assert report.passed, report
    assert rnnx.StreamingSession(tmp_path / "r.onnx").record.multiple == 2
    assert any("multiples of 2 frames" in n for n in report.notes), report.notes
    _stream(tmp_path / "r.onnx", model, 2)


def test_overlapping_unpadded_windows_are_refused_with_their_true_reason(tmp_path: Path) -> None:
    with pytest.raises(rnnx.RNNXError) as caught:
        rnnx.export(Strided(2, 5).eval(), (torch.randn(1, 16, 6),), tmp_path / "o.onnx", streaming=True)
    said = str(caught.value)
    assert "reduce" in said and "overlap" in said and "before the sequence starts" not in said, said
