"""Issue 46: a Python loop over the frames streams. The values each step hands the next are the
streaming file's states, zeros (or what the model computes) on a stream's first chunk.

Each model is written as its style is written in the wild, exported with streaming=True from a
batch-1 example of 8 frames, and streamed by rnnx.StreamingSession in chunks of 1, 3 and 7 frames
and whole (19 frames, a length never traced) at batch 1 and 3, against torch on the whole
sequence: a hand-written LSTM cell (fused into one native LSTM node), an nn.LSTMCell whose h goes
through a LayerNorm before the next step (one ONNX Loop) in the default run; with --slow, a
layer-normalised cell module stepped over time-major frames, an exponential moving average over
the frames before an nn.GRU, a GRUCell with work between its steps, a moving average started from
the first frame and a hand-written GRU started from a speaker embedding (states the file
computes on the first chunk), the TorchScript route, and the command line.

A loop that cannot stream is refused before tracing, naming the call and the line of code (a step
that reads the next frame, a loop started from or reading a mean over the frames, a value from two
steps before); a loop the trace left unrolled is refused with the re-roll's own reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from tests.helpers import MadeOnFirstUse, model_file  # noqa: E402

FRAMES = 19  # never traced: the examples have 8
ATOL = 1e-5

MODELS = '''
import torch
from torch import nn


class HandLSTM(nn.Module):
    """An LSTM cell written by hand (Linear layers, gates by chunk, sigmoid and tanh), looped over x[:, t] from zeros."""

    def __init__(self, n_in=5, n_h=6):
        super().__init__()
        self.ih, self.hh, self.head, self.n_h = nn.Linear(n_in, 4 * n_h), nn.Linear(n_h, 4 * n_h), nn.Linear(n_h, 3), n_h

    def forward(self, x):
        h = torch.zeros(x.size(0), self.n_h)
        c = torch.zeros(x.size(0), self.n_h)
        outs = []
        for t in range(x.size(1)):
            i, f, g, o = (self.ih(x[:, t]) + self.hh(h)).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        return self.head(torch.stack(outs, 1))


class CellLayerNorm(nn.Module):
    """nn.LSTMCell whose h goes through a LayerNorm before the head and the next step, over x.unbind(1)."""

    def __init__(self):
        super().__init__()
        self.cell, self.ln, self.out = nn.LSTMCell(5, 8), nn.LayerNorm(8), nn.Linear(8, 2)

    def forward(self, x):
        h = c = torch.zeros(x.shape[0], 8)
        ys = []
        for x_t in x.unbind(1):
            h, c = self.cell(x_t, (h, c))
            h = self.ln(h)
            ys.append(self.out(h))
        return torch.stack(ys, 1)


class LNCell(nn.Module):
    """A layer-normalised LSTM cell: LayerNorm on the gates and on c."""

    def __init__(self, n_in, n_h):
        super().__init__()
        self.x2h, self.h2h = nn.Linear(n_in, 4 * n_h), nn.Linear(n_h, 4 * n_h, bias=False)
        self.ln_gates, self.ln_c = nn.LayerNorm(4 * n_h), nn.LayerNorm(n_h)

    def forward(self, x, state):
        h, c = state
        i, f, g, o = self.ln_gates(self.x2h(x) + self.h2h(h)).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(self.ln_c(c)), c


class LayerNormLSTM(nn.Module):
    """The layer-normalised cell stepped over time-major frames (frames, batch, features)."""

    def __init__(self, n_in=5, n_h=7):
        super().__init__()
        self.cell, self.n_h = LNCell(n_in, n_h), n_h

    def forward(self, x):
        state = (x.new_zeros(x.size(1), self.n_h), x.new_zeros(x.size(1), self.n_h))
        outs = []
        for x_t in x:
            state = self.cell(x_t, state)
            outs.append(state[0])
        return torch.stack(outs)


class SmoothedGRU(nn.Module):
    """An exponential moving average over the frames, m = a*m + (1-a)*x[:, t], before an nn.GRU."""

    def __init__(self, a=0.9):
        super().__init__()
        self.gru, self.a = nn.GRU(5, 6, batch_first=True), a

    def forward(self, x):
        avg = torch.zeros_like(x[:, 0])
        smooth = []
        for t in range(x.shape[1]):
            avg = self.a * avg + (1 - self.a) * x[:, t]
            smooth.append(avg)
        return self.gru(torch.stack(smooth, 1))[0]


class GatedGRUCell(nn.Module):
    """A GRUCell with work between its steps: a learned gate on the state fed back."""

    def __init__(self):
        super().__init__()
        self.cell, self.gate, self.out = nn.GRUCell(5, 6), nn.Linear(6, 6), nn.Linear(6, 3)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], 6)
        ys = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            h = h * torch.sigmoid(self.gate(h))
            ys.append(self.out(h))
        return torch.stack(ys, 1)


class FirstFrameAverage(SmoothedGRU):
    """The moving average started from the first frame: a state the model computes."""

    def forward(self, x):
        avg = x[:, 0]
        smooth = []
        for t in range(x.shape[1]):
            avg = 0.8 * avg + 0.2 * x[:, t]
            smooth.append(avg)
        return self.gru(torch.stack(smooth, 1))[0]


class SpeakerGRU(nn.Module):
    """A GRU cell written by hand, started from tanh(Linear(speaker)): the speaker is fed whole with every chunk."""

    def __init__(self):
        super().__init__()
        self.init, self.ih, self.hh, self.out = nn.Linear(4, 6), nn.Linear(5, 18), nn.Linear(6, 18), nn.Linear(6, 2)

    def forward(self, x, speaker):
        h = torch.tanh(self.init(speaker))
        outs = []
        for t in range(x.shape[1]):
            xr, xz, xn = self.ih(x[:, t]).chunk(3, 1)
            hr, hz, hn = self.hh(h).chunk(3, 1)
            z = torch.sigmoid(xz + hz)
            h = (1 - z) * torch.tanh(xn + torch.sigmoid(xr + hr) * hn) + z * h
            outs.append(self.out(h))
        return torch.stack(outs, 1)


class FilterbankLSTM(HandLSTM):
    """The hand-written cell after a clamped filterbank, an op the dynamo route cannot translate: the TorchScript route makes the file."""

    def __init__(self):
        super().__init__()
        self.fb = nn.Parameter(torch.rand(5, 5))

    def forward(self, x):
        return super().forward(x @ torch.clamp(self.fb, 0, 1.0))


def hand_lstm():
    torch.manual_seed(0)
    return HandLSTM().eval(), (torch.randn(1, 8, 5),)
'''

# name -> (class, time axis, the speaker's size where it takes one)
STYLES: dict[str, tuple[str, int, int]] = {
    "hand": ("HandLSTM", 1, 0), "cell_ln": ("CellLayerNorm", 1, 0), "ln_lstm": ("LayerNormLSTM", 0, 0), "smoothed": ("SmoothedGRU", 1, 0),
    "gated": ("GatedGRUCell", 1, 0), "first_frame": ("FirstFrameAverage", 1, 0), "speaker": ("SpeakerGRU", 1, 4),
    "filterbank": ("FilterbankLSTM", 1, 0),
}
SLOW = {"ln_lstm", "smoothed", "gated", "first_frame", "speaker", "filterbank"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("loops") / "loops.py"
    return path, model_file(path, MODELS)


def _example(name: str, batch: int, frames: int, seed: int) -> tuple[Any, ...]:
    _, axis, speaker = STYLES[name]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*((batch, frames, 5) if axis == 1 else (frames, batch, 5)), generator=g)
    return (x, torch.randn(batch, speaker, generator=g)) if speaker else (x,)


@pytest.fixture(scope="module")
def files(models: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> MadeOnFirstUse:
    """Each style exported with streaming=True from a batch-1 example of 8 frames: name -> (model, path, report)."""
    folder = tmp_path_factory.mktemp("streamed")

    def made(name: str) -> tuple[Any, Path, Any]:
        torch.manual_seed(0)
        model = models[1][STYLES[name][0]]().eval()
        path = folder / f"{name}.onnx"
        return model, path, rnnx.export(model, _example(name, 1, 8, 0), path, streaming=True)

    return MadeOnFirstUse({name: (lambda name=name: made(name)) for name in STYLES})


def _streamed(path: Path, example: tuple[Any, ...], axis: int, chunk: int, **given: np.ndarray) -> np.ndarray:
    """The file run by StreamingSession chunk after chunk (the frames cut along ``axis``, any other input fed whole)."""
    session = rnnx.StreamingSession(path)
    x, rest = example[0].numpy(), {"speaker": example[1].numpy()} if len(example) > 1 else {}
    frames = x.shape[axis]
    outs = [session.process(np.take(x, range(t, min(t + chunk, frames)), axis=axis), **rest, **given)["output"] for t in range(0, frames, chunk)]
    return np.concatenate(outs, axis=axis)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in STYLES])
def test_a_loop_streams_chunk_by_chunk_as_the_whole_sequence(files: MadeOnFirstUse, name: str) -> None:
    model, path, report = files[name]
    assert report.passed and report.written, str(report)
    record = rnnx.StreamingSession(path).record
    states = {s.input: s for s in record.states}
    computed = name in ("first_frame", "speaker")
    assert all(s.initial == ("computed" if computed else "zeros") for s in states.values() if s.module != "gru"), states
    assert (record.first is not None) == computed
    axis = STYLES[name][1]
    for batch in (1, 3):
        example = _example(name, batch, FRAMES, 10 + batch)
        with torch.no_grad():
            want = model(*example).numpy()
        for chunk in (1, 3, 7, FRAMES):
            got = _streamed(path, example, axis, chunk)
            assert got.shape == want.shape and np.abs(got - want).max() < ATOL, (name, batch, chunk, np.abs(got - want).max())


def test_a_hand_written_lstm_cell_streams_as_one_native_lstm(files: MadeOnFirstUse) -> None:
    model, path, report = files["hand"]
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("LSTM") == 1 and "Loop" not in ops, ops
    assert "c_in -> c_out, h_in -> h_out" in " ".join(report.notes)  # named after the variables the loop hands on
    # the states matter: a stream whose every chunk starts from zeros parts from the whole sequence
    example = _example("hand", 3, FRAMES, 5)
    with torch.no_grad():
        want = model(*example).numpy()
    zeros = {name: np.zeros((3, 6), np.float32) for name in ("h_in", "c_in")}
    assert np.abs(_streamed(path, example, 1, 7, **zeros) - want).max() > 1e-2
    assert np.abs(_streamed(path, example, 1, 7) - want).max() < ATOL


def test_a_cell_whose_h_goes_through_a_layer_norm_streams_as_one_loop(files: MadeOnFirstUse) -> None:
    _, path, _ = files["cell_ln"]
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("Loop") == 1, ops
    # the loop carries the normalised h, not the cell's raw output: the cell has no slot of its own
    assert {s.input for s in rnnx.StreamingSession(path).record.states} == {"h_in", "c_in"}


# --- refused, naming the call and the line ------------------------------------------------------------

MARK = "# <-"
REFUSED = '''
import torch
from torch import nn


class LookAhead(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(10, 6)

    def forward(self, x):
        h, outs, last = x.new_zeros(x.size(0), 6), [], x.size(1) - 1
        for t in range(x.size(1)):
            ahead = x[:, min(t + 1, last)]  # <-
            h = self.cell(torch.cat([x[:, t], ahead], 1), h)
            outs.append(h)
        return torch.stack(outs, 1)


class StartsFromMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 6, batch_first=True)

    def forward(self, x):
        avg = x.mean(1)  # <-
        smooth = []
        for t in range(x.size(1)):
            avg = 0.9 * avg + 0.1 * x[:, t]
            smooth.append(avg)
        return self.gru(torch.stack(smooth, 1))[0]


class ReadsMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(10, 6)

    def forward(self, x):
        context = x.mean(1)  # <-
        h, outs = x.new_zeros(x.size(0), 6), []
        for t in range(x.size(1)):
            h = self.cell(torch.cat([x[:, t], context], 1), h)
            outs.append(h)
        return torch.stack(outs, 1)


class TwoStepsBack(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(11, 6)

    def forward(self, x):
        hs = [x.new_zeros(x.size(0), 6), x.new_zeros(x.size(0), 6)]
        for t in range(x.size(1)):
            both = torch.cat([x[:, t], hs[-2]], 1)  # <-
            hs.append(torch.tanh(self.lin(both)))
        return torch.stack(hs[2:], 1)


class CarriesNothing(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 5)

    def forward(self, x):
        return torch.stack([self.lin(x[:, t]) for t in range(x.size(1))], 1)
'''

REFUSALS = {  # class -> what the message says
    "LookAhead": "expected each step of the loop over the frames to read only the frames up to its own, found its __getitem__",
    "StartsFromMean": "(avg = 0.9 * avg + 0.1 * x[:, t]) starting avg from a value that changes with frames after t: mean",
    "ReadsMean": "reading a value that changes with frames after t: mean",
    "TwoStepsBack": "reading a value made 2 steps before; rnnx carries one step's values to the next",
    "CarriesNothing": "or a Python loop over the frames that hands a value from step to step, found none",
}


def _refused(tmp_path: Path, source: str, name: str, stem: str) -> str:
    ns = model_file(tmp_path / f"{stem}.py", source)
    torch.manual_seed(0)
    with pytest.raises(rnnx.RNNXError) as refused:
        rnnx.export(ns[name]().eval(), (torch.randn(1, 8, 5),), tmp_path / f"{stem}.onnx", streaming=True)
    assert not (tmp_path / f"{stem}.onnx").exists()
    message = str(refused.value)
    assert "\n" not in message and message.startswith("streaming: expected"), message
    return message


@pytest.mark.parametrize("name", list(REFUSALS))
def test_a_loop_that_cannot_stream_is_refused_naming_the_line(tmp_path: Path, name: str) -> None:
    message = _refused(tmp_path, REFUSED, name, "refused")
    assert REFUSALS[name] in message, message
    source = REFUSED[REFUSED.index(f"class {name}("):].split("\nclass ")[0]
    marked = [line for line in source.splitlines() if line.endswith(MARK)]
    if not marked:  # about the model as a whole: no line
        return
    number = REFUSED.splitlines().index(marked[0]) + 1
    assert re.search(rf"\brefused\.py:{number} \(", message), message
    # the named line moves with the code: three blank lines before it
    lines = REFUSED.splitlines()
    moved = "\n".join(lines[:number - 1] + [""] * 3 + lines[number - 1:])
    again = _refused(tmp_path, moved, name, "moved")
    assert f"moved.py:{number + 3} (" in again and f"moved.py:{number} (" not in again, again


def test_a_loop_left_unrolled_is_refused_for_the_reroll_s_reason(models: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Not 'step the cell over the input' (it does): the length asked static keeps the loop unrolled, and the message says so."""
    torch.manual_seed(0)
    model = models[1]["CellLayerNorm"]().eval()
    with pytest.raises(rnnx.RNNXError) as refused:
        rnnx.export(model, _example("cell_ln", 1, 8, 0), tmp_path / "s.onnx", streaming=True, static={"x": [1]})
    message = str(refused.value)
    assert ("found none: the Python loop over the frames was traced at the example's length and stays unrolled there (x: its length was asked "
            "static") in message, message
    assert "step the cell over the input" not in message


@pytest.mark.slow
def test_the_command_line_exports_and_verifies_a_loop_chunk_by_chunk(models: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.main import main

    path, _ = models
    out = tmp_path / "hand.onnx"
    assert main(["export", f"{path}:hand_lstm", "--streaming", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["written"]
    assert main(["verify", str(out), "--against", f"{path}:hand_lstm", "--chunks", "1,3,7", "--batch", "1,3", "--json"]) == 0
    verified = json.loads(capsys.readouterr().out)
    assert verified["passed"], verified
