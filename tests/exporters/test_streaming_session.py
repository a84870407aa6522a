"""StreamingSession's edges, as a new user meets them: a first chunk ONNX Runtime refuses fixes
nothing, float64 arrays and lists are cast where nothing is lost, an fp16 file takes float32
chunks, and a cache whose width follows a feature axis the file leaves dynamic is sized from the
first chunk (it was "feed this state yourself")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.streaming import read_streaming  # noqa: E402


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(5, 7, batch_first=True)
        self.out = torch.nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(x)[0])


class FreeWidthCRN(torch.nn.Module):
    """Two causal Conv2d with frequency stride 2 over (B, 1, T, F), a mean over frequency, a GRU."""

    def __init__(self) -> None:
        super().__init__()
        self.pad1 = torch.nn.ZeroPad2d((0, 0, 1, 0))
        self.conv1 = torch.nn.Conv2d(1, 4, (2, 3), stride=(1, 2))
        self.pad2 = torch.nn.ZeroPad2d((0, 0, 1, 0))
        self.conv2 = torch.nn.Conv2d(4, 8, (2, 3), stride=(1, 2))
        self.rnn = torch.nn.GRU(8, 6, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv2(self.pad2(torch.relu(self.conv1(self.pad1(x))))))
        return self.rnn(y.mean(-1).transpose(1, 2))[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, torch.nn.Module]]:
    folder = tmp_path_factory.mktemp("session")
    torch.manual_seed(0)
    tagger, crn = Tagger().eval(), FreeWidthCRN().eval()
    made = {"tagger": (folder / "t.onnx", tagger, (torch.randn(1, 6, 5),), {}),
            "fp16": (folder / "t16.onnx", tagger, (torch.randn(1, 6, 5),), {"precision": "fp16"}),
            "crn": (folder / "crn.onnx", crn, (torch.randn(1, 1, 12, 33),), {})}
    for path, model, example, options in made.values():
        assert rnnx.export(model, example, path, streaming=True, **options).passed
    return {k: (v[0], v[1]) for k, v in made.items()}


def _whole(model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(np.ascontiguousarray(x, np.float32))).numpy()


def test_a_refused_first_chunk_fixes_no_batch(files) -> None:
    path, model = files["tagger"]
    session = rnnx.StreamingSession(path)
    with pytest.raises(rnnx.RNNXError, match="ONNX Runtime could not run"):
        session.process(np.zeros((1, 3, 4), np.float32))  # 4 features where the model takes 5
    x = np.random.default_rng(0).standard_normal((3, 6, 5)).astype(np.float32)
    got = np.concatenate([session.process(x[:, t:t + 2])["output"] for t in range(0, 6, 2)], 1)
    assert session.batch == 3 and np.abs(got - _whole(model, x)).max() < 1e-5


def test_float64_arrays_and_lists_are_cast_and_lossy_casts_refused(files) -> None:
    path, model = files["tagger"]
    x = np.random.default_rng(1).standard_normal((1, 4, 5))
    session = rnnx.StreamingSession(path)
    first = session.process(x[:, :2])["output"]  # float64
    second = session.process(x[:, 2:].tolist())["output"]  # a list of floats
    assert np.abs(np.concatenate([first, second], 1) - _whole(model, x)).max() < 1e-5
    with pytest.raises(rnnx.RNNXError, match="does not cast to it without loss"):
        rnnx.StreamingSession(path).process(np.ones((1, 2, 5), np.complex64))


def test_an_fp16_file_takes_float32_chunks_and_refuses_values_past_its_range(files) -> None:
    path, model = files["fp16"]
    x = np.random.default_rng(2).standard_normal((1, 6, 5)).astype(np.float32)
    session = rnnx.StreamingSession(path)
    got = np.concatenate([session.process(x[:, t:t + 3])["output"] for t in (0, 3)], 1)
    assert got.dtype == np.float16 and np.abs(got.astype(np.float32) - _whole(model, x)).max() < 2e-2
    with pytest.raises(rnnx.RNNXError, match="past its range"):
        rnnx.StreamingSession(path).process(np.full((1, 2, 5), 1e6, np.float32))


def test_a_cache_whose_width_the_file_leaves_dynamic_is_sized_from_the_first_chunk(files) -> None:
    path, model = files["crn"]
    import onnx

    record = read_streaming({p.key: p.value for p in onnx.load(path).metadata_props})
    assert any(isinstance(d, str) and d != "batch" for s in record.states for d in s.dims)  # the case this test is for
    x = np.random.default_rng(3).standard_normal((3, 1, 9, 33)).astype(np.float32)
    for chunk in (1, 3, 9):
        session = rnnx.StreamingSession(path)
        got = np.concatenate([session.process(x[:, :, t:t + chunk])["output"] for t in range(0, 9, chunk)], 1)
        assert np.abs(got - _whole(model, x)).max() < 1e-5, chunk
