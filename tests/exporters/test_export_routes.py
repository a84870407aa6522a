"""rnnx.export on the shapes of other authors' code that used to sink it, each fixed in the
mechanism: a dimension torch keeps dynamic that reaches no recurrence (retried static), an
op torch.onnx's dynamo route cannot translate (the TorchScript route, rnnx's ops still
native), a no-op squeeze, a returned input, ``forward(*tensors)``, batch-1 states, and the
user's own example in the self-check.

Every case exports with no axes written, from a batch-1 and a batch-3 example, and is then
run in ONNX Runtime at shapes unlike the example's against torch eager.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

import rnnx  # noqa: E402
from rnnx.exporters.export_routes import DYNAMO, DYNAMO_STATIC  # noqa: E402
from rnnx.exporters.torchscript_route import ROUTE as TORCHSCRIPT  # noqa: E402

ATOL = RTOL = 1e-4


class PooledHeightCRNN(nn.Module):
    """EasyOCR's recognizer shape: the CNN's height pooled by AdaptiveAvgPool2d((None, 1)) and
    squeezed before a BiLSTM. torch keeps the image height dynamic (the pooling takes any),
    and then the pooled axis is no longer provably 1."""

    def __init__(self) -> None:
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d((None, 1))
        self.rnn = nn.LSTM(8, 12, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(24, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        f = self.pool(self.cnn(image).permute(0, 3, 1, 2)).squeeze(3)  # (b, w, c)
        return self.fc(self.rnn(f)[0])


class ClampedFilterbank(nn.Module):
    """A learnable filterbank clamped with an int and a float bound: torch.onnx's dynamo route
    finds no overload for that aten.clamp; the TorchScript exporter translates it."""

    def __init__(self, proj: int = 0) -> None:
        super().__init__()
        self.fb = nn.Parameter(torch.rand(40, 20))
        self.rnn = nn.LSTM(20, 16, batch_first=True, proj_size=proj) if proj else nn.GRU(20, 16, batch_first=True)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.rnn(feats @ torch.clamp(self.fb, 0, 1.0))[0]


class ClampedCellLoop(nn.Module):
    """The same clamp after a GRUCell stepped in Python over time."""

    def __init__(self) -> None:
        super().__init__()
        self.fb = nn.Parameter(torch.rand(8, 5))
        self.cell = nn.GRUCell(12, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, time, 12)
        h = x.new_zeros(x.shape[0], 8)
        ys = []
        for step in x.unbind(1):
            h = self.cell(step, h)
            ys.append(h)
        return torch.stack(ys, dim=1) @ torch.clamp(self.fb, 0, 1.0)


class NoopSqueeze(nn.Module):
    """``squeeze(1)`` on 32 channels: nothing in torch, a Squeeze ONNX Runtime refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(10, 32, 3, padding=1)
        self.rnn = nn.LSTM(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, 10, time)
        return self.rnn(self.conv(x).squeeze(1).permute(2, 0, 1))[0]


class ReturnsItsLengths(nn.Module):
    """A tagger that hands its lengths back: ``forward(x, lengths) -> (scores, lengths)``."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fc(self.rnn(x)[0]), lengths


class StarTensors(nn.Module):
    """A wrapper whose forward takes ``*tensors``, as torch.export binds it: one argument."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.rnn(torch.cat(tensors, dim=-1))[0]


class StatefulLM(nn.Module):
    """A word language model, ``forward(input, hidden)`` with hidden = (h0, c0)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.rnn = nn.LSTM(8, 16)
        self.out = nn.Linear(16, 50)

    def forward(self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        y, hidden = self.rnn(self.emb(x), hidden)
        return self.out(y), hidden


class OneFeatureColumn(nn.Module):
    """A forecaster whose source is (batch, seq, 1): one column, read but never needed."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(1, 8)
        self.rnn = nn.GRU(8, 16, batch_first=True)

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.rnn(self.inp(src))[0]


Make = Callable[[int, int, torch.Generator], tuple]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]
    inputs: Make
    route: str  # the route that should make the file
    note: str = ""  # text the report's notes should hold


def _lengths(b: int, t: int, g: torch.Generator) -> torch.Tensor:
    return torch.sort(torch.randint(1, t + 1, (b,), generator=g), descending=True).values


CASES = [
    Case("pooled-height", PooledHeightCRNN, lambda b, t, g: (torch.randn(b, 1, 16, 4 * t, generator=g),), DYNAMO_STATIC, "reaches no recurrence"),
    Case("clamp", ClampedFilterbank, lambda b, t, g: (torch.randn(b, t, 40, generator=g),), TORCHSCRIPT, "Cannot find a compatible OpOverload"),
    Case("clamp-projection", lambda: ClampedFilterbank(proj=6), lambda b, t, g: (torch.randn(b, t, 40, generator=g),), TORCHSCRIPT),
    Case("clamp-cell-loop", ClampedCellLoop, lambda b, t, g: (torch.randn(b, t, 12, generator=g),), TORCHSCRIPT),
    Case("noop-squeeze", NoopSqueeze, lambda b, t, g: (torch.randn(b, 10, t, generator=g),), DYNAMO, "the Squeeze became an Identity"),
    Case("returns-lengths", ReturnsItsLengths, lambda b, t, g: (torch.randn(b, t, 8, generator=g), _lengths(b, t, g)), DYNAMO),
    Case("star-tensors", StarTensors, lambda b, t, g: (torch.randn(b, t, 3, generator=g), torch.randn(b, t, 5, generator=g)), DYNAMO),
    Case("stateful-lm", StatefulLM, lambda b, t, g: (torch.randint(0, 50, (t, b), generator=g), (torch.randn(1, b, 16, generator=g), torch.randn(1, b, 16, generator=g))), DYNAMO),
    Case("one-feature-column", OneFeatureColumn, lambda b, t, g: (torch.randn(b, t, 1, generator=g),), DYNAMO),
]
# (batch, steps) unlike either example's (batch 1 or 3, 6 steps): longer at batch 1, larger, shorter
NEW_SHAPES = [(1, 9), (5, 11), (2, 3)]


def _flat(value) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


@pytest.mark.parametrize("example_batch", [1, 3], ids=lambda b: f"batch{b}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_exports_and_matches_torch_at_new_shapes(case: Case, example_batch: int, tmp_path) -> None:
    torch.manual_seed(0)
    model = case.build().eval()
    example = case.inputs(example_batch, 6, torch.Generator().manual_seed(0))
    path = tmp_path / "m.onnx"
    report = rnnx.export(model, example, path)
    assert report.passed and report.written, str(report)
    assert report.route == (DYNAMO if case.route == DYNAMO_STATIC else case.route), str(report)
    assert not case.note or any(case.note in n for n in report.notes), report.notes
    assert report.check.cases[0].name == "the example as given" and report.check.cases[0].passed
    ops = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    assert ops["LSTM"] + ops["GRU"] + ops["RNN"] + ops["Scan"] >= 1, ops

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(42)
    for batch, steps in NEW_SHAPES:
        inputs = case.inputs(batch, steps, gen)
        with torch.no_grad():
            want = _flat(model(*inputs))
        got = session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), _flat(inputs))})
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.shape == tuple(w.shape), (k, batch, steps)
            np.testing.assert_allclose(g, w.numpy(), atol=ATOL, rtol=RTOL, err_msg=f"output {k} at batch {batch}, {steps} steps")


def test_a_returned_input_keeps_its_own_name_and_the_output_gets_another(tmp_path) -> None:
    report = rnnx.export(ReturnsItsLengths().eval(), (torch.randn(2, 5, 8), torch.tensor([5, 3])), tmp_path / "m.onnx")
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    assert [i.name for i in graph.input] == ["x", "lengths"]
    assert len({o.name for o in graph.output}) == 2 and "lengths" not in {o.name for o in graph.output}, str(report)


def test_the_state_layer_axis_is_never_grown_and_the_batch_axis_is(tmp_path) -> None:
    """From a batch-1 example whose states are (1, 1, H), the file takes any batch: rnnx grows
    the states' batch axis with the input's, never their layer axis."""
    example = (torch.randint(0, 50, (7, 1)), (torch.zeros(1, 1, 16), torch.zeros(1, 1, 16)))
    report = rnnx.export(StatefulLM().eval(), example, tmp_path / "m.onnx")
    assert report.axes["hidden_0"] == {1: "batch"} and report.axes["x"] == {0: "seq", 1: "batch"}, str(report)
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(str(tmp_path / "m.onnx")).graph.input}
    assert dims["hidden_0"] == [1, "batch", 16]


def test_an_unneeded_dimension_stays_dynamic_where_the_first_route_works(tmp_path) -> None:
    """The retry is only a retry: where torch's dynamic memory length exports fine (attention
    over a memory that no recurrence reads), it stays dynamic."""
    from tests.exporters.test_torch_export import Autoregressive

    report = rnnx.export(Autoregressive().eval(), (torch.randn(2, 7, 6),), tmp_path / "a.onnx")
    assert report.passed and report.axes == {"memory": {0: "batch", 1: "memory_dim1"}}, str(report)


def test_a_model_no_route_can_export_is_one_line_naming_each_route(tmp_path) -> None:
    class Unexportable(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.rnn(x)[0]
            return torch.linalg.eigh(y.transpose(0, 1) @ y.permute(1, 2, 0))[0]  # no ONNX translation on either route

    with pytest.raises(rnnx.RNNXError) as caught:
        rnnx.export(Unexportable().eval(), (torch.randn(5, 2, 4),), tmp_path / "u.onnx")
    text = str(caught.value)
    assert "\n" not in text and DYNAMO in text and TORCHSCRIPT in text and "linalg_eigh" in text, text
    assert not (tmp_path / "u.onnx").exists()


def test_the_second_route_writes_nothing_to_the_terminal(tmp_path, capfd) -> None:
    """The TorchScript exporter's C++ side prints warnings and whole graphs to the process's
    own stdout and stderr; a --json pipeline must see none of it."""
    rnnx.export(ClampedFilterbank(proj=6).eval(), (torch.randn(2, 5, 40),), tmp_path / "p.onnx")
    out, err = capfd.readouterr()
    assert "LSTMProjected" not in out + err and "Warning" not in err, (out, err)
