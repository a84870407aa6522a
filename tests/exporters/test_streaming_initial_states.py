"""Issue 48: a recurrence the model starts from a state of its own streams, and a state that
reads the whole input is refused for what it is.

- an LSTM started from ``tanh(Linear(speaker_embedding))`` (h0 and c0) and a GRU started from a
  learned ``nn.Parameter`` h0 expanded to the batch, exported with streaming=True from a batch-1
  example, streamed by StreamingSession in chunks of 1, 3, 7 frames and whole at batch 1 and 3,
  held to torch on the whole sequence (the file computes the initial state on the first chunk,
  ``first_chunk`` true, and carries it after);
- a seq2seq model whose decoder starts from the encoder's final state is refused as not causal,
  naming the decoder, the encoder and the line, not with the advice to start from zeros;
- a version 1 record (every initial "zeros") still reads, and a computed state without its
  first-chunk input is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.streaming import STREAMING_KEY, read_streaming  # noqa: E402

FRAMES = 19


class SpeakerLSTM(torch.nn.Module):
    """h0, c0 = tanh(Linear(speaker)): the speaker embedding is fed whole with every chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.to_h = torch.nn.Linear(4, 6)
        self.to_c = torch.nn.Linear(4, 6)
        self.rnn = torch.nn.LSTM(5, 6, batch_first=True)
        self.out = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor, speaker: torch.Tensor) -> torch.Tensor:
        h0 = torch.tanh(self.to_h(speaker)).unsqueeze(0)
        c0 = torch.tanh(self.to_c(speaker)).unsqueeze(0)
        return self.out(self.rnn(x, (h0, c0))[0])


class LearnedGRU(torch.nn.Module):
    """A learned initial state, an nn.Parameter expanded to the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.h0 = torch.nn.Parameter(torch.randn(2, 1, 6))
        self.gru = torch.nn.GRU(5, 6, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.gru(x, self.h0.expand(-1, x.shape[0], -1).contiguous())[0])


class Seq2Seq(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.GRU(5, 6, batch_first=True)
        self.bridge = torch.nn.Linear(6, 6)
        self.decoder = torch.nn.GRU(5, 6, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, summary = self.encoder(x)
        out, _ = self.decoder(x, torch.tanh(self.bridge(summary)))  # the decoder starts from the whole input's summary
        return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, torch.nn.Module]]:
    folder = tmp_path_factory.mktemp("initial")
    torch.manual_seed(0)
    made = {"speaker": (SpeakerLSTM().eval(), (torch.randn(1, 8, 5), torch.randn(1, 4))),
            "learned": (LearnedGRU().eval(), (torch.randn(1, 8, 5),))}
    out = {}
    for name, (model, example) in made.items():
        path = folder / f"{name}.onnx"
        assert rnnx.export(model, example, path, streaming=True).passed
        out[name] = (path, model)
    return out


def _stream(path: Path, chunk: int, x: np.ndarray, **whole: np.ndarray) -> np.ndarray:
    session = rnnx.StreamingSession(path)
    return np.concatenate([session.process(x[:, t:t + chunk], **whole)["output"] for t in range(0, x.shape[1], chunk)], 1)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_state_computed_from_an_input_streams(files, batch: int) -> None:
    path, model = files["speaker"]
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, FRAMES, 5)).astype(np.float32)
    speaker = rng.standard_normal((batch, 4)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x), torch.from_numpy(speaker)).numpy()
    assert np.abs(want - model(torch.from_numpy(x), torch.zeros(batch, 4)).detach().numpy()).max() > 1e-2  # the speaker matters
    for chunk in (1, 3, 7, FRAMES):
        assert np.abs(_stream(path, chunk, x, speaker=speaker) - want).max() < 1e-5, chunk


@pytest.mark.parametrize("batch", [1, 3])
def test_a_learned_initial_state_streams(files, batch: int) -> None:
    path, model = files["learned"]
    x = np.random.default_rng(10 + batch).standard_normal((batch, FRAMES, 5)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    for chunk in (1, 3, 7, FRAMES):
        assert np.abs(_stream(path, chunk, x) - want).max() < 1e-5, chunk


def test_the_record_says_computed_and_names_the_first_chunk_input(files) -> None:
    import onnx

    proto = onnx.load(str(files["speaker"][0]))
    raw = json.loads({p.key: p.value for p in proto.metadata_props}[STREAMING_KEY])
    assert raw["version"] == 2 and raw["first"] == "first_chunk" and "first_chunk" not in raw["inputs"]
    assert [s["initial"] for s in raw["states"]] == ["computed", "computed"]
    session = rnnx.StreamingSession(files["speaker"][0])
    assert session.record.first == "first_chunk" and any("computed" in line for line in session.record.describe())


def test_a_state_given_on_the_first_chunk_replaces_the_computed_one(files) -> None:
    path, model = files["speaker"]
    x = np.random.default_rng(5).standard_normal((1, 6, 5)).astype(np.float32)
    speaker = np.random.default_rng(6).standard_normal((1, 4)).astype(np.float32)
    session = rnnx.StreamingSession(path)
    zeros = np.zeros((1, 1, 6), np.float32)
    got = session.process(x, speaker=speaker, **{"rnn.h_in": zeros, "rnn.c_in": zeros})["output"]
    with torch.no_grad():
        want = model.out(model.rnn(torch.from_numpy(x))[0]).numpy()  # from zeros, as given
    assert np.abs(got - want).max() < 1e-5


def test_verify_chunks_feeds_the_first_chunk_input(files, tmp_path: Path) -> None:
    from rnnx.verify.chunked import verify_chunked

    code = tmp_path / "speaker.py"  # the fixture's model: the same class, built first after the same seed
    code.write_text(f"""import importlib.util, torch
spec = importlib.util.spec_from_file_location("rnnx_t48_models", {str(Path(__file__))!r})
models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(models)
torch.manual_seed(0)
model = models.SpeakerLSTM().eval()
example_inputs = (torch.randn(1, 8, 5), torch.randn(1, 4))
""")
    report = verify_chunked(files["speaker"][0], f"{code}:model", [1, 3, 7])
    assert report.passed, str(report)
    assert {r.batch for r in report.rows} == {1, 3} and all(r.stats is not None and r.stats.max_abs < 1e-5 for r in report.rows)


def test_a_decoder_started_from_the_encoders_final_state_is_refused_as_not_causal(tmp_path: Path) -> None:
    with pytest.raises(rnnx.RNNXError) as caught:
        rnnx.export(Seq2Seq().eval(), (torch.randn(1, 8, 5),), tmp_path / "s.onnx", streaming=True)
    message = str(caught.value)
    assert "decoder" in message and "encoder" in message and "not causal" in message and "reads the whole" in message
    assert "test_streaming_initial_states.py:" in message and "(out, _ = self.decoder(x" in message  # the line
    assert "start from zeros" not in message and "not zeros" not in message
    assert not (tmp_path / "s.onnx").exists()


def _record(**change: object) -> dict[str, str]:
    state = {"module": "rnn", "input": "rnn.h_in", "output": "rnn.h_out", "dims": [1, "batch", 6], "batch_axis": 1, "dtype": "float32",
             "initial": "zeros"}
    raw = {"version": 1, "time": "seq", "states": [state], "inputs": {"x": {"dims": ["batch", "seq", 5], "time_axis": 1, "batch_axis": 0}},
           "outputs": {"y": {"dims": ["batch", "seq", 6], "time_axis": 1}}, "chunk_multiple": 1}
    for key, value in change.items():
        if key == "initial":
            state["initial"] = value
        else:
            raw[key] = value
    return {STREAMING_KEY: json.dumps(raw)}


def test_an_old_record_still_reads_and_a_computed_state_needs_its_first_input() -> None:
    ranks_in, ranks_out = {"x": 3, "rnn.h_in": 3, "first_chunk": 0}, {"y": 3, "rnn.h_out": 3}
    old = read_streaming(_record(), ranks_in, ranks_out)
    assert old is not None and old.first is None and old.states[0].initial == "zeros"
    assert json.loads(old.to_json())["version"] == 1  # written back as readers before version 2 read it
    new = read_streaming(_record(version=2, initial="computed", first="first_chunk"), ranks_in, ranks_out)
    assert new is not None and new.first == "first_chunk" and new.states[0].initial == "computed"
    for bad, field in [(dict(initial="computed"), "initial"), (dict(version=2, initial="computed"), "first"),
                       (dict(version=2, initial="computed", first="x"), "first"), (dict(initial="learned"), "initial"),
                       (dict(version=3), "version")]:
        with pytest.raises(rnnx.RNNXError, match=field):
            read_streaming(_record(**bad), ranks_in, ranks_out)
