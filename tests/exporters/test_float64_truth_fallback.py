"""The streaming probes and the determinism check take torch's float64 copy from
rnnx.check.truths.TorchTruth: where the copy runs, they run in float64; where the model's forward
makes float32 tensors of its own (zeros for h), they fall back to the model's own dtype, say so in
the notes, and still check."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import rnnx  # noqa: E402
from rnnx.exporters.determinism import check_determinism  # noqa: E402
from rnnx.exporters.stream_context import study  # noqa: E402


class Float32State(nn.Module):
    """A causal conv into an LSTM whose initial state is made in float32 inside forward: its float64 copy raises."""

    def __init__(self, centered: bool = False, noisy: bool = False, float32_state: bool = True) -> None:
        super().__init__()
        self.centered, self.noisy, self.float32_state = centered, noisy, float32_state
        self.conv = nn.Conv1d(4, 6, kernel_size=3)
        self.rnn = nn.LSTM(6, 5, batch_first=True)

    def forward(self, x: Any) -> Any:
        x = self.conv(F.pad(x.transpose(1, 2), (1, 1) if self.centered else (2, 0))).transpose(1, 2)
        h = torch.zeros(1, x.shape[0], 5, dtype=torch.float32)
        y, _ = self.rnn(x, (h, h)) if self.float32_state else self.rnn(x)
        return y * (1 + 0.05 * torch.rand(())) if self.noisy else y


def _flat(x: Any) -> tuple[list[Any], Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten((x,))


def test_the_causality_probe_falls_back_to_the_models_dtype_with_a_note() -> None:
    torch.manual_seed(0)
    model = Float32State().eval()
    flat, structure = _flat(torch.randn(2, 8, 4))
    notes: list[str] = []
    context = study(model, flat, structure, [("rnn", model.rnn)], notes)
    assert context.time == (0, 1) and [c.module for c in context.caches] == ["conv"], context
    said = [n for n in notes if "float64 copy of the torch model raised" in n]
    assert len(said) == 1 and said[0].endswith("the causality probe run in the model's own dtype"), notes


def test_the_fallback_still_refuses_what_reads_later_frames() -> None:
    torch.manual_seed(0)
    model = Float32State(centered=True).eval()
    flat, structure = _flat(torch.randn(2, 8, 4))
    with pytest.raises(rnnx.RNNXError, match="found conv"):
        study(model, flat, structure, [("rnn", model.rnn)], [])


def test_the_determinism_check_runs_the_copy_in_float64_else_the_models_own_dtype() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 8, 4)
    flat, structure = _flat(x)
    leaves = [SimpleNamespace(value=v) for v in flat]
    assert check_determinism(Float32State().eval(), leaves, structure) is None  # deterministic, in float32
    with pytest.raises(rnnx.RNNXError, match=r"as given \(float32, eval mode\)"):
        check_determinism(Float32State(noisy=True).eval(), leaves, structure)
    with pytest.raises(rnnx.RNNXError, match=r"as given \(float64, eval mode\)"):  # where the copy runs, it is what ran
        check_determinism(Float32State(noisy=True, float32_state=False).eval(), leaves, structure)
