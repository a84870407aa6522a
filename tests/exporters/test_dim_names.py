"""A derived dimension in an exported file reads as a person writes it: a strided conv's output
length is ``(seq - 1) // 2 + 1``, not torch's ``(((seq - 1)//2)) + 1``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import rnnx  # noqa: E402
from rnnx.exporters.record import tidy_dim  # noqa: E402


class Strided(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, kernel_size=3, stride=2)
        self.rnn = torch.nn.GRU(6, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.rnn(self.conv(x.transpose(1, 2)).transpose(1, 2))[0]


def test_an_exported_strided_length_is_named_tidily(tmp_path: Path) -> None:
    torch.manual_seed(0)
    rnnx.export(Strided().eval(), (torch.randn(2, 15, 4),), tmp_path / "s.onnx")
    out = onnx.load(str(tmp_path / "s.onnx")).graph.output[0]
    dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert dims == ["batch", "(seq - 3) // 2 + 1", 5]


@pytest.mark.parametrize("text, tidy", [
    ("(((seq - 1)//2)) + 1", "(seq - 1) // 2 + 1"),
    ("2*seq", "2 * seq"),
    ("batch", "batch"),
    ("Add178_dim_0", "Add178_dim_0"),
    ("seq - (a - b)", "seq - (a - b)"),  # parentheses that matter stay
    ("unk__3 + ", "unk__3 + "),  # not an expression: as it is
])
def test_tidy_dim(text: str, tidy: str) -> None:
    assert tidy_dim(text) == tidy
