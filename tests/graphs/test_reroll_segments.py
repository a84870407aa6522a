"""Re-rolling a loop over segments, ``for i in range(0, T, S): enc(x[:, i:i + S])``, that a trace
unrolled: one ONNX Loop of ceil(T/S) - 1 trips after the first segment, run by ONNX Runtime at
lengths never traced and not multiples of S against torch; a body that depends on the segment's
length is refused naming what differs."""

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

SEGMENT = 4
TRACED = 10  # three segments: 4, 4 and a shorter 2
LENGTHS = (1, 3, 4, 7, 13, 17)  # never traced, all but 4 not multiples of the segment


class SegmentEncoder(nn.Module):
    """A codec's encode(): each segment through a convolution and an LSTM, the outputs joined."""

    def __init__(self, n_in: int = 3, ch: int = 6, hid: int = 5) -> None:
        super().__init__()
        self.conv, self.lstm = nn.Conv1d(n_in, ch, 3, padding=1), nn.LSTM(ch, hid, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        for i in range(0, x.size(1), SEGMENT):
            y = torch.relu(self.conv(x[:, i:i + SEGMENT].transpose(1, 2))).transpose(1, 2)
            parts.append(self.lstm(y)[0])
        return torch.cat(parts, 1)


class StatefulSegments(nn.Module):
    """Segments in turn through one GRU whose state carries from segment to segment, with a
    per-segment summary (the mean of its frames) stacked, and the last state returned."""

    def __init__(self, n_in: int = 3, hid: int = 5) -> None:
        super().__init__()
        self.proj, self.gru, self.hid = nn.Linear(n_in, n_in), nn.GRU(n_in, hid, batch_first=True), hid

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.new_zeros(1, x.size(0), self.hid)
        frames = []
        for i in range(0, x.size(1), SEGMENT):
            out, h = self.gru(torch.tanh(self.proj(x[:, i:i + SEGMENT])), h)
            frames.append(out)
        return torch.cat(frames, 1), h


class PaddedSegments(SegmentEncoder):
    """Pads the last segment to S steps and keeps its real frames: a body that depends on the segment's length."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        for i in range(0, x.size(1), SEGMENT):
            seg = x[:, i:i + SEGMENT]
            n = seg.size(1)
            seg = nn.functional.pad(seg, (0, 0, 0, SEGMENT - n))
            parts.append(self.lstm(torch.relu(self.conv(seg.transpose(1, 2))).transpose(1, 2))[0][:, :n])
        return torch.cat(parts, 1)


class ReshapedSegments(SegmentEncoder):
    """Reshapes each segment to S steps by a constant: right at every multiple of S only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        for i in range(0, x.size(1), SEGMENT):
            seg = x[:, i:i + SEGMENT].reshape(x.size(0), SEGMENT, 3)
            parts.append(self.lstm(torch.relu(self.conv(seg.transpose(1, 2))).transpose(1, 2))[0])
        return torch.cat(parts, 1)


def _export(model: nn.Module, length: int, batch: int) -> object:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer warns that the loop is unrolled: that is the point
        torch.onnx.export(model, (torch.randn(batch, length, 3),), f, dynamo=False)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("style", [SegmentEncoder, StatefulSegments], ids=lambda s: s.__name__)
def test_a_segment_loop_runs_at_lengths_that_are_not_multiples_of_the_segment(style: type, batch: int) -> None:
    torch.manual_seed(0)
    model = style().eval()
    proto = _export(model, TRACED, batch)
    result = reroll(proto)
    assert not result.left_alone, result.left_alone
    (info,) = result.rewritten
    assert info["segment"] == SEGMENT and info["steps"] == 3 and info["dynamic_seq"], info
    onnx.checker.check_model(proto, full_check=True)
    assert [n.op_type for n in proto.graph.node].count("Loop") == 1
    assert proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for length in LENGTHS:
        x = torch.randn(batch, length, 3, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = model(x)
        want = want if isinstance(want, tuple) else (want,)
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for g, w in zip(got, want, strict=True):
            assert g.shape == tuple(w.shape), (length, g.shape, tuple(w.shape))
            assert np.abs(g - w.numpy()).max() < 1e-5, (length, float(np.abs(g - w.numpy()).max()))


@pytest.mark.parametrize(("style", "length", "says"), [
    (PaddedSegments, TRACED, "the last segment (2 of 4 steps) differs from the others"),
    (ReshapedSegments, 12, "reads the segment's length 4 as a constant"),
], ids=["pad-last", "reshape-to-S"])
def test_a_body_that_depends_on_the_segment_length_is_refused_by_what_differs(style: type, length: int, says: str) -> None:
    torch.manual_seed(0)
    proto = _export(style().eval(), length, 2)
    before = proto.SerializeToString()
    result = reroll(proto)
    assert not result.rewritten
    (declined,) = result.left_alone
    assert declined.rule == "reroll.segment" and says in declined.reason, declined.reason
    assert proto.SerializeToString() == before


def test_two_segments_are_too_few_to_re_roll_and_say_what_example_would_do() -> None:
    result = reroll(_export(SegmentEncoder().eval(), 2 * SEGMENT, 1))
    assert not result.rewritten
    assert "only 2 segments of 4 steps traced" in result.left_alone[0].reason and "longer than 8 steps" in result.left_alone[0].reason
