"""Pools along time stream at the chunk multiple the model needs, found by asking the model.

The models are written as front ends write them: a frame-rate reduction by ``nn.MaxPool1d(2)``
or ``nn.AvgPool1d(4)`` (kernel = stride, no padding: chunks of the stride, nothing carried), a
smoothing ``F.avg_pool1d`` of 3 frames every frame padded causally on the left (the two frames
before the chunk carried), an overlapping ``nn.AvgPool1d(4, stride=2)`` after a causal ``F.pad``
(both: chunks of 2 and the 2 frames the windows share), a pool then a reshape that stacks
frames (ASR subsampling: 2 x 2 = 4), and all three in one model. Each is exported with ``streaming=True`` from a batch-1
example and run with ``rnnx.StreamingSession`` in chunks of the multiple, 3 and 7 times it (1, 3
and 7 frames where it is 1) and whole, at batch 1 and 3, against torch on the whole sequence.
A centred pool reads later frames and is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional

import rnnx  # noqa: E402
from rnnx.exporters.stream_context import study  # noqa: E402


class MaxPooled(nn.Module):
    """Frames (B, T, 6) halved by a max pool over time, then an LSTM."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool1d(2)
        self.rnn = nn.LSTM(6, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(self.pool(x.transpose(1, 2)).transpose(1, 2))[0]


class AvgPooled(nn.Module):
    """Four frames averaged into one (a 4x frame-rate reduction), then a GRU and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool1d(4)
        self.rnn = nn.GRU(6, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        return self.head(self.rnn(self.pool(x.transpose(1, 2)).transpose(1, 2))[0])


class Smoothed(nn.Module):
    """A causal moving average of 3 frames (F.avg_pool1d, stride 1, two zeros on the left)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(6, 7, batch_first=True)

    def forward(self, x: Any) -> Any:
        smooth = F.avg_pool1d(F.pad(x.transpose(1, 2), (2, 0)), kernel_size=3, stride=1)
        return self.rnn(smooth.transpose(1, 2))[0]


class Overlapping(nn.Module):
    """Windows of 4 frames every 2, padded causally: each window shares 2 frames with the next."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool1d(4, stride=2)
        self.rnn = nn.GRU(6, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(self.pool(F.pad(x.transpose(1, 2), (2, 0))).transpose(1, 2))[0]


class PoolStacked(nn.Module):
    """A max pool halves the frames, then pairs of pooled frames are stacked (ASR subsampling)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool1d(2)
        self.rnn = nn.LSTM(12, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        y = self.pool(x.transpose(1, 2)).transpose(1, 2)
        b, t, d = y.shape
        return self.rnn(y.reshape(b, t // 2, 2 * d))[0]


class SmoothedStacked(nn.Module):
    """All three at once: a causal moving average, a pool halving the frames, pairs stacked."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool1d(2)
        self.rnn = nn.LSTM(12, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        smooth = F.avg_pool1d(F.pad(x.transpose(1, 2), (2, 0)), kernel_size=3, stride=1)
        y = self.pool(smooth).transpose(1, 2)
        b, t, d = y.shape
        return self.rnn(y.reshape(b, t // 2, 2 * d))[0]


class Centred(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool1d(3, stride=1, padding=1)
        self.rnn = nn.GRU(6, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(self.pool(x.transpose(1, 2)).transpose(1, 2))[0]


# model: (chunk multiple, states carried besides the recurrence's)
PLANS = {
    MaxPooled: (2, []),
    AvgPooled: (4, []),
    Smoothed: (1, ["lookback0"]),
    Overlapping: (2, ["lookback0"]),
    PoolStacked: (4, []),
    SmoothedStacked: (4, ["lookback0"]),
}
DEFAULT = SmoothedStacked  # streamed in the default run; the others behind --slow (their plans are held in the default run)


@pytest.mark.parametrize("cls", list(PLANS), ids=lambda c: c.__name__)
def test_the_model_is_asked_for_its_chunk_multiple(cls: type) -> None:
    """The probe alone (no export): the multiple, and the frames carried, found by running the model."""
    from torch.utils._pytree import tree_flatten

    torch.manual_seed(0)
    model = cls().eval()
    flat, structure = tree_flatten((torch.randn(1, 16, 6),))
    context = study(model, flat, structure, [("rnn", model.rnn)], [])
    multiple, carried = PLANS[cls]
    assert context.multiple == multiple and [r.name for r in context.running] == carried and not context.caches
    if multiple > 1:
        assert any(f"multiple of {multiple} frames" in n for n in context.notes), context.notes


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[type, tuple[Any, Path, Any]]:
    """Each model exported once, lazily (the slow ones only when a --slow test asks)."""
    return {}


def _export(exported: dict[type, Any], tmp_path_factory: pytest.TempPathFactory, cls: type) -> tuple[Any, Path, Any]:
    if cls not in exported:
        torch.manual_seed(0)
        model = cls().eval()
        path = tmp_path_factory.mktemp("pools") / f"{cls.__name__}.onnx"
        exported[cls] = (model, path, rnnx.export(model, (torch.randn(1, 16, 6),), path, streaming=True))
    return exported[cls]


@pytest.mark.parametrize("cls", [c if c is DEFAULT else pytest.param(c, marks=pytest.mark.slow) for c in PLANS], ids=lambda c: c.__name__)
def test_pools_stream_at_their_multiple_and_match_the_whole_sequence(exported: dict[type, Any], tmp_path_factory: pytest.TempPathFactory,
                                                                     cls: type) -> None:
    model, path, report = _export(exported, tmp_path_factory, cls)
    multiple, carried = PLANS[cls]
    assert report.passed and all(c.passed for c in report.check.cases if c.name.startswith("streamed"))
    session = rnnx.StreamingSession(path)
    assert session.record.multiple == multiple
    assert sorted(s.input for s in session.record.states if not s.input.startswith("rnn.")) == [f"{c}_in" for c in carried]
    frames = 17 * multiple  # chunks of 3 and 7 multiples leave a short last chunk
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, frames, 6)).astype(np.float32)
        with torch.no_grad():
            whole = model(torch.from_numpy(x)).numpy()
        for chunk in (multiple, 3 * multiple, 7 * multiple, frames):
            session.reset()
            got = np.concatenate([session.process(x[:, t:t + chunk])["output"] for t in range(0, frames, chunk)], axis=1)
            assert got.shape == whole.shape, (batch, chunk, got.shape, whole.shape)
            np.testing.assert_allclose(got, whole, atol=1e-5, rtol=1e-4, err_msg=f"{cls.__name__}: batch {batch}, chunks of {chunk}")


def test_a_chunk_the_pools_do_not_allow_is_refused(exported: dict[type, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    """docs/streaming.md: StreamingSession refuses a chunk that is not a multiple, and a chunk
    that does not cast to the file's type without loss, each in one line."""
    _, path, _ = _export(exported, tmp_path_factory, DEFAULT)
    session = rnnx.StreamingSession(path)
    with pytest.raises(rnnx.RNNXError, match=r"expected a chunk of a multiple of 4 frames .*found 6") as refused:
        session.process(np.zeros((1, 6, 6), np.float32))
    assert "\n" not in str(refused.value)
    with pytest.raises(rnnx.RNNXError, match="does not cast to it without loss"):
        session.process(np.zeros((1, 8, 6), np.complex64))
    assert session.process(np.zeros((1, 8, 6), np.float64))["output"].shape == (1, 2, 5)  # float64 casts to float32


def test_a_centred_pool_is_refused_as_reading_later_frames(tmp_path: Path) -> None:
    with pytest.raises(rnnx.RNNXError) as refused:
        rnnx.export(Centred().eval(), (torch.randn(1, 16, 6),), tmp_path / "c.onnx", streaming=True)
    said = str(refused.value)
    assert "found pool (AvgPool1d) whose output at frame t changes with frames after t (its window reaches past frame t" in said, said
    assert "test_streaming_pools.py:" in said and "self.pool(x.transpose(1, 2))" in said and not (tmp_path / "c.onnx").exists()
