"""Issue 46: recurrent layers written by hand, one Python loop each, the first's stacked output
the second's sequence. The trace unrolls both loops over the same number of steps; each is
re-rolled into its own ONNX Loop (the producer first), the length dynamic.

Each model is exported with rnnx.export from a batch-1 example of 8 frames and run in ONNX
Runtime at lengths never traced (1, 5, 13) at batch 1 and 3 against torch: two layer-normalised
LSTM cells, a GRUCell under a hand-written cell ONNX has no node for, three stacked layers, and a
forward layer under one that runs backwards (``for t in reversed(range(T))``, read in the Loop as
``Gather(S, T-1-i)``). The two-layer model is also exported with streaming=True and streamed by
rnnx.StreamingSession in chunks of 1, 3, 7 and whole against torch's whole sequence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from tests.helpers import MadeOnFirstUse, model_file  # noqa: E402

ATOL = 1e-5
LENGTHS = (1, 5, 13)  # never traced: the examples have 8

MODELS = '''
import torch
from torch import nn


class LNCell(nn.Module):
    """An LSTM cell written by hand, its c layer-normalised before the output's tanh."""

    def __init__(self, n_in, n_h):
        super().__init__()
        self.x2h, self.h2h, self.ln_c = nn.Linear(n_in, 4 * n_h), nn.Linear(n_h, 4 * n_h, bias=False), nn.LayerNorm(n_h)

    def forward(self, x, h, c):
        i, f, g, o = (self.x2h(x) + self.h2h(h)).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(self.ln_c(c)), c


class StackedLN(nn.Module):
    """Layers of LNCell, each its own loop over the frames of the layer below."""

    def __init__(self, layers=2, n_in=5, n_h=6):
        super().__init__()
        self.cells, self.n_h = nn.ModuleList(LNCell(n_in if k == 0 else n_h, n_h) for k in range(layers)), n_h

    def forward(self, x):
        y = x
        for cell in self.cells:
            h = c = x.new_zeros(x.size(0), self.n_h)
            outs = []
            for t in range(y.size(1)):
                h, c = cell(y[:, t], h, c)
                outs.append(h)
            y = torch.stack(outs, 1)
        return y


class GRUThenMinGated(nn.Module):
    """A GRUCell loop, then a minimal gated unit written by hand (one forget gate, its candidate
    reading f * h), which no ONNX node holds."""

    def __init__(self, n_in=5, n_h=6):
        super().__init__()
        self.gru, self.n_h = nn.GRUCell(n_in, n_h), n_h
        self.f_x, self.f_h = nn.Linear(n_h, n_h), nn.Linear(n_h, n_h, bias=False)
        self.c_x, self.c_h = nn.Linear(n_h, n_h), nn.Linear(n_h, n_h, bias=False)

    def forward(self, x):
        h = x.new_zeros(x.size(0), self.n_h)
        out1 = []
        for t in range(x.size(1)):
            h = self.gru(x[:, t], h)
            out1.append(h)
        y1 = torch.stack(out1, 1)
        m = x.new_zeros(x.size(0), self.n_h)
        out2 = []
        for t in range(y1.size(1)):
            f = torch.sigmoid(self.f_x(y1[:, t]) + self.f_h(m))
            m = (1 - f) * m + f * torch.tanh(self.c_x(y1[:, t]) + self.c_h(f * m))
            out2.append(m)
        return torch.stack(out2, 1)


class ForwardThenBackward(nn.Module):
    """A forward LNCell layer, then one that runs from the last frame to the first, its outputs
    put back in time order."""

    def __init__(self, n_in=5, n_h=6):
        super().__init__()
        self.fwd, self.bwd, self.n_h = LNCell(n_in, n_h), LNCell(n_h, n_h), n_h

    def forward(self, x):
        h = c = x.new_zeros(x.size(0), self.n_h)
        out1 = []
        for t in range(x.size(1)):
            h, c = self.fwd(x[:, t], h, c)
            out1.append(h)
        y1 = torch.stack(out1, 1)
        h = c = x.new_zeros(x.size(0), self.n_h)
        out2 = []
        for t in reversed(range(y1.size(1))):
            h, c = self.bwd(y1[:, t], h, c)
            out2.insert(0, h)
        return torch.stack(out2, 1)
'''

# name -> (class, its arguments, the recurrent nodes the file holds, slow); the GRUCell's loop is fused into a native GRU
STYLES: dict[str, tuple[str, dict[str, int], dict[str, int], bool]] = {
    "two_ln": ("StackedLN", {}, {"Loop": 2}, False),
    "gru_min_gated": ("GRUThenMinGated", {}, {"GRU": 1, "Loop": 1}, False),
    "three_ln": ("StackedLN", {"layers": 3}, {"Loop": 3}, True),
    "backward": ("ForwardThenBackward", {}, {"Loop": 2}, False),
}


def _x(batch: int, frames: int, seed: int) -> torch.Tensor:
    return torch.randn(batch, frames, 5, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return model_file(tmp_path_factory.mktemp("layers") / "layers.py", MODELS)


def _made(namespace: dict[str, Any], folder: Path, name: str, streaming: bool) -> tuple[Any, Path, Any]:
    cls, kwargs, _, _ = STYLES[name]
    torch.manual_seed(0)
    model = namespace[cls](**kwargs).eval()
    path = folder / f"{name}{'_stream' if streaming else ''}.onnx"
    return model, path, rnnx.export(model, (_x(1, 8, 0),), path, streaming=streaming)


@pytest.fixture(scope="module")
def files(namespace: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> MadeOnFirstUse:
    """Each style exported from a batch-1 example of 8 frames: name -> (model, path, report)."""
    folder = tmp_path_factory.mktemp("exported")
    return MadeOnFirstUse({name: (lambda name=name: _made(namespace, folder, name, False)) for name in STYLES})


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if STYLES[n][3] else n for n in STYLES])
def test_layers_each_a_python_loop_export_one_loop_each_right_at_new_lengths(files: MadeOnFirstUse, name: str) -> None:
    model, path, report = files[name]
    assert report.passed and report.written, str(report)
    proto = onnx.load(str(path))
    ops = [n.op_type for n in proto.graph.node]
    assert {op: ops.count(op) for op in ("GRU", "LSTM", "Loop") if op in ops} == STYLES[name][2], ops
    assert proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param, "the length is dynamic"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name
    for batch in (1, 3):
        for frames in LENGTHS:
            x = _x(batch, frames, 100 * batch + frames)
            with torch.no_grad():
                want = model(x).numpy()
            got = session.run(None, {feed: x.numpy()})[0]
            assert got.shape == want.shape and np.abs(got - want).max() < ATOL, (name, batch, frames, np.abs(got - want).max())


def test_the_backward_layer_reads_its_frames_from_the_last(files: MadeOnFirstUse) -> None:
    """The second Loop reads Gather(S, T-1-i); read forwards it would give other values (the
    parity above would fail), and the stack is put back in time order."""
    _, path, _ = files["backward"]
    loops = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Loop"]
    subs = [[m.op_type for m in loop.attribute[0].g.node].count("Sub") for loop in loops]
    assert sorted(subs) == [0, 2], subs


def test_two_layers_each_a_python_loop_stream_chunk_by_chunk_as_the_whole_sequence(namespace: dict[str, Any], tmp_path: Path) -> None:
    model, path, report = _made(namespace, tmp_path, "two_ln", streaming=True)
    assert report.passed and report.written, str(report)
    record = rnnx.StreamingSession(path).record
    assert len(record.states) == 4, record.states  # h and c of each layer
    frames = 19
    for batch in (1, 3):
        x = _x(batch, frames, 10 + batch).numpy()
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        for chunk in (1, 3, 7, frames):
            session = rnnx.StreamingSession(path)
            got = np.concatenate([session.process(x[:, t:t + chunk])["output"] for t in range(0, frames, chunk)], axis=1)
            assert got.shape == want.shape and np.abs(got - want).max() < ATOL, (batch, chunk, np.abs(got - want).max())
