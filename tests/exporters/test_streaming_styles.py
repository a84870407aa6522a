"""Streaming on the model styles a newcomer brings: a CRN whose strided convolutions feed each
other, a character LM that already streams (``forward(tokens, h, c)``), checked chunk by chunk
by ``rnnx verify --chunks`` through the forward's own state parameters, and delta features
(the previous frame subtracted) made by pad-and-slice, carried, or by concatenation, named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from tests.helpers import model_file, rnnx_in_process  # noqa: E402

MODELS = '''
import torch
import torch.nn.functional as F
from torch import nn


class CRN(nn.Module):
    """A convolutional recurrent enhancer: two causal Conv2d (padded with ZeroPad2d above, in
    time), each with frequency stride 2, the second reading the first's output; a 2-layer LSTM
    and a mask over the spectrum (B, 1, T, F)."""

    def __init__(self, freq=32):
        super().__init__()
        self.pad1 = nn.ZeroPad2d((0, 0, 1, 0))
        self.conv1 = nn.Conv2d(1, 4, (2, 3), stride=(1, 2))
        self.pad2 = nn.ZeroPad2d((0, 0, 1, 0))
        self.conv2 = nn.Conv2d(4, 8, (2, 3), stride=(1, 2))
        f = ((freq - 3) // 2 + 1 - 3) // 2 + 1
        self.lstm = nn.LSTM(8 * f, 16, num_layers=2, batch_first=True)
        self.mask = nn.Linear(16, freq)

    def forward(self, spec):
        x = torch.relu(self.conv1(self.pad1(spec)))
        x = torch.relu(self.conv2(self.pad2(x)))
        b, c, t, f = x.shape
        y, _ = self.lstm(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        return torch.sigmoid(self.mask(y)) * spec.squeeze(1)


class TwoInputs(nn.Module):
    """A speech enhancer fed two time-aligned tensors: features (B, 1, T, 32) and the spectrum
    (B, 1, T, 96, 2) it masks."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 16)
        self.b = nn.Linear(96 * 2, 16)
        self.rnn = nn.GRU(32, 24, batch_first=True)
        self.out = nn.Linear(24, 96)

    def forward(self, feats, spec):
        b, _, t, _ = feats.shape
        x = torch.cat([self.a(feats[:, 0]), self.b(spec[:, 0].reshape(b, t, 192))], -1)
        return torch.sigmoid(self.out(self.rnn(x)[0])) * spec[:, 0, ..., 0]


class CharLM(nn.Module):
    """A character LM that carries its own state: forward(tokens, h, c) -> (logits, h, c)."""

    def __init__(self, vocab=20, hid=12):
        super().__init__()
        self.emb = nn.Embedding(vocab, 8)
        self.rnn = nn.LSTM(8, hid, batch_first=True)
        self.out = nn.Linear(hid, vocab)

    def forward(self, tokens, h, c):
        y, (h, c) = self.rnn(self.emb(tokens), (h, c))
        return self.out(y), h, c


class DeltaStridedGRU(nn.Module):
    """Features and their deltas (the previous frame subtracted, made by pad-and-slice), a
    causal Conv1d with stride 2 along time, a GRU: (B, T, 16) -> (B, T / 2, 5)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(32, 16, 3, stride=2)
        self.rnn = nn.GRU(16, 24, batch_first=True)
        self.out = nn.Linear(24, 5)

    def forward(self, x):
        delta = x - F.pad(x, (0, 0, 1, 0))[:, :-1]
        y = torch.cat([x, delta], -1).transpose(1, 2)
        y = torch.relu(self.conv(F.pad(y, (2, 0))))
        return self.out(self.rnn(y.transpose(1, 2))[0])


class SummedAndConcatenated(nn.Module):
    """A running sum along time (carried), and the previous frame made by concatenating zeros
    before the frames (not carried): the chunks part at the concatenation, not at the sum."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(32, 8, batch_first=True)

    def forward(self, x):
        summed = torch.cumsum(x, 1)  # first: its raw output is the graph's first to differ in chunks
        previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)
        return self.rnn(torch.cat([summed, x - previous], -1))[0]


class OwnStateDelta(nn.Module):
    """Streams its own state (forward(x, h)), with the previous frame made by concatenation."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(32, 24, batch_first=True)

    def forward(self, x, h):
        previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)
        return self.rnn(torch.cat([x, x - previous], -1), h)
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("styles") / "styles.py"
    return path, model_file(path, MODELS)


def test_a_crn_whose_strided_convolutions_feed_each_other_streams_at_any_batch(models, tmp_path: Path) -> None:
    _, ns = models
    torch.manual_seed(0)
    model = ns["CRN"]().eval()
    report = rnnx.export(model, (torch.randn(1, 1, 20, 32),), tmp_path / "crn.onnx", streaming=True)
    assert report.passed and report.written, str(report)
    assert report.axes["spec"] == {0: "batch", 2: "seq"}
    assert any(c.name.startswith("streamed in chunks of 1 frame") and c.passed for c in report.check.cases)
    # inspect says what the file carries from chunk to chunk, in text and JSON
    # the verbs in-process (rnnx.cli.main): what they say is tested here, the process in tests/graphs/test_inspect.py and tests/verify
    shown = rnnx_in_process("inspect", tmp_path / "crn.onnx")
    assert shown.returncode == 0 and "streaming: chunks along seq, a multiple of 1 frame(s)" in shown.stdout
    assert "carried for conv2: conv2.cache_in -> conv2.cache_out" in shown.stdout and "carried for lstm: lstm.h_in -> lstm.h_out" in shown.stdout
    shown = rnnx_in_process("inspect", tmp_path / "crn.onnx", "--json")
    record = json.loads(shown.stdout)["streaming"]
    assert record["chunk_multiple"] == 1 and {s["input"] for s in record["states"]} == {"lstm.h_in", "lstm.c_in", "conv1.cache_in", "conv2.cache_in"}
    # by hand, as a user would: batch 3, in chunks of 4 frames, each chunk's states fed to the next
    session = ort.InferenceSession(str(tmp_path / "crn.onnx"), providers=["CPUExecutionProvider"])
    ins = {i.name: i for i in session.get_inputs()}
    states = {n: n.replace("_in", "_out") for n in ins if n != "spec"}
    x = torch.randn(3, 1, 16, 32, generator=torch.Generator().manual_seed(1))
    carried = {n: np.zeros([3 if isinstance(d, str) else d for d in ins[n].shape], dtype=np.float32) for n in states}
    outs = []
    for t in range(0, 16, 4):
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"spec": x[:, :, t:t + 4].numpy(), **carried})))
        outs.append(got[session.get_outputs()[0].name])
        carried = {n: got[o] for n, o in states.items()}
    with torch.no_grad():
        np.testing.assert_allclose(np.concatenate(outs, axis=1), model(x).numpy(), atol=1e-5, rtol=1e-4)


def test_verify_drives_the_states_of_a_model_that_already_streams_through_its_forward(models, tmp_path: Path) -> None:
    path, ns = models
    torch.manual_seed(0)
    model = ns["CharLM"]().eval()
    torch.save(model.state_dict(), tmp_path / "lm.pt")
    example = (torch.randint(0, 20, (1, 6)), torch.zeros(1, 1, 12), torch.zeros(1, 1, 12))
    assert rnnx.export(model, example, tmp_path / "lm.onnx", output_names=["logits", "h_out", "c_out"]).passed
    done = rnnx_in_process("verify", tmp_path / "lm.onnx", "--against", f"{path}:CharLM", "--checkpoint", tmp_path / "lm.pt", "--chunks", "1,7",
                           "--state", "h=h_out", "--state", "c=c_out", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["passed"] and {r["output"] for r in report["rows"]} == {"logits", "h_out", "c_out"}
    # the streaming export refuses such a model, naming the flag and the route that checks it
    with pytest.raises(rnnx.RNNXError) as raised:
        rnnx.export(model, example, tmp_path / "s.onnx", streaming=True)
    assert "--streaming" in str(raised.value) and "--chunks" in str(raised.value)


def test_two_inputs_that_share_the_frame_axis_stream_together(models, tmp_path: Path) -> None:
    _, ns = models
    torch.manual_seed(0)
    model = ns["TwoInputs"]().eval()
    report = rnnx.export(model, (torch.randn(1, 1, 20, 32), torch.randn(1, 1, 20, 96, 2)), tmp_path / "two.onnx", streaming=True)
    assert report.passed and report.axes["feats"][2] == report.axes["spec"][2] == "seq", str(report)
    assert any(c.name == "streamed in chunks of 1 frame, batch 3" and c.passed for c in report.check.cases)
    # StreamingSession: the first streamed input positionally, the other by name, in 5-frame chunks
    session = rnnx.StreamingSession(tmp_path / "two.onnx")
    feats, spec = torch.randn(2, 1, 15, 32), torch.randn(2, 1, 15, 96, 2)
    outs = [session.process(feats[:, :, t:t + 5].numpy(), spec=spec[:, :, t:t + 5].numpy())["output"] for t in range(0, 15, 5)]
    with torch.no_grad():
        np.testing.assert_allclose(np.concatenate(outs, axis=1), model(feats, spec).numpy(), atol=1e-5, rtol=1e-4)


def test_a_delta_feature_a_strided_conv_and_a_gru_stream(models, tmp_path: Path) -> None:
    _, ns = models
    torch.manual_seed(0)
    model = ns["DeltaStridedGRU"]().eval()
    report = rnnx.export(model, (torch.randn(1, 20, 16),), tmp_path / "mixed.onnx", streaming=True)
    assert report.passed, str(report)
    states = {s.input for s in rnnx.StreamingSession(tmp_path / "mixed.onnx").record.states}
    assert states == {"rnn.h_in", "conv.cache_in", "lookback0_in"}, states
    # by hand, batch 3, chunks of 2 and 6 frames (the stride's multiple), against torch on the whole sequence
    x = torch.randn(3, 24, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = model(x).numpy()
    for chunk in (2, 6):
        session = rnnx.StreamingSession(tmp_path / "mixed.onnx")
        got = np.concatenate([session.process(x[:, t:t + chunk].numpy())["output"] for t in range(0, 24, chunk)], axis=1)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_chunks_that_part_are_blamed_on_the_operation_that_loses_the_frame_before(models, tmp_path: Path) -> None:
    _, ns = models
    torch.manual_seed(0)
    with pytest.raises(rnnx.ExportCheckFailed) as failed:
        rnnx.export(ns["SummedAndConcatenated"]().eval(), (torch.randn(1, 20, 16),), tmp_path / "s.onnx", streaming=True)
    message = str(failed.value)
    # the carried cumsum's raw output differs chunk by chunk too, but what follows it agrees
    assert "the first operation whose chunked output differs from the whole sequence's is Concat" in message, message
    assert "CumSum" not in message.split("the first operation")[1]
    assert not (tmp_path / "s.onnx").exists()


def test_verify_chunks_names_the_operation_where_a_hand_streamed_file_parts(models, tmp_path: Path) -> None:
    path, ns = models
    torch.manual_seed(0)
    model = ns["OwnStateDelta"]().eval()
    torch.save(model.state_dict(), tmp_path / "own.pt")
    assert rnnx.export(model, (torch.randn(1, 9, 16), torch.zeros(1, 1, 24)), tmp_path / "own.onnx", input_names=["x", "h"],
                       output_names=["y", "h_out"]).passed
    done = rnnx_in_process("verify", tmp_path / "own.onnx", "--against", f"{path}:OwnStateDelta", "--checkpoint", tmp_path / "own.pt",
                           "--chunks", "1,7", "--state", "h=h_out", "--json")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    notes = json.loads(done.stdout)["notes"]
    assert any("the first operation whose chunked output differs" in n and "Concat" in n and "previous = torch.cat" in n for n in notes), notes
