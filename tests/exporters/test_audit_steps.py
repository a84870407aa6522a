"""The dimension audit on a loop over time written with hand-written cells, which no module hook sees.

A GRU cell written from ``@`` and gate chunks is no ``nn`` module, so the audit's hooks cannot tell
that its Python loop follows the sequence's length. The trace unrolls the loop into the file, one
slice of the input per step; where the steps differ (here every other step uses its own weights, so
the loop cannot be one ONNX Loop) the file is fixed at the example's length. That file must not be
written: the audit calls the dimension a length the model takes and the file refuses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from rnnx.exporters.torch_export import export  # noqa: E402


class _AlternatingGRU(nn.Module):
    """A GRU written by hand, two weight sets taken in turn (even and odd steps): its steps differ."""

    def __init__(self, i: int = 5, h: int = 6) -> None:
        super().__init__()
        self.h = h
        self.W = nn.ParameterList([nn.Parameter(torch.randn(3 * h, i) * 0.3) for _ in range(2)])
        self.U = nn.ParameterList([nn.Parameter(torch.randn(3 * h, h) * 0.3) for _ in range(2)])
        self.out = nn.Linear(h, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.h)
        outs = []
        for t in range(x.shape[1]):
            gi, gh = x[:, t] @ self.W[t % 2].t(), h @ self.U[t % 2].t()
            r = torch.sigmoid(gi[:, :self.h] + gh[:, :self.h])
            z = torch.sigmoid(gi[:, self.h:2 * self.h] + gh[:, self.h:2 * self.h])
            n = torch.tanh(gi[:, 2 * self.h:] + r * gh[:, 2 * self.h:])
            h = (1 - z) * n + z * h
            outs.append(h)
        return self.out(torch.stack(outs, 1))


def _reference(model: _AlternatingGRU, x: np.ndarray) -> np.ndarray:
    """The same recurrence in numpy float64, step by step, from the model's weights."""
    W = [w.detach().double().numpy() for w in model.W]
    U = [u.detach().double().numpy() for u in model.U]
    H = model.h
    h = np.zeros((x.shape[0], H))
    outs = []
    for t in range(x.shape[1]):
        gi, gh = x[:, t] @ W[t % 2].T, h @ U[t % 2].T
        r = 1 / (1 + np.exp(-(gi[:, :H] + gh[:, :H])))
        z = 1 / (1 + np.exp(-(gi[:, H:2 * H] + gh[:, H:2 * H])))
        n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        h = (1 - z) * n + z * h
        outs.append(h)
    return np.stack(outs, 1) @ model.out.weight.detach().double().numpy().T + model.out.bias.detach().double().numpy()


def test_the_model_runs_at_every_length_it_is_refused_at() -> None:
    """The premise, held against float64: the model is right at lengths other than the example's."""
    torch.manual_seed(3)
    model = _AlternatingGRU().eval()
    rng = np.random.default_rng(11)
    for batch, length in ((1, 3), (2, 9), (1, 1)):
        x = rng.standard_normal((batch, length, 5))
        with torch.no_grad():
            got = model(torch.from_numpy(x).float()).double().numpy()
        assert np.abs(got - _reference(model, x)).max() < 1e-5


def test_a_hand_written_loop_that_cannot_reroll_is_refused_as_a_length(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = _AlternatingGRU().eval()
    out = tmp_path / "alt.onnx"
    report = export(model, (torch.randn(2, 6, 5),), out)
    assert not report.passed and not out.exists()
    verdicts = {(d["input"], d["dim"]): d for d in report.check.dims}
    assert verdicts[("x", 1)]["verdict"] == "missed" and verdicts[("x", 1)]["role"] == "length", verdicts[("x", 1)]
    message = report.check.audit_failure
    assert "\n" not in message
    assert "x dim 1 is fixed at 6" in message and "as a length" in message, message
    assert "steps of a loop the trace unrolled" in message, message
    assert "--static x:1" in message  # what to do, if a fixed length is what the user wants
    assert "reaches no recurrence" not in message


@pytest.mark.slow  # another export of the same model (6 s); the refusal above is the default run's representative
def test_asked_static_the_same_model_is_written_at_its_length(tmp_path: Path) -> None:
    """The refusal's own way out works: --static x:1 writes the file, and it is right at that length."""
    import onnxruntime as ort

    torch.manual_seed(3)
    model = _AlternatingGRU().eval()
    out = tmp_path / "alt.onnx"
    report = export(model, (torch.randn(2, 6, 5),), out, static={"x": [1]})
    verdicts = {(d["input"], d["dim"]): d["verdict"] for d in report.check.dims}
    assert verdicts[("x", 1)] == "static: asked"
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).standard_normal((1, 6, 5))
    got = session.run(None, {session.get_inputs()[0].name: x.astype(np.float32)})[0]
    assert np.abs(got - _reference(model, x)).max() < 1e-5
