"""rnnx export of language models whose LSTMs are wrapped in weight dropout (DropConnect on the
recurrent matrix), written the ways published code writes it:

- AWD-LSTM's ``WeightDrop`` (salesforce/awd-lstm-lm): ``del module._parameters['weight_hh_l0']``,
  registers ``weight_hh_l0_raw`` on the LSTM, and before each call assigns
  ``F.dropout(raw, p, training)`` to ``weight_hh_l0`` and calls ``module.forward`` directly;
- fastai's ``WeightDropout``: ``weight_hh_l0_raw`` on the wrapper, a plain tensor assigned to the
  LSTM's ``weight_hh_l0`` before each call (a clone of the raw weight in eval mode);
- ``torch.nn.utils.parametrize`` with a dropout parametrization: ``weight_hh_l0`` is a property
  computed from ``parametrizations.weight_hh_l0.original``.

None of them has ``weight_hh_l0`` in its state_dict the way nn.LSTM does; the weights the
exported file holds are the ones the module computes with in eval mode. Each model is exported
from a batch-1 and a batch-3 example with no axes given, and the file is run in ONNX Runtime
at batches 1, 3 and 5 and lengths the examples never had, against the model's float64 copy.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn
F = torch.nn.functional

import rnnx  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402
from rnnx.exporters.modules import swap_recurrent_modules  # noqa: E402

NTOKEN = 40
EXAMPLE_SEQ = 6
# (batch, seq): batch 1 and 3 at lengths no example had, then larger than either in both
CHECK_SHAPES = [(1, 9), (3, 4), (5, 11)]
ATOL = RTOL = 1e-4


class WeightDrop(nn.Module):
    """AWD-LSTM's wrapper, as salesforce/awd-lstm-lm writes it."""

    def __init__(self, module: nn.Module, weights: list[str], dropout: float = 0.0) -> None:
        super().__init__()
        self.module, self.weights, self.dropout = module, weights, dropout
        if issubclass(type(self.module), nn.RNNBase):
            self.module.flatten_parameters = self._do_nothing  # cuDNN's compaction would undo the deletion
        for name_w in self.weights:
            w = getattr(self.module, name_w)
            del self.module._parameters[name_w]
            self.module.register_parameter(name_w + "_raw", nn.Parameter(w.data))

    def _do_nothing(*args, **kwargs) -> None:  # noqa: N805  the original's signature
        return

    def _setweights(self) -> None:
        for name_w in self.weights:
            raw_w = getattr(self.module, name_w + "_raw")
            setattr(self.module, name_w, F.dropout(raw_w, p=self.dropout, training=self.training))

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)


class AwdLM(nn.Module):
    """AWD-LSTM's RNNModel: time-major tokens, one WeightDrop'd single-layer LSTM per layer (the
    last one back to the embedding size), tied decoder, the hidden states passed in and out."""

    def __init__(self, ninp: int = 8, nhid: int = 12, nlayers: int = 2, wdrop: float = 0.5) -> None:
        super().__init__()
        self.encoder = nn.Embedding(NTOKEN, ninp)
        self.rnns = nn.ModuleList([WeightDrop(nn.LSTM(ninp if layer == 0 else nhid, nhid if layer != nlayers - 1 else ninp, 1), ["weight_hh_l0"],
                                              dropout=wdrop) for layer in range(nlayers)])
        self.decoder = nn.Linear(ninp, NTOKEN)
        self.decoder.weight = self.encoder.weight

    def forward(self, input: torch.Tensor, hidden: list[tuple[torch.Tensor, torch.Tensor]]):
        raw_output = self.encoder(input)
        new_hidden = []
        for layer, rnn in enumerate(self.rnns):
            raw_output, new_h = rnn(raw_output, hidden[layer])
            new_hidden.append(new_h)
        return self.decoder(raw_output), new_hidden


class WeightDropout(nn.Module):
    """fastai's wrapper (fastai.text.models.awdlstm), as fastai writes it."""

    def __init__(self, module: nn.Module, weight_p: float, layer_names: list[str]) -> None:
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            w = getattr(self.module, layer)
            delattr(self.module, layer)
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.data))
            setattr(self.module, layer, w.clone())
            if isinstance(self.module, nn.RNNBase):
                self.module.flatten_parameters = self._do_nothing

    def _setweights(self) -> None:
        for layer in self.layer_names:
            raw_w = getattr(self, f"{layer}_raw")
            w = F.dropout(raw_w, p=self.weight_p) if self.training else raw_w.clone()
            setattr(self.module, layer, w)

    def forward(self, *args):
        self._setweights()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)  # the weights are not flattened
            return self.module(*args)

    def _do_nothing(self) -> None:
        pass


class FastaiLM(nn.Module):
    """A batch-first tagger over one two-layer LSTM whose recurrent matrices are both dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(NTOKEN, 8)
        self.rnn = WeightDropout(nn.LSTM(8, 12, num_layers=2, batch_first=True), 0.5, ["weight_hh_l0", "weight_hh_l1"])
        self.out = nn.Linear(12, NTOKEN)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.emb(tokens))[0])


class DropConnect(nn.Module):
    """A parametrization: the weight the module reads is its original, dropped out."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return F.dropout(w, self.p, self.training)


class ParametrizedLM(nn.Module):
    """A bidirectional LSTM whose recurrent matrices, both directions, are parametrized."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(NTOKEN, 8)
        self.rnn = nn.LSTM(8, 10, batch_first=True, bidirectional=True)
        for name in ("weight_hh_l0", "weight_hh_l0_reverse"):
            torch.nn.utils.parametrize.register_parametrization(self.rnn, name, DropConnect(0.5))
        self.out = nn.Linear(20, NTOKEN)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.emb(tokens))[0])


def _trained(cls: type[nn.Module]) -> Callable[[], nn.Module]:
    """The model with weights loaded after it was built (a checkpoint), as training leaves it:
    fastai's LSTM still holds the clone made at construction until the wrapper's next call."""

    def build() -> nn.Module:
        torch.manual_seed(0)
        model = cls()
        torch.manual_seed(1)
        model.load_state_dict(cls().state_dict())
        return model.eval()

    return build


def _tokens(b: int, t: int, g: torch.Generator, time_major: bool = False) -> torch.Tensor:
    return torch.randint(0, NTOKEN, (t, b) if time_major else (b, t), generator=g)


def _awd_inputs(b: int, t: int, g: torch.Generator) -> tuple:
    hidden = [(torch.randn(1, b, n, generator=g), torch.randn(1, b, n, generator=g)) for n in (12, 8)]  # AwdLM's layers' sizes
    return _tokens(b, t, g, time_major=True), hidden


@dataclass(frozen=True)
class Style:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, int, torch.Generator], tuple]
    nodes: int  # native LSTM nodes: one per layer, whatever the length


STYLES = [
    Style("awd-weightdrop", _trained(AwdLM), _awd_inputs, 2),
    Style("fastai-weightdropout", _trained(FastaiLM), lambda b, t, g: (_tokens(b, t, g),), 2),
    Style("parametrize", _trained(ParametrizedLM), lambda b, t, g: (_tokens(b, t, g),), 1),
]


def _flat(value) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


def _float64(inputs: tuple) -> tuple:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x, inputs)


def assert_matches_float64_torch(model: nn.Module, style: Style, path: Path) -> None:
    """The file in ONNX Runtime against the model's float64 copy (eval mode) at CHECK_SHAPES."""
    gen = torch.Generator().manual_seed(42)
    with torch.no_grad():  # fastai's LSTM holds a clone with a grad_fn until a call without grad: deepcopy refuses it
        model.eval()(*style.inputs(1, 2, gen))
    model64 = copy.deepcopy(model).double()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, steps in CHECK_SHAPES:
        inputs = style.inputs(batch, steps, gen)
        with torch.no_grad():
            want = _flat(model64(*_float64(inputs)))
        got = session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), _flat(inputs))})
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w.numpy(), atol=ATOL, rtol=RTOL, err_msg=f"{style.name} output {k} at batch {batch}, {steps} steps")


def _export_and_check(style: Style, example_batch: int, path: Path) -> rnnx.ExportReport:
    model = style.build()
    example = style.inputs(example_batch, EXAMPLE_SEQ, torch.Generator().manual_seed(0))
    report = rnnx.export(model, example, path)
    assert report.passed and report.written, str(report)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("LSTM") == style.nodes, ops  # one native node per layer, no steps unrolled
    assert_matches_float64_torch(model, style, path)
    return report


# fastai's from a batch-1 example runs by default through the command line (below)
@pytest.mark.parametrize("style", [pytest.param(s, marks=[pytest.mark.slow] if s.name.startswith("fastai") else []) for s in STYLES],
                         ids=lambda s: s.name)
def test_exports_from_a_batch1_example_and_matches_torch_at_new_shapes(style: Style, tmp_path: Path) -> None:
    report = _export_and_check(style, 1, tmp_path / "m.onnx")
    assert report.route == "torch.export + torch.onnx (dynamo)", str(report)  # not the TorchScript fallback's fixed axes


@pytest.mark.slow
@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.name)
def test_exports_from_a_batch3_example_and_matches_torch_at_new_shapes(style: Style, tmp_path: Path) -> None:
    _export_and_check(style, 3, tmp_path / "m.onnx")


def test_a_wrapper_in_training_mode_is_exported_as_in_eval_mode(tmp_path: Path) -> None:
    """Dropout on the weights is active in training mode, and the model's last call before export
    was a training one (its LSTMs hold dropped weights): the file is the eval-mode model."""
    style = STYLES[0]
    model = style.build().train()
    tokens, hidden = style.inputs(3, EXAMPLE_SEQ, torch.Generator().manual_seed(0))
    with torch.no_grad():
        clean = copy.deepcopy(model).eval()(tokens, hidden)[0]
        torch.manual_seed(3)
        dropped = model(tokens, hidden)[0]
    assert (dropped - clean).abs().max() > 1e-2  # the dropout is real: a file with dropped weights would fail below
    assert "weight_hh_l0" not in model.rnns[0].module._parameters  # a plain tensor, the dropped one
    report = rnnx.export(model, (tokens, hidden), tmp_path / "awd.onnx")
    assert report.passed and report.written, str(report)
    assert model.training
    assert any("training mode" in n for n in report.notes), report.notes
    assert_matches_float64_torch(model, style, tmp_path / "awd.onnx")


def fastai_lm() -> nn.Module:
    """The factory the command line names."""
    return _trained(FastaiLM)()


def test_the_command_line_exports_a_fastai_weight_dropped_lm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.main import main

    out = tmp_path / "lm.onnx"
    assert main(["export", f"{Path(__file__)}:fastai_lm", "--input", "tokens:1x6:int64", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["written"] and report["route"] == "torch.export + torch.onnx (dynamo)", report
    assert_matches_float64_torch(fastai_lm(), STYLES[1], out)  # the factory seeds itself: the same weights


def test_a_wrapped_module_whose_weight_was_never_assigned_is_refused_by_name() -> None:
    """Swapping an AWD model that never ran: its LSTM has no weight_hh_l0 at all yet."""
    torch.manual_seed(0)
    model = AwdLM()
    with pytest.raises(RNNXError) as info:
        swap_recurrent_modules(copy.deepcopy(model))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("rnns.0.module (LSTM): expected weight_hh_l0 as a tensor attribute") and "found nothing" in message
    assert "eval mode" in message
