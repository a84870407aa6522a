"""The ``rnnx.streaming`` record as a runtime reads it, on files whose graph leaves dims unnamed.

A Python loop over the frames re-rolled into an ONNX ``Loop`` gives its stacked output no label
at all, and a batch-1 example leaves the batch named after an input (``x_dim0``): the record
still says ``"batch"`` for every batch axis and the chunk's label for every output's frames, so
that the plain-ONNX-Runtime loop of docs/streaming.md (run here as the docs show it) sizes its
states from the record alone. A loop that steps through two inputs' frames while the file would
cut only one of them is refused in one line naming the line that raised; fed as one input, the
same policy streams, episodes starting mid-stream, at any chunk.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
nn = torch.nn

import rnnx  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "streaming.md"


class RunningNorm(nn.Module):
    """Per-frame features normalised by a running mean and power kept in a Python loop (online CMVN), then a GRU and a head."""

    def __init__(self, feats: int = 10, hidden: int = 12, out: int = 3) -> None:
        super().__init__()
        self.gru = nn.GRU(feats, hidden, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.zeros_like(x[:, 0])
        power = torch.ones_like(x[:, 0])
        frames = []
        for t in range(x.shape[1]):
            mean = 0.95 * mean + 0.05 * x[:, t]
            power = 0.95 * power + 0.05 * x[:, t] ** 2
            frames.append((x[:, t] - mean) / torch.sqrt(power - mean**2 + 1e-3))
        y, _ = self.gru(torch.stack(frames, 1))
        return self.head(y)


class PeepCell(nn.Module):
    """An LSTM cell written out by hand (one Linear over [x, h], gates by chunk), stepped over the frames, then a head."""

    def __init__(self, feats: int = 7, hidden: int = 9, out: int = 2) -> None:
        super().__init__()
        self.hidden = hidden
        self.gates = nn.Linear(feats + hidden, 4 * hidden)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.hidden)
        c = x.new_zeros(x.shape[0], self.hidden)
        ys = []
        for t in range(x.shape[1]):
            i, f, g, o = self.gates(torch.cat([x[:, t], h], 1)).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            ys.append(h)
        return self.head(torch.stack(ys, 1))


class DonePolicy(nn.Module):
    """An actor-critic policy stepped over a rollout, its state zeroed where an episode starts (``dones``)."""

    def __init__(self, obs: int = 5, hidden: int = 8, actions: int = 3) -> None:
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Sequential(nn.Linear(obs, hidden), nn.ReLU())
        self.cell = nn.GRUCell(hidden, hidden)
        self.actor = nn.Linear(hidden, actions)
        self.critic = nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor, dones: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.embed(obs)
        h = z.new_zeros(z.shape[0], self.hidden)
        hs = []
        for t in range(dones.shape[1]):
            h = self.cell(z[:, t], h * (1 - dones[:, t, None]))
            hs.append(h)
        hs = torch.stack(hs, 1)
        return self.actor(hs), self.critic(hs)


class PackedPolicy(DonePolicy):
    """The same policy fed one tensor: the episode-start flag is the observation's last channel."""

    def forward(self, obs_and_dones: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return super().forward(obs_and_dones[..., :-1], obs_and_dones[..., -1])


def _record(path: Path) -> dict[str, Any]:
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    return json.loads(meta["rnnx.streaming"])


def _export(model: nn.Module, example: tuple[Any, ...], path: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    rnnx.export(model.eval(), example, path, streaming=True)
    return _record(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[nn.Module, Path, dict[str, Any]]]:
    """A re-rolled Loop's file and a native-LSTM file, each from a batch-1 example."""
    folder = tmp_path_factory.mktemp("records")
    out = {}
    for name, model, example in (("loop", RunningNorm(), torch.randn(1, 8, 10)), ("native", PeepCell(), torch.randn(1, 6, 7))):
        torch.manual_seed(3)
        model = model.eval()
        out[name] = (model, folder / f"{name}.onnx", _export(model, (example,), folder / f"{name}.onnx"))
    return out


def test_the_record_names_the_batch_and_each_output_s_frames(files: dict[str, tuple[nn.Module, Path, dict[str, Any]]]) -> None:
    loop = files["loop"][2]
    assert loop["outputs"]["output"] == {"dims": ["batch", loop["time"], 3], "time_axis": 1}  # a Loop's stacked output: unnamed in the graph
    assert loop["inputs"]["x"]["dims"] == ["batch", loop["time"], 10]
    native = files["native"][2]
    assert native["outputs"]["output"]["dims"] == ["batch", native["time"], 2]
    for record in (loop, native):
        for state in record["states"]:
            assert state["batch_axis"] is not None, state
            assert [d for d in state["dims"] if isinstance(d, str)] == ["batch"], state  # not x_dim0: the docs' loop replaces "batch"
            assert state["dims"][state["batch_axis"]] == "batch"


def _docs_loop() -> str:
    """The plain-ONNX-Runtime loop docs/streaming.md shows, as it shows it."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    found = [b for b in blocks if 'custom_metadata_map["rnnx.streaming"]' in b]
    assert len(found) == 1, "docs/streaming.md: expected one plain-ONNX-Runtime loop"
    return found[0]


@pytest.mark.parametrize("which", ["loop", "native"])
def test_the_docs_plain_onnx_runtime_loop_streams_the_file(files: dict[str, tuple[nn.Module, Path, dict[str, Any]]], which: str) -> None:
    model, path, record = files[which]
    name = next(iter(record["inputs"]))
    code = _docs_loop()
    assert '"vad.onnx"' in code and '"feats": chunk' in code  # the docs' names, replaced by this file's
    code = code.replace('"vad.onnx"', repr(str(path))).replace('"feats": chunk', f"{name!r}: chunk")
    for batch, frames, cut in ((3, 13, (1, 5, 2, 5)), (1, 9, (4, 1, 4))):
        x = torch.randn(batch, frames, 10 if which == "loop" else 7, generator=torch.Generator().manual_seed(frames))
        starts = np.cumsum((0, *cut))[:-1]
        got: list[np.ndarray] = []
        scope: dict[str, Any] = {"np": np, "json": json, "ort": ort, "batch": batch}

        def chunks(scope: dict[str, Any] = scope, starts: Any = starts, x: torch.Tensor = x, got: list[np.ndarray] = got) -> Any:
            for s, n in zip(starts, cut):
                yield x[:, s:s + n].numpy()
                got.append(scope["out"]["output"])  # the loop body for this chunk has run

        scope["chunks"] = chunks()
        exec(code, scope)  # noqa: S102  the docs' own lines
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.concatenate(got, 1), want, atol=1e-5, rtol=1e-4, err_msg=f"{which}, batch {batch}")


def test_a_loop_over_another_input_s_frames_is_refused_in_one_line(tmp_path: Path) -> None:
    torch.manual_seed(0)
    example = (torch.randn(1, 8, 5), torch.tensor([[1.0, 0, 0, 1, 0, 0, 0, 1]]))
    with pytest.raises(RNNXError) as caught:
        rnnx.export(DonePolicy().eval(), example, tmp_path / "p.onnx", streaming=True)
    message = str(caught.value)
    assert "\n" not in message
    assert "IndexError" in message and "test_streaming_records.py" in message and "self.cell(z[:, t]" in message  # the line that raised
    assert "feed the frames in one input" in message
    assert not (tmp_path / "p.onnx").exists()


def test_the_policy_fed_as_one_input_streams_with_episodes_starting_mid_stream(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = PackedPolicy().eval()
    example = torch.cat([torch.randn(1, 8, 5), torch.tensor([[1.0, 0, 0, 1, 0, 0, 0, 1]])[..., None]], -1)
    record = _export(model, (example,), tmp_path / "p.onnx")
    assert record["outputs"]["output_0"]["dims"] == ["batch", record["time"], 3]
    for batch, frames in ((1, 17), (3, 22)):
        g = torch.Generator().manual_seed(batch * 100 + frames)
        dones = (torch.rand(batch, frames, generator=g) < 0.25).float()
        dones[:, 0] = 1.0
        dones[:, frames // 2] = 1.0  # an episode starts inside a chunk, and past the first
        x = torch.cat([torch.randn(batch, frames, 5, generator=g), dones[..., None]], -1)
        with torch.no_grad():
            want = [w.double().numpy() for w in model.double()(x.double())]
        model.float()
        for chunk in (1, 3, 7, frames):
            session = rnnx.StreamingSession(tmp_path / "p.onnx")
            pieces = [session.process(x[:, s:s + chunk].numpy()) for s in range(0, frames, chunk)]
            for name, w in zip(("output_0", "output_1"), want):
                got = np.concatenate([p[name] for p in pieces], 1)
                np.testing.assert_allclose(got, w, atol=2e-6, rtol=1e-5, err_msg=f"{name}, chunks of {chunk}, batch {batch}")
