"""rnnx.export on recurrent models that third-party PyPI packages define, imported unmodified.

Each case builds a small instance of a model class from an installed package (NLP: stanza's
language-ID BiLSTM; time series: deepecho's PAR GRU network; OCR: legere's CRNN with a
bidirectional GRU), exports it with no dynamic axes given, and checks the file in ONNX
Runtime against the torch module at shapes other than the example's: batch 1, and a batch
and sequence length both larger than the example's.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402

NATIVE_OPS = ("LSTM", "GRU", "RNN")
EXAMPLE_SEQ = 6
# (batch, seq) pairs ONNX Runtime is checked at: batch 1, and one larger than any example in both.
CHECK_SHAPES = [(1, 4), (2, 9), (5, 13)]
ATOL = RTOL = 1e-4

MakeInputs = Callable[[int, int, "torch.Generator"], tuple]


@dataclass(frozen=True)
class ThirdPartyCase:
    name: str
    native: str  # the ONNX op the model's recurrence should become
    build: Callable[[], tuple["torch.nn.Module", MakeInputs]]


def _stanza_langid() -> tuple[torch.nn.Module, MakeInputs]:
    """stanza (NLP): the character-level language identifier, a 2-layer BiLSTM, batch first."""
    pytest.importorskip("stanza")
    from stanza.models.langid.model import LangIDBiLSTM

    chars = {"<PAD>": 0, **{c: i + 1 for i, c in enumerate("abcdefghij")}}
    tags = {"en": 0, "fr": 1, "de": 2, "it": 3}
    model = LangIDBiLSTM(chars, tags, num_layers=2, embedding_dim=8, hidden_dim=6)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randint(0, len(chars), (batch, seq), generator=gen),)  # char ids

    return model, inputs


def _deepecho_par() -> tuple[torch.nn.Module, MakeInputs]:
    """deepecho (time series): PARNet, Linear -> GRU (sequence first) -> Linear, with a per-series context."""
    pytest.importorskip("deepecho")
    from deepecho.models.par import PARNet

    model = PARNet(data_size=5, context_size=3, hidden_size=8)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randn(seq, batch, 5, generator=gen), torch.randn(batch, 3, generator=gen))

    return model, inputs


def _legere_crnn() -> tuple[torch.nn.Module, MakeInputs]:
    """legere (OCR): CompactCRNN, a depthwise-separable CNN over a 32-pixel-high text line, then a BiGRU."""
    pytest.importorskip("legere")
    from legere.model import CompactCRNN, ModelConfig

    config = ModelConfig(
        stem_channels=8,
        blocks=((8, 16, (2, 2)), (16, 16, (2, 1)), (16, 16, (2, 1)), (16, 16, (2, 1))),
        gru_hidden=8,
        gru_layers=1,
        num_classes=12,
    )
    model = CompactCRNN(config)
    gen = torch.Generator().manual_seed(1)
    for module in model.modules():  # running statistics other than the identity, so eval-mode BN is exercised
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.copy_(0.1 * torch.randn(module.num_features, generator=gen))
            module.running_var.copy_(0.5 + torch.rand(module.num_features, generator=gen))

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        # The width is downsampled by 4, so a line 4 * seq pixels wide gives seq GRU steps.
        return (torch.rand(batch, 1, 32, 4 * seq, generator=gen) * 2 - 1,)

    return model, inputs


CASES = [
    ThirdPartyCase("stanza-langid-bilstm", "LSTM", _stanza_langid),
    ThirdPartyCase("deepecho-par-gru", "GRU", _deepecho_par),
    ThirdPartyCase("legere-crnn-bigru", "GRU", _legere_crnn),
]


def _flat_tensors(value) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    leaves, _ = tree_flatten(value)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


@pytest.mark.parametrize("example_batch", [1, 3], ids=lambda b: f"batch{b}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_third_party_model_exports_native_and_matches(case: ThirdPartyCase, example_batch: int, tmp_path) -> None:
    torch.manual_seed(0)
    model, make_inputs = case.build()
    model.eval()
    example = make_inputs(example_batch, EXAMPLE_SEQ, torch.Generator().manual_seed(0))
    path = tmp_path / "m.onnx"

    report = rnnx.export(model, example, path)
    assert report.passed, str(report)

    proto = onnx.load(str(path))
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert sum(ops[op] for op in NATIVE_OPS) >= 1, ops
    assert ops[case.native] >= 1, ops

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = session.get_inputs()
    gen = torch.Generator().manual_seed(42)
    for batch, seq in CHECK_SHAPES:
        inputs = make_inputs(batch, seq, gen)
        flat_in = _flat_tensors(inputs)
        assert len(feeds) == len(flat_in), [f.name for f in feeds]
        with torch.no_grad():
            want = _flat_tensors(model(*inputs))
        got = session.run(None, {f.name: x.numpy() for f, x in zip(feeds, flat_in)})
        assert len(got) == len(want), (len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == tuple(w.shape), (i, batch, seq, g.shape, tuple(w.shape))
            np.testing.assert_allclose(g, w.numpy(), atol=ATOL, rtol=RTOL, err_msg=f"output {i} at batch={batch} seq={seq}")
