"""ONNX's reference evaluator, as rnnx runs it for golden outputs (engines/onnx_reference.py),
honours an LSTM's, GRU's or RNN's ``sequence_lens``: onnx's own implementation ignores it, and a
bundle's golden outputs past each sequence's end were then the padding's. Held against torch's
packed sequences in float64, for files torch.onnx writes (time-major nodes) and rnnx writes,
both directions, at lengths that vary within the batch, batch 1 included.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import rnnx  # noqa: E402
from rnnx.engines.onnx_reference import ReferenceRun  # noqa: E402

CELLS = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}


class Packed(torch.nn.Module):
    def __init__(self, cell: str, bidirectional: bool) -> None:
        super().__init__()
        self.rnn = CELLS[cell](5, 4, batch_first=True, bidirectional=bidirectional)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, _ = self.rnn(packed)
        return torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])[0]


def _torch_onnx(model: torch.nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> object:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x, lengths), f, input_names=["x", "lengths"], output_names=["y"], opset_version=17, dynamo=False,
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "lengths": {0: "batch"}})
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_the_reference_honours_sequence_lengths(cell: str, bidirectional: bool, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Packed(cell, bidirectional).eval()
    x, lengths = torch.randn(3, 9, 5), torch.tensor([9, 4, 6])
    files = {"torch.onnx": _torch_onnx(model, x, lengths)}
    assert rnnx.export(model, (x, lengths), tmp_path / "m.onnx").passed
    files["rnnx"] = onnx.load(str(tmp_path / "m.onnx"))
    reference = model.double()
    rng = np.random.default_rng(1)
    for batch, seq in ((1, 5), (4, 11)):
        xs = rng.standard_normal((batch, seq, 5))
        lens = np.sort(rng.integers(1, seq + 1, batch))[::-1].copy()
        lens[0] = seq
        lens[-1] = max(1, seq // 3) if batch > 1 else seq
        want = reference(torch.from_numpy(xs), torch.from_numpy(lens)).detach().numpy()
        for producer, proto in files.items():
            names = [i.name for i in proto.graph.input]
            got = next(iter(ReferenceRun(proto, "float64")(dict(zip(names, (xs, lens.astype(np.int64))))).values()))
            assert got.shape == want.shape and np.abs(got - want).max() < 1e-10, (producer, batch, seq, np.abs(got - want).max())
