"""``rnnx.export(..., streaming=True)`` on models written the way streaming projects write them:
a VAD (pointwise conv front end, 2-layer LSTM, Linear, sigmoid), a keyword spotter (GRU,
seq-first, zeros made in forward as tutorials do) and an encoder with a stacked
batch-first LSTM and a second LSTM after it (dict outputs). Each is exported from forward(x)
alone, then run with rnnx.StreamingSession in chunks of 1, 7 and the whole sequence at
batch 1 and 3 against torch on the whole sequence. What cannot stream is refused in one
line naming the module; a stream that drops its states is caught by the export's chunked
check; a causal conv streams with a cache of its left context (more in test_streaming_context).
"""

from __future__ import annotations

import json
import subprocess
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
from rnnx.exporters import stream_plan  # noqa: E402
from tests.helpers import rnnx_in_process  # noqa: E402

ATOL = 1e-4
FRAMES = 23  # not the chunked check's 19, nor a multiple of 7


class VAD(nn.Module):
    """Silero-style voice activity: features -> pointwise conv -> 2-layer LSTM -> speech probability per frame."""

    def __init__(self, mels: int = 20, hidden: int = 24) -> None:
        super().__init__()
        self.frontend = nn.Sequential(nn.Conv1d(mels, 32, kernel_size=1), nn.ReLU())
        self.lstm = nn.LSTM(32, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:  # (batch, frames, mels)
        x = self.frontend(feats.transpose(1, 2)).transpose(1, 2)
        y, _ = self.lstm(x)
        return torch.sigmoid(self.head(y)).squeeze(-1)


class KeywordSpotter(nn.Module):
    """A GRU keyword spotter as tutorials write it: seq-first, h0 made as zeros in forward, per-frame log-posteriors."""

    def __init__(self, mfcc: int = 13, hidden: int = 32, keywords: int = 4) -> None:
        super().__init__()
        self.hidden = hidden
        self.norm = nn.LayerNorm(mfcc)
        self.proj = nn.Linear(mfcc, hidden)
        self.gru = nn.GRU(hidden, hidden)
        self.classifier = nn.Linear(hidden, keywords + 1)

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:  # (batch, frames, mfcc)
        h0 = torch.zeros(1, mfcc.size(0), self.hidden)
        x = torch.relu(self.proj(self.norm(mfcc))).transpose(0, 1)
        y, _ = self.gru(x, h0)
        return self.classifier(y.transpose(0, 1)).log_softmax(-1)


class Encoder(nn.Module):
    def __init__(self, feats: int, hidden: int) -> None:
        super().__init__()
        self.rnn = nn.LSTM(feats, hidden, num_layers=3, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class StackedStreamer(nn.Module):
    """A unidirectional stacked batch-first LSTM encoder, a second LSTM after it, two outputs by name."""

    def __init__(self, feats: int = 16, hidden: int = 20) -> None:
        super().__init__()
        self.encoder = Encoder(feats, hidden)
        self.post = nn.LSTM(hidden, hidden, batch_first=True)
        self.logits = nn.Linear(hidden, 6)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        enc = self.encoder(x)
        post, _ = self.post(enc)
        return {"logits": self.logits(post), "features": enc}


MODELS: dict[str, tuple[Any, int, int]] = {  # name -> (class, feature size, example batch)
    "vad": (VAD, 20, 1),
    "kws": (KeywordSpotter, 13, 2),
    "stacked": (StackedStreamer, 16, 2),
}


def _built(name: str) -> tuple[Any, int, int]:
    cls, feats, batch = MODELS[name]
    torch.manual_seed(0)
    return cls().eval(), feats, batch


def _flat(out: Any) -> list[np.ndarray]:
    values = out.values() if isinstance(out, dict) else [out]
    return [v.detach().numpy() for v in values]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path, Any]]:
    """Each model exported with streaming=True from its forward(x) example: name -> (model, path, report)."""
    out = {}
    folder = tmp_path_factory.mktemp("streaming")
    for name in MODELS:
        model, feats, batch = _built(name)
        example = torch.randn(batch, 30, feats, generator=torch.Generator().manual_seed(1))
        path = folder / f"{name}.onnx"
        out[name] = (model, path, rnnx.export(model, (example,), path, streaming=True))
    return out


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("batch", [1, 3])
def test_streamed_chunks_match_the_whole_sequence(exported: dict[str, Any], name: str, batch: int) -> None:
    model, path, report = exported[name]
    assert report.passed and report.written
    streamed = [c for c in report.check.cases if c.name.startswith("streamed")]
    assert len(streamed) == 6 and all(c.passed for c in streamed)  # chunks of 1, 7 and whole, at batch 1 and 3
    x = torch.randn(batch, FRAMES, MODELS[name][1], generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        want = _flat(model(x))
    session = rnnx.StreamingSession(path)
    for chunk in (1, 7, FRAMES):
        session.reset()
        pieces = [session.process(x[:, t:t + chunk].numpy()) for t in range(0, FRAMES, chunk)]
        got = [np.concatenate([p[key] for p in pieces], axis=1) for key in pieces[0]]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0, err_msg=f"{name}, chunks of {chunk}, batch {batch}")


def test_the_states_are_named_after_their_modules_and_recorded(exported: dict[str, Any]) -> None:
    _, path, _ = exported["stacked"]
    proto = onnx.load(str(path))
    graph_inputs = [i.name for i in proto.graph.input]
    graph_outputs = [o.name for o in proto.graph.output]
    assert graph_inputs == ["x", "encoder.rnn.h_in", "encoder.rnn.c_in", "post.h_in", "post.c_in"]
    assert graph_outputs == ["logits", "features", "encoder.rnn.h_out", "encoder.rnn.c_out", "post.h_out", "post.c_out"]
    record = json.loads({p.key: p.value for p in proto.metadata_props}["rnnx.streaming"])
    assert record["version"] == 1 and record["time"] == "seq"
    assert record["inputs"] == {"x": {"dims": ["batch", "seq", 16], "time_axis": 1, "batch_axis": 0}}
    assert record["outputs"]["logits"] == {"dims": ["batch", "seq", 6], "time_axis": 1}
    first = record["states"][0]
    assert first == {"module": "encoder.rnn", "input": "encoder.rnn.h_in", "output": "encoder.rnn.h_out", "dims": [3, "batch", 20],
                     "batch_axis": 1, "dtype": "float32", "initial": "zeros"}
    assert [(s["input"], s["output"]) for s in record["states"]][1:] == [
        ("encoder.rnn.c_in", "encoder.rnn.c_out"), ("post.h_in", "post.h_out"), ("post.c_in", "post.c_out")]


def test_the_chunk_loop_in_plain_onnxruntime(exported: dict[str, Any]) -> None:
    """What the README shows: the loop from the metadata alone, no rnnx."""
    import onnxruntime as ort

    model, path, _ = exported["kws"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    record = json.loads(session.get_modelmeta().custom_metadata_map["rnnx.streaming"])
    x = np.random.default_rng(0).standard_normal((3, FRAMES, 13)).astype(np.float32)
    states = {s["input"]: np.zeros([3 if d == "batch" else d for d in s["dims"]], s["dtype"]) for s in record["states"]}
    outputs = []
    for t in range(0, FRAMES, 5):
        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"mfcc": x[:, t:t + 5], **states})))
        states = {s["input"]: out[s["output"]] for s in record["states"]}
        outputs.append(out["output"])
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), want, atol=ATOL, rtol=0)


def test_reset_starts_a_new_stream(exported: dict[str, Any]) -> None:
    _, path, _ = exported["vad"]
    session = rnnx.StreamingSession(path)
    x = np.random.default_rng(2).standard_normal((1, 9, 20)).astype(np.float32)
    first = session.process(x)["output"]
    second = session.process(x)["output"]  # the same frames again, after them: states carried
    session.reset()
    again = session.process(x)["output"]
    assert not np.allclose(first, second) and np.array_equal(first, again)
    with pytest.raises(rnnx.RNNXError, match="expected batch 1, as in this stream's chunks so far, found 3; call reset"):
        session.process(np.zeros((3, 4, 20), np.float32))


class ClampedFilterbank(nn.Module):
    """An op torch.onnx's dynamo route has no overload for (clamp with an int and a float bound): the TorchScript route makes the file."""

    def __init__(self) -> None:
        super().__init__()
        self.fb = nn.Parameter(torch.rand(40, 20))
        self.rnn = nn.GRU(20, 16, batch_first=True)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.rnn(feats @ torch.clamp(self.fb, 0, 1.0))[0]


def test_streaming_through_the_torchscript_route(tmp_path: Path) -> None:
    from rnnx.exporters.torchscript_route import ROUTE

    torch.manual_seed(0)
    model = ClampedFilterbank().eval()
    report = rnnx.export(model, (torch.randn(2, 12, 40),), tmp_path / "fb.onnx", streaming=True)
    assert report.route == ROUTE and all(c.passed for c in report.check.cases if c.name.startswith("streamed"))
    x = torch.randn(3, FRAMES, 40, generator=torch.Generator().manual_seed(5))
    session = rnnx.StreamingSession(tmp_path / "fb.onnx")
    got = np.concatenate([session.process(x[:, t:t + 7].numpy())["output"] for t in range(0, FRAMES, 7)], axis=1)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=ATOL, rtol=0)


class Bidirectional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder(8, 8)
        self.encoder.rnn = nn.LSTM(8, 8, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


@pytest.mark.parametrize("model, fragment", [
    (Bidirectional, "found a bidirectional nn.LSTM at encoder.rnn (its output at frame t needs the frames after t"),
])
def test_what_cannot_stream_is_refused_in_one_line(tmp_path: Path, model: Any, fragment: str) -> None:
    with pytest.raises(rnnx.RNNXError) as refused:
        rnnx.export(model().eval(), (torch.randn(2, 6, 8),), tmp_path / "m.onnx", streaming=True)
    message = str(refused.value)
    assert fragment in message and "\n" not in message and message.startswith("streaming: expected")
    assert not (tmp_path / "m.onnx").exists()


def test_a_stream_that_drops_its_states_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the check's chunk loop feeds zeros instead of the states the chunk before returned."""
    monkeypatch.setattr(stream_plan, "_carried", lambda out, record: {s.input: np.zeros_like(out[s.output]) for s in record.states})
    model, feats, _ = _built("vad")
    with pytest.raises(rnnx.ExportCheckFailed) as failed:
        rnnx.export(model, (torch.randn(2, 12, feats),), tmp_path / "m.onnx", streaming=True)
    assert "self-check at streamed in chunks of 1 frame, batch 1" in str(failed.value)
    cases = {c.name: c.passed for c in failed.value.report.check.cases if c.name.startswith("streamed")}
    assert cases == {"streamed in chunks of 1 frame, batch 1": False, "streamed in chunks of 7 frames, batch 1": False,
                     "streamed whole, as one chunk, batch 1": True, "streamed in chunks of 1 frame, batch 3": False,
                     "streamed in chunks of 7 frames, batch 3": False, "streamed whole, as one chunk, batch 3": True}
    assert not (tmp_path / "m.onnx").exists()


class CausalConvVAD(VAD):
    """A causal conv (nn.ConstantPad1d on the left, kernel 3) before the LSTM: each chunk needs
    the two frames before it, which the conv's cache carries."""

    def __init__(self) -> None:
        super().__init__()
        self.frontend = nn.Sequential(nn.ConstantPad1d((2, 0), 0.0), nn.Conv1d(20, 32, kernel_size=3), nn.ReLU())


def test_a_causal_conv_streams_with_a_cache_of_its_left_context(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = CausalConvVAD().eval()
    report = rnnx.export(model, (torch.randn(2, 12, 20),), tmp_path / "m.onnx", streaming=True)
    assert all(c.passed for c in report.check.cases if c.name.startswith("streamed"))
    assert "frontend.1.cache_in -> frontend.1.cache_out" in " ".join(report.notes)
    x = torch.randn(1, FRAMES, 20, generator=torch.Generator().manual_seed(8))
    session = rnnx.StreamingSession(tmp_path / "m.onnx")
    got = np.concatenate([session.process(x[:, t:t + 1].numpy())["output"] for t in range(FRAMES)], axis=1)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=ATOL, rtol=0)


def test_a_file_without_the_record_is_refused(tmp_path: Path) -> None:
    model, feats, _ = _built("vad")
    rnnx.export(model, (torch.randn(2, 12, feats),), tmp_path / "plain.onnx")
    with pytest.raises(rnnx.RNNXError, match="expected a file exported with streaming=True"):
        rnnx.StreamingSession(tmp_path / "plain.onnx")


MODEL_FILE = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, bidirectional=False):
        super().__init__()
        self.rnn = nn.GRU(8, 8, batch_first=True, bidirectional=bidirectional)

    def forward(self, x):
        return self.rnn(x)[0]

def bidirectional():
    return Net(bidirectional=True)

example_inputs = lambda: (torch.randn(2, 10, 8),)
'''


def test_cli_streaming(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(MODEL_FILE)

    def run(*args: Any) -> subprocess.CompletedProcess[str]:
        # in-process (rnnx.cli.main): the flag is tested here, the export verb's process in tests/test_cli.py
        return rnnx_in_process(*args)

    ok = run("export", f"{tmp_path / 'net.py'}:Net", "-o", tmp_path / "net.onnx", "--streaming", "--json")
    assert ok.returncode == 0, ok.stderr
    assert [s.input for s in rnnx.StreamingSession(tmp_path / "net.onnx").record.states] == ["rnn.h_in"]
    refused = run("export", f"{tmp_path / 'net.py'}:bidirectional", "-o", tmp_path / "bi.onnx", "--streaming")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "bidirectional nn.GRU at rnn" in refused.stderr and not (tmp_path / "bi.onnx").exists()


def test_the_streaming_files_pass_rnnx_verify(exported: dict[str, Any]) -> None:
    """The conftest verifies every file a test writes; these were written by a module fixture, before it looks."""
    from rnnx.verify.models import verify_file

    for name, (_, path, _) in exported.items():
        report = verify_file(path, isolated=False)
        assert report.passed, f"{name}:\n{report}"
