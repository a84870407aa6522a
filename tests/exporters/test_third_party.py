"""rnnx.export on recurrent models that third-party PyPI packages define, imported unmodified.

Each case builds a small instance of a model class from a published package, with random
weights, the way the package builds it (small sizes through its own config arguments),
exports it with no dynamic axes given, from a batch-3 and from a batch-1 example, and checks
the file in ONNX Runtime against the torch module at shapes other than the example's:
batch 1 with a shorter input, and batches and lengths larger than the example's.

Two groups:

- ``CASES``: packages the test environment installs (the ``test`` extra, pinned in
  constraints.txt). They are exported here, live.
- ``RECORDED``: packages that cannot share the test environment (they need torchaudio or
  torchvision, whose releases are built for another torch than the CPU 2.13 one here, or pin
  pandas / transformers / huggingface_hub against the test pins). tools/third_party builds
  them in its own pinned environment, exports them with ``rnnx.export`` there, and commits
  the files with the inputs and the torch outputs it recorded (tests/fixtures/third_party);
  here each file is run in ONNX Runtime against those recordings.

A case that rnnx cannot export (or exports wrongly) today is an ``xfail(strict=True)`` whose
reason is the first line of the failure, so the suite stays green and a fix shows as XPASS.
For RECORDED cases the failure lines come from the manifest the tools script writes.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from tests.helpers import MadeOnFirstUse, rnnx_in_process  # noqa: E402

NATIVE_OPS = ("LSTM", "GRU", "RNN")
EXAMPLE_SEQ = 6
EXAMPLE_BATCHES = (3, 1)
# (batch, seq) pairs ONNX Runtime is checked at: batch 1 and shorter, then larger than any example in both.
CHECK_SHAPES = [(1, 4), (2, 9), (5, 13)]
ATOL = RTOL = 1e-4
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "third_party"

MakeInputs = Callable[[int, int, "torch.Generator"], tuple]


@dataclass(frozen=True)
class ThirdPartyCase:
    name: str
    native: str  # the ONNX op the model's recurrence should become
    build: Callable[[], tuple[torch.nn.Module, MakeInputs]]
    package: str = ""  # the distribution whose class is built (import name may differ)
    # example batch -> first line of today's failure; the case is xfail(strict) there
    xfail: dict[int, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Installed in the test environment


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


def _demucs() -> tuple[torch.nn.Module, MakeInputs]:
    """demucs (music source separation): demucs.demucs.Demucs, the v3 waveform model: strided Conv1d
    encoder with DConv residual branches, a BiLSTM over the bottleneck (``lstm_layers``), transposed-conv
    decoder with skips; input normalised and padded to a valid length by the model itself."""
    pytest.importorskip("demucs")
    from demucs.demucs import Demucs

    model = Demucs(sources=["drums", "bass"], audio_channels=1, channels=4, depth=2, lstm_layers=1,
                   dconv_depth=1, dconv_comp=2, resample=False)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randn(batch, 1, 16 * seq, generator=gen),)  # mono mix, 16 samples a step

    return model, inputs


def _darts_rnn() -> tuple[torch.nn.Module, MakeInputs]:
    """darts (forecasting): the PyTorch Lightning module RNNModel(model="LSTM") trains and predicts with
    (darts.models.forecasting.rnn_model._RNNModule), made by RNNModel._create_model for a 2-component
    target and 2 future covariates; forward takes darts' PLModuleInput and returns PLModuleOutput."""
    pytest.importorskip("darts")
    from darts.models import RNNModel
    from darts.utils.data.torch_datasets.utils import PLModuleInput, TorchTrainingSample

    forecaster = RNNModel(input_chunk_length=EXAMPLE_SEQ, model="LSTM", hidden_dim=8, n_rnn_layers=1,
                          training_length=EXAMPLE_SEQ)
    sample = TorchTrainingSample(past_target=np.zeros((EXAMPLE_SEQ, 2), np.float32),
                                 future_covariates=np.zeros((EXAMPLE_SEQ, 2), np.float32))
    model = forecaster._create_model(sample)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (PLModuleInput(past_target=torch.randn(batch, seq, 2, generator=gen),
                              historic_future_covariates=torch.randn(batch, seq, 2, generator=gen),
                              future_covariates=torch.randn(batch, 1, 2, generator=gen)),)

    return model, inputs


def _neuralforecast_lstm() -> tuple[torch.nn.Module, MakeInputs]:
    """neuralforecast (forecasting): neuralforecast.models.LSTM, an LSTM encoder over the target and two
    historic exogenous series, an MLP decoder for the last h steps; forward takes the windows_batch dict."""
    pytest.importorskip("neuralforecast")
    from neuralforecast.models import LSTM

    model = LSTM(h=2, input_size=EXAMPLE_SEQ, encoder_n_layers=1, encoder_hidden_size=8, decoder_hidden_size=8,
                 decoder_layers=2, hist_exog_list=["price", "load"], max_steps=1)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return ({"insample_y": torch.randn(batch, seq, 1, generator=gen), "futr_exog": None,
                 "hist_exog": torch.randn(batch, seq, 2, generator=gen), "stat_exog": None},)

    return model, inputs


def _opennmt_rnn() -> tuple[torch.nn.Module, MakeInputs]:
    """OpenNMT-py (translation): onmt.models.NMTModel of a bidirectional RNNEncoder (LSTM, packed by the
    source lengths) and a StdRNNDecoder (LSTM with global attention), each with onmt Embeddings."""
    pytest.importorskip("onmt")
    from onmt.decoders.decoder import StdRNNDecoder
    from onmt.encoders.rnn_encoder import RNNEncoder
    from onmt.models.model import NMTModel
    from onmt.modules import Embeddings

    vocab = 20
    encoder = RNNEncoder("LSTM", bidirectional=True, num_layers=1, hidden_size=16,
                         embeddings=Embeddings(8, vocab, word_padding_idx=1))
    decoder = StdRNNDecoder("LSTM", bidirectional_encoder=True, num_layers=1, hidden_size=16, attn_type="general",
                            embeddings=Embeddings(8, vocab, word_padding_idx=1))
    model = NMTModel(encoder, decoder)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        src = torch.randint(2, vocab, (batch, seq, 1), generator=gen)  # (batch, len, features) token ids
        tgt = torch.randint(2, vocab, (batch, seq, 1), generator=gen)
        src_len = torch.randint(1, seq + 1, (batch,), generator=gen)
        src_len[0] = seq  # the longest fills the padded source
        return (src, tgt, src_len)

    return model, inputs


def _sb3_recurrent_ppo() -> tuple[torch.nn.Module, MakeInputs]:
    """sb3-contrib (reinforcement learning): the RecurrentActorCriticPolicy that RecurrentPPO("MlpLstmPolicy")
    builds for gymnasium's CartPole-v1: flatten extractor, separate actor and critic LSTMs, MLP heads;
    forward(obs, lstm_states, episode_starts, deterministic) as RecurrentPPO.predict calls it, on batch * seq
    observations of batch environments (no episode start inside the window: one LSTM call per LSTM)."""
    pytest.importorskip("sb3_contrib")
    import gymnasium as gym
    from sb3_contrib import RecurrentPPO
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    agent = RecurrentPPO("MlpLstmPolicy", gym.make("CartPole-v1"), n_steps=8, batch_size=8, device="cpu",
                         policy_kwargs={"lstm_hidden_size": 8, "n_lstm_layers": 1, "net_arch": {"pi": [8], "vf": [8]}})
    model = agent.policy

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        def states() -> tuple:
            return (torch.randn(1, batch, 8, generator=gen), torch.randn(1, batch, 8, generator=gen))

        observations = torch.randn(batch * seq, 4, generator=gen)  # environment-major, as the rollout buffer orders them
        return (observations, RNNStates(pi=states(), vf=states()), torch.zeros(batch * seq), True)

    return model, inputs


def _tacotron() -> tuple[torch.nn.Module, MakeInputs]:
    """tacotron (text to speech): tacotron.Tacotron, an embedding + pre-net + CBHG encoder (conv bank, highway,
    BiGRU) and a decoder of three LSTMCells with dynamic convolution attention, stepped over the mel frames in
    Python; forward(text, mels) is the teacher-forced pass its training runs (2 frames a step)."""
    pytest.importorskip("tacotron")
    from tacotron import Tacotron

    model = Tacotron(
        encoder={"n_symbols": 20, "embedding_dim": 8, "prenet": {"input_size": 8, "hidden_size": 8, "output_size": 8},
                 "cbhg": {"K": 2, "input_channels": 8, "channels": 8, "projection_channels": 8, "n_highways": 1,
                          "highway_size": 8, "rnn_size": 8}},
        decoder={"prenet": {"input_size": 6, "hidden_size": 8, "output_size": 8},
                 "attention": {"attn_rnn_size": 8, "hidden_size": 8, "static_channels": 2, "static_kernel_size": 3,
                               "dynamic_channels": 2, "dynamic_kernel_size": 3, "prior_length": 3, "alpha": 0.1,
                               "beta": 0.9},
                 "input_size": 8, "n_mels": 6, "attn_rnn_size": 8, "decoder_rnn_size": 8, "reduction_factor": 2,
                 "zoneout_prob": 0.1})

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randint(0, 20, (batch, seq), generator=gen),  # symbol ids
                torch.randn(batch, 6, 2 * seq, generator=gen))  # log-mel frames, 2 a text symbol

    return model, inputs


def _piano_transcription() -> tuple[torch.nn.Module, MakeInputs]:
    """piano-transcription-inference (music transcription): AcousticModelCRnn8Dropout, the acoustic model its
    note and pedal models (Regress_onset_offset_frame_velocity_CRNN, Regress_pedal_CRNN) run four and three of
    on the log-mel spectrogram: four conv blocks pooling the mel axis by 16, Linear + BatchNorm, a 2-layer
    BiGRU, Linear to the 88 keys. Its channels and GRU sizes are fixed in the class; midfeat (128 x mel bins / 16)
    is its own argument, 128 for 16 mel bins. (The whole note model, 229 mel bins behind a 2048-point STFT and
    ten GRUs, passed this test from both example batches too, but in ~45-50 s each.)"""
    pytest.importorskip("piano_transcription_inference")
    from piano_transcription_inference.models import AcousticModelCRnn8Dropout

    model = AcousticModelCRnn8Dropout(classes_num=88, midfeat=128, momentum=0.01)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randn(batch, 1, seq, 16, generator=gen),)  # log-mel (batch, 1, frames, mel bins)

    return model, inputs


def _neuralhydrology_cudalstm() -> tuple[torch.nn.Module, MakeInputs]:
    """neuralhydrology (hydrology, rainfall-runoff): neuralhydrology.modelzoo.CudaLSTM from its run Config:
    three dynamic forcings and two static catchment attributes concatenated to every step, an LSTM (sequence
    first) and the regression head; forward takes its data dict (x_d a dict of per-forcing tensors)."""
    pytest.importorskip("neuralhydrology")
    from neuralhydrology.modelzoo.cudalstm import CudaLSTM
    from neuralhydrology.utils.config import Config

    forcings = ("prcp", "tmax", "srad")
    config = Config({"model": "cudalstm", "head": "regression", "output_activation": "linear", "hidden_size": 8,
                     "output_dropout": 0.4, "initial_forget_bias": 3, "dynamic_inputs": list(forcings),
                     "static_attributes": ["area", "elev_mean"], "target_variables": ["QObs(mm/d)"]})
    model = CudaLSTM(config)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return ({"x_d": {k: torch.randn(batch, seq, 1, generator=gen) for k in forcings},
                 "x_s": torch.randn(batch, 2, generator=gen)},)

    return model, inputs


def _tape_protein_lstm() -> tuple[torch.nn.Module, MakeInputs]:
    """tape-proteins (protein sequences): tape.models.modeling_lstm.ProteinLSTMModel, TAPE's LSTM embedding
    model: amino-acid embedding, a forward and a separately weighted reverse 2-layer LSTM stack (each sequence
    reversed within its own length, from input_mask), and the pooler over the final states."""
    pytest.importorskip("tape")
    from tape.models.modeling_lstm import ProteinLSTMConfig, ProteinLSTMModel

    model = ProteinLSTMModel(ProteinLSTMConfig(vocab_size=30, input_size=8, hidden_size=8, num_hidden_layers=2))

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        lengths = torch.randint(1, seq + 1, (batch,), generator=gen)
        lengths[0] = seq  # the longest fills the padded batch
        tokens = torch.randint(1, 30, (batch, seq), generator=gen)
        return (tokens, (torch.arange(seq) < lengths[:, None]).long())  # (input_ids, input_mask)

    return model, inputs


def _pyhealth_rnn_layer() -> tuple[torch.nn.Module, MakeInputs]:
    """pyhealth (healthcare, EHR visit sequences): pyhealth.models.RNNLayer, the recurrent layer pyhealth's RNN
    model runs over each feature's visit embeddings (that model's own forward tokenizes Python lists of codes):
    a BiGRU packed by the lengths of its mask, a down projection, and the last valid step's output."""
    pytest.importorskip("pyhealth")
    from pyhealth.models import RNNLayer

    model = RNNLayer(input_size=8, hidden_size=8, rnn_type="GRU", num_layers=1, dropout=0.5, bidirectional=True)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        lengths = torch.randint(1, seq + 1, (batch,), generator=gen)
        lengths[0] = seq
        return (torch.randn(batch, seq, 8, generator=gen), torch.arange(seq) < lengths[:, None])  # (x, mask)

    return model, inputs


def _pykt_dkt() -> tuple[torch.nn.Module, MakeInputs]:
    """pykt-toolkit (education, knowledge tracing): DKT as pykt's init_model("dkt", ...) builds it: an
    embedding of (concept, response) interactions, an LSTM (batch first), Linear + sigmoid per concept;
    forward(q, r) as its training and evaluation call it."""
    pytest.importorskip("pykt")
    from pykt.models.init_model import init_model

    concepts = 10
    model = init_model("dkt", {"emb_size": 8, "dropout": 0.1}, {"num_c": concepts, "emb_path": ""}, "qid")

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randint(0, concepts, (batch, seq), generator=gen),  # concept ids
                torch.randint(0, 2, (batch, seq), generator=gen))  # responses, 1 correct

    return model, inputs


def _torch_ecg_crnn() -> tuple[torch.nn.Module, MakeInputs]:
    """torch-ecg (ECG classification): torch_ecg.models.ECG_CRNN from its ECG_CRNN_CONFIG with the multi-scopic
    CNN of its CPSC entries (three dilated branches, each downsampling by 8), a 2-layer stacked BiLSTM (sequence
    first), squeeze-excitation attention, global max pooling and an MLP classifier; small filters through the
    config's own fields."""
    pytest.importorskip("torch_ecg")
    from copy import deepcopy

    from torch_ecg.model_configs import ECG_CRNN_CONFIG
    from torch_ecg.models import ECG_CRNN

    config = deepcopy(ECG_CRNN_CONFIG)
    config.cnn.name = "multi_scopic"
    config.cnn.multi_scopic.num_filters = [[4, 8, 8], [4, 8, 8], [4, 8, 8]]
    config.rnn.name = "lstm"
    config.rnn.lstm.hidden_sizes = [8, 8]
    config.attn.name = "se"
    config.attn.se.reduction = 2
    config.clf.out_channels = [8]
    model = ECG_CRNN(["AF", "I-AVB", "RBBB"], n_leads=2, config=config)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randn(batch, 2, 8 * seq, generator=gen),)  # 2-lead ECG, 8 samples an LSTM step

    return model, inputs


CASES = [
    ThirdPartyCase("stanza-langid-bilstm", "LSTM", _stanza_langid, "stanza"),
    ThirdPartyCase("deepecho-par-gru", "GRU", _deepecho_par, "deepecho"),
    ThirdPartyCase("legere-crnn-bigru", "GRU", _legere_crnn, "legere"),
    # rnnx.export writes a file with the waveform length fixed to the example's; ONNX Runtime refuses other lengths.
    ThirdPartyCase("demucs-v3-blstm", "LSTM", _demucs, "demucs", xfail=dict.fromkeys(
        EXAMPLE_BATCHES, "InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: "
        "mix for the following indices")),
    ThirdPartyCase("darts-rnnmodel-lstm", "LSTM", _darts_rnn, "darts", xfail=dict.fromkeys(
        EXAMPLE_BATCHES, "ValueError: Did not find a flatten_with_keys_fn for type: <class "
        "'darts.utils.data.torch_datasets.utils.PLModuleInput'>. Please pass a flatten_with_keys_fn argument to "
        "register_pytree_node.")),
    ThirdPartyCase("neuralforecast-lstm", "LSTM", _neuralforecast_lstm, "neuralforecast"),
    ThirdPartyCase("opennmt-nmt-lstm-attention", "LSTM", _opennmt_rnn, "OpenNMT-py", xfail=dict.fromkeys(
        EXAMPLE_BATCHES, "RNNXError: no translation route could export the model (torch.export + torch.onnx (dynamo): "
        "Could not extract specialized integer from data-dependent expression a data-dependent size (unhinted: a "
        "data-dependent size).  (Size-like symbols: none); torch.onnx's TorchScript exporter: cond must be a bool, but "
        "got a Tensor. For tensor conditions, use torch._check_tensor_all() to assert that all elements are true.); "
        "replace the operator named, or, where a dynamic size is the cause, make it static (static= / --static); "
        "--debug prints the full trace")),
    # RecurrentActorCriticPolicy._process_sequence branches on th.all(episode_starts == 0.0): the trace keeps the
    # branch the example took, and the audit refuses the file that ignores episode_starts, naming the branch's line.
    # (Traced from an example with an episode start, the per-step branch re-rolls into one Loop, but over features
    # reshaped from obs's batch*seq axis, which stays fixed.)
    ThirdPartyCase("sb3-recurrent-ppo-lstm", "LSTM", _sb3_recurrent_ppo, "sb3-contrib", xfail=dict.fromkeys(
        EXAMPLE_BATCHES, "ExportCheckFailed: dimension audit: the file ignores input episode_starts, but torch's outputs "
        "change when episode_starts is all 1s: a Python branch on its values in RecurrentActorCriticPolicy._process_sequence "
        "at policies.py:190 (if th.all(episode_starts == 0.0):): a trace keeps only what the example took")),
    # The attention convolves with a kernel computed from the decoder state, grouped by the batch (groups=B).
    ThirdPartyCase("tacotron-cbhg-bigru-lstmcell", "GRU", _tacotron, "tacotron", xfail={
        batch: "RNNXError: no translation route could export the model (torch.export + torch.onnx (dynamo): Unsupported "
        "attribute type: '<class 'torch.onnx._internal.exporter._tensors.SymbolicTensor'>'; torch.onnx's TorchScript "
        "exporter: Unsupported: ONNX export of convolution for kernel of unknown shape.  [Caused by the value '329 "
        f"defined in (%329 : Float(1, *, *, strides=[{stride}, 6, 1], requires_grad=0, device=cpu) = "
        f"onnx::Unsqueeze(%234, %328), scope: {scope}); replace the operator named, or, where a dynamic size is the "
        "cause, make it static (static= / --static); --debug prints the full trace"
        for batch, stride, scope in ((3, 18, "tacotron.model.Tac"), (1, 6, "tacotron.model.Taco"))}),
    ThirdPartyCase("piano-transcription-acoustic-crnn-bigru", "GRU", _piano_transcription, "piano-transcription-inference"),
    # From a batch-1 example the file used to fix every input's batch at 1: the audit finds the batch through the
    # LSTM it reaches (called with input= as a keyword) and traces again on batch 2.
    ThirdPartyCase("neuralhydrology-cudalstm", "LSTM", _neuralhydrology_cudalstm, "neuralhydrology"),
    # ProteinLSTMEncoder.reverse_sequence reverses each sequence within its length in a Python loop over the batch.
    ThirdPartyCase("tape-protein-lstm", "LSTM", _tape_protein_lstm, "tape-proteins", xfail={
        3: "ExportCheckFailed: dimension audit: input input_ids dim 0 is fixed at 3 in the file, but the model runs with "
        "it at 1, as a batch: encoder.forward_lstm.0.lstm's batch follows it; rnnx could not make it dynamic (give "
        "static={'input_ids': [0]} / --static input_ids:0 to accept a file fixed at the example's size)",
        1: "ExportCheckFailed: dimension audit: input input_ids dim 0 is fixed at 1 in the file, but the model runs with "
        "it at 2 (with input_mask dim 0), as a batch: encoder.forward_lstm.0.lstm's batch follows it; rnnx could not make "
        "it dynamic (give static={'input_ids': [0]} / --static input_ids:0 to accept a file fixed at the example's "
        "size)"}),
    # RNNLayer packs the GRU's input by the lengths it sums from the mask (.cpu()): the mask's steps, which the
    # model refuses to change alone, are tied to the input's.
    ThirdPartyCase("pyhealth-rnnlayer-bigru", "GRU", _pyhealth_rnn_layer, "pyhealth"),
    ThirdPartyCase("pykt-dkt-lstm", "LSTM", _pykt_dkt, "pykt-toolkit"),
    # torch-ecg is installed by hand only (constraints.txt says why); the case skips without it.
    ThirdPartyCase("torch-ecg-crnn-bilstm", "LSTM", _torch_ecg_crnn, "torch-ecg"),
]


# --------------------------------------------------------------------------------------------
# Built, exported and recorded by tools/third_party in its own environment


def _easyocr_vgg() -> tuple[torch.nn.Module, MakeInputs]:
    """easyocr (OCR): easyocr.model.vgg_model.Model, the recognizer of its 'standard' (VGG) networks: VGG
    feature extractor, AdaptiveAvgPool2d((None, 1)) and squeeze over the height, two BidirectionalLSTM,
    Linear. forward(input, text) as easyocr calls it; text is unused by the model."""
    pytest.importorskip("easyocr")
    from easyocr.model.vgg_model import Model

    model = Model(input_channel=1, output_channel=32, hidden_size=16, num_class=12)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        image = torch.rand(batch, 1, 32, 4 * (seq + 1), generator=gen) * 2 - 1  # gives seq LSTM steps
        text = torch.zeros(batch, 6, dtype=torch.long)  # easyocr's text_for_pred
        return (image, text)

    return model, inputs


def _speechbrain_crdnn() -> tuple[torch.nn.Module, MakeInputs]:
    """speechbrain (speech): speechbrain.lobes.models.CRDNN (the encoder of its CRDNN ASR and VAD recipes)
    with rnn_class=speechbrain.nnet.RNN.LSTM: a CNN block with frequency pooling, a BiLSTM, a DNN block."""
    pytest.importorskip("speechbrain")
    import speechbrain as sb
    from speechbrain.lobes.models.CRDNN import CRDNN

    model = CRDNN(input_shape=[None, None, 20], cnn_blocks=1, cnn_channels=[8], inter_layer_pooling_size=[2],
                  rnn_class=sb.nnet.RNN.LSTM, rnn_layers=1, rnn_neurons=8, rnn_bidirectional=True,
                  dnn_blocks=1, dnn_neurons=16)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randn(batch, seq, 20, generator=gen),)  # (batch, frames, filterbank features)

    return model, inputs


def _pyannote_pyannet() -> tuple[torch.nn.Module, MakeInputs]:
    """pyannote.audio (speaker diarization / voice activity): pyannote.audio.models.segmentation.PyanNet,
    SincNet on the waveform, a 2-layer BiLSTM, Linear, a powerset classifier (3 speakers, at most 2 at
    once, as segmentation-3.0), given its Specifications and built as pyannote does after a task is set."""
    pytest.importorskip("pyannote.audio")
    from pyannote.audio.core.task import Problem, Resolution, Specifications
    from pyannote.audio.models.segmentation import PyanNet

    model = PyanNet(lstm={"hidden_size": 16, "num_layers": 2, "bidirectional": True, "monolithic": True},
                    linear={"hidden_size": 16, "num_layers": 1})
    model.specifications = Specifications(problem=Problem.MONO_LABEL_CLASSIFICATION, resolution=Resolution.FRAME,
                                          duration=2.0, classes=["speaker#1", "speaker#2", "speaker#3"],
                                          powerset_max_classes=2)
    model.build()

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        samples = model.receptive_field_size(num_frames=seq)  # a waveform that gives seq frames
        return (torch.randn(batch, 1, samples, generator=gen),)

    return model, inputs


def _openunmix() -> tuple[torch.nn.Module, MakeInputs]:
    """openunmix (music source separation): openunmix.model.OpenUnmix, the spectrogram model of a
    Separator: Linear + BatchNorm over the bins below max_bin, a 2-layer BiLSTM with a skip, two
    Linear + BatchNorm, a ReLU mask times the input mix."""
    pytest.importorskip("openunmix")
    from openunmix.model import OpenUnmix

    model = OpenUnmix(nb_bins=33, nb_channels=2, hidden_size=16, nb_layers=2, max_bin=24)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.rand(batch, 2, 33, seq, generator=gen),)  # magnitude (batch, channels, bins, frames)

    return model, inputs


def _asteroid_dprnn() -> tuple[torch.nn.Module, MakeInputs]:
    """asteroid (speech separation): asteroid.models.DPRNNTasNet, a learned filterbank encoder, the
    dual-path RNN masker (intra- and inter-chunk BiLSTMs over unfolded chunks), filterbank decoder."""
    pytest.importorskip("asteroid")
    from asteroid.models import DPRNNTasNet

    model = DPRNNTasNet(n_src=2, n_filters=16, kernel_size=8, stride=4, bn_chan=8, hid_size=8, chunk_size=8,
                        hop_size=4, n_repeats=1, rnn_type="LSTM", num_layers=1, bidirectional=True)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return (torch.randn(batch, 16 * seq, generator=gen),)  # waveform (batch, samples)

    return model, inputs


def _flair_tagger() -> tuple[torch.nn.Module, MakeInputs]:
    """flair (NLP tagging): flair.models.SequenceTagger (BiLSTM-CRF, reprojected embeddings) over
    OneHotEmbeddings of a small vocabulary; forward(sentence_tensor, lengths) as forward_loss and
    predict call it (packed by the lengths, longest first)."""
    pytest.importorskip("flair")
    from flair.data import Dictionary
    from flair.embeddings import OneHotEmbeddings
    from flair.models import SequenceTagger

    words = Dictionary()
    for word in "the cat sat on a mat".split():
        words.add_item(word)
    tags = Dictionary(add_unk=False)
    for tag in ("O", "B-PER", "I-PER", "E-PER", "S-PER"):
        tags.add_item(tag)
    model = SequenceTagger(OneHotEmbeddings(words, embedding_length=8), tags, "ner", hidden_size=8, use_crf=True)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        lengths = torch.sort(torch.randint(1, seq + 1, (batch,), generator=gen), descending=True).values
        lengths[0] = seq
        return (torch.randn(batch, seq, 8, generator=gen), lengths)

    return model, inputs


def _pytorch_forecasting_rnn() -> tuple[torch.nn.Module, MakeInputs]:
    """pytorch-forecasting (forecasting): pytorch_forecasting.models.RecurrentNetwork (cell_type="LSTM"),
    made by RecurrentNetwork.from_dataset of a TimeSeriesDataSet (target and one known real covariate);
    forward takes the dict of encoder/decoder tensors its dataloader yields and decodes autoregressively."""
    pytest.importorskip("pytorch_forecasting")
    import pandas as pd
    from pytorch_forecasting import TimeSeriesDataSet
    from pytorch_forecasting.models import RecurrentNetwork

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"series": np.repeat(["a", "b", "c"], 40), "time_idx": np.tile(np.arange(40), 3),
                          "value": rng.standard_normal(120).astype(np.float32),
                          "temp": rng.standard_normal(120).astype(np.float32)})
    data = TimeSeriesDataSet(frame, time_idx="time_idx", target="value", group_ids=["series"],
                             max_encoder_length=EXAMPLE_SEQ, max_prediction_length=2, time_varying_unknown_reals=["value"],
                             time_varying_known_reals=["temp"], target_normalizer=None)
    model = RecurrentNetwork.from_dataset(data, cell_type="LSTM", hidden_size=8, rnn_layers=1)
    reals = len(data.reals)

    def inputs(batch: int, seq: int, gen: torch.Generator) -> tuple:
        return ({"encoder_cat": torch.zeros(batch, seq, 0, dtype=torch.long),
                 "encoder_cont": torch.randn(batch, seq, reals, generator=gen),
                 "decoder_cat": torch.zeros(batch, 2, 0, dtype=torch.long),
                 "decoder_cont": torch.randn(batch, 2, reals, generator=gen),
                 "encoder_lengths": torch.full((batch,), seq), "decoder_lengths": torch.full((batch,), 2),
                 "target_scale": torch.stack([torch.zeros(batch), torch.ones(batch)], 1)},)

    return model, inputs


RECORDED = [
    ThirdPartyCase("easyocr-vgg-bilstm", "LSTM", _easyocr_vgg, "easyocr"),
    ThirdPartyCase("speechbrain-crdnn-lstm", "LSTM", _speechbrain_crdnn, "speechbrain"),
    ThirdPartyCase("pyannote-pyannet-bilstm", "LSTM", _pyannote_pyannet, "pyannote.audio"),
    ThirdPartyCase("openunmix-bilstm", "LSTM", _openunmix, "openunmix"),
    ThirdPartyCase("asteroid-dprnn-tasnet", "LSTM", _asteroid_dprnn, "asteroid"),
    ThirdPartyCase("flair-sequence-tagger-bilstm-crf", "LSTM", _flair_tagger, "flair"),
    ThirdPartyCase("pytorch-forecasting-rnn-lstm", "LSTM", _pytorch_forecasting_rnn, "pytorch-forecasting"),
]


# --------------------------------------------------------------------------------------------
# Shared by the live test, tools/third_party/make_fixtures.py and tools/compare_exporters.py


def flat_tensors(value) -> list[torch.Tensor]:
    """The tensors of a nested input or output, in order: tuples, lists, dicts, dataclasses (darts'
    PLModuleInput / PLModuleOutput), named tuples; None and other leaves give nothing."""
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in flat_tensors(getattr(value, f.name))]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flat_tensors(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flat_tensors(v)]
    return []


def torch_outputs(model: torch.nn.Module, inputs: tuple) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.detach().numpy() for t in flat_tensors(model(*inputs))]


def build(case: ThirdPartyCase) -> tuple[torch.nn.Module, MakeInputs]:
    torch.manual_seed(0)
    model, make_inputs = case.build()
    return model.eval(), make_inputs


def example(make_inputs: MakeInputs, batch: int) -> tuple:
    return make_inputs(batch, EXAMPLE_SEQ, torch.Generator().manual_seed(0))


def check_inputs(make_inputs: MakeInputs) -> list[tuple]:
    gen = torch.Generator().manual_seed(42)
    return [make_inputs(batch, seq, gen) for batch, seq in CHECK_SHAPES]


def compare(session, inputs: list[np.ndarray], want: list[np.ndarray], where: str) -> None:
    feeds = session.get_inputs()
    assert len(feeds) == len(inputs), f"{where}: the file takes {[f.name for f in feeds]}, the model {len(inputs)} tensors"
    got = session.run(None, {f.name: x for f, x in zip(feeds, inputs)})
    assert len(got) == len(want), f"{where}: {len(got)} outputs, torch {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{where}: output {i} has shape {g.shape}, torch {w.shape}"
        if not np.allclose(g, w, atol=ATOL, rtol=RTOL):
            raise AssertionError(f"{where}: output {i} differs from torch by up to {float(np.abs(g - w).max()):.1e} "
                                 f"(atol = rtol = {ATOL:g})")


def _session(path: Path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _assert_native(proto, native: str) -> None:
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert sum(ops[op] for op in NATIVE_OPS) >= 1, ops
    assert ops[native] >= 1, ops


def _params(cases: list[ThirdPartyCase], reasons: Callable[[ThirdPartyCase], dict[int, str]],
            slow: Callable[[ThirdPartyCase, int], bool] = lambda case, batch: False) -> list:
    params = []
    for case in cases:
        for batch in EXAMPLE_BATCHES:
            reason = reasons(case).get(batch)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            if slow(case, batch):
                marks.append(pytest.mark.slow)
            params.append(pytest.param(case, batch, id=f"{case.name}-batch{batch}", marks=marks))
    return params


# Cases that take ~10 s or more an example and end the same way from either example batch (demucs, tacotron, tape
# and sb3 fail alike, the piano and pyhealth models pass at both): batch 1 by default, batch 3 with --slow.
_SLOW_AT_BATCH3 = ("demucs-v3-blstm", "tacotron-cbhg-bigru-lstmcell", "pyhealth-rnnlayer-bigru",
                   "piano-transcription-acoustic-crnn-bigru", "tape-protein-lstm", "sb3-recurrent-ppo-lstm")


def _slow_live_case(case: ThirdPartyCase, batch: int) -> bool:
    return case.name in _SLOW_AT_BATCH3 and batch == 3


# --------------------------------------------------------------------------------------------
# The tests


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> MadeOnFirstUse:
    """Each case exported from each example batch once, for the tests that read the file (none
    changes it): (model, make_inputs, path, report)."""
    folder = tmp_path_factory.mktemp("third_party")

    def make(case: ThirdPartyCase, batch: int) -> tuple:
        model, make_inputs = build(case)
        path = folder / f"{case.name}-batch{batch}.onnx"
        return model, make_inputs, path, rnnx.export(model, example(make_inputs, batch), path)

    return MadeOnFirstUse({(c.name, b): (lambda c=c, b=b: make(c, b)) for c in CASES for b in EXAMPLE_BATCHES})


@pytest.mark.parametrize(("case", "example_batch"), _params(CASES, lambda c: c.xfail, _slow_live_case))
def test_third_party_model_exports_native_and_matches(case: ThirdPartyCase, example_batch: int, exported: MadeOnFirstUse) -> None:
    model, make_inputs, path, report = exported[case.name, example_batch]
    assert report.passed, str(report)

    _assert_native(onnx.load(str(path)), case.native)
    session = _session(path)
    for (batch, seq), inputs in zip(CHECK_SHAPES, check_inputs(make_inputs)):
        want = torch_outputs(model, inputs)
        compare(session, [x.numpy() for x in flat_tensors(inputs)], want, f"batch={batch} seq={seq}")


def _manifest() -> dict:
    path = FIXTURES / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


MANIFEST = _manifest()


def _recorded_failures(case: ThirdPartyCase) -> dict[int, str]:
    entry = MANIFEST.get(case.name, {})
    return {int(b[len("batch"):]): e["failure"] for b, e in entry.get("exports", {}).items() if e.get("failure")}


def test_every_recorded_case_is_in_the_manifest_with_its_files() -> None:
    assert sorted(MANIFEST) == sorted(c.name for c in RECORDED), "rerun tools/third_party/make_fixtures.py"
    listed = {"manifest.json"}
    for name, entry in MANIFEST.items():
        listed.add(entry["recorded"])
        arrays = FIXTURES / entry["recorded"]
        assert hashlib.sha256(arrays.read_bytes()).hexdigest() == entry["recorded_sha256"], name
        for export in entry["exports"].values():
            if export.get("file"):
                listed.add(export["file"])
                assert hashlib.sha256((FIXTURES / export["file"]).read_bytes()).hexdigest() == export["sha256"], name
    on_disk = {p.name for p in FIXTURES.iterdir()}
    assert on_disk == listed, f"unlisted: {sorted(on_disk - listed)}, missing: {sorted(listed - on_disk)}"
    assert sum(p.stat().st_size for p in FIXTURES.iterdir()) < 2 * 1024 * 1024


@pytest.mark.parametrize(("case", "example_batch"), _params(RECORDED, _recorded_failures))
def test_recorded_third_party_export_runs_as_its_torch_module_did(case: ThirdPartyCase, example_batch: int) -> None:
    """The file rnnx.export wrote in tools/third_party's environment, run in ONNX Runtime at the
    recorded check shapes against the torch module's recorded outputs."""
    entry = MANIFEST[case.name]
    export = entry["exports"][f"batch{example_batch}"]
    assert export.get("file"), f"rnnx.export failed in {entry['environment']}: {export.get('failure')}"
    path = FIXTURES / export["file"]
    _assert_native(onnx.load(str(path)), case.native)
    session = _session(path)
    with np.load(FIXTURES / entry["recorded"]) as recorded:
        for k, (batch, seq) in enumerate(CHECK_SHAPES):
            inputs = [recorded[f"in{k}_{i}"] for i in range(entry["inputs_per_shape"])]
            want = [recorded[f"out{k}_{i}"] for i in range(entry["outputs_per_shape"])]
            compare(session, inputs, want, f"batch={batch} seq={seq}")


_VERIFIED = [c for c in CASES if c.name in ("stanza-langid-bilstm", "deepecho-par-gru", "legere-crnn-bigru")]
_FACTORY = """
import sys
import torch
sys.path.insert(0, {root!r})
from tests.exporters import test_third_party as T


def build():
    torch.manual_seed(0)
    model, inputs = next(c for c in T.CASES if c.name == {name!r}).build()
    return model.eval(), inputs(3, T.EXAMPLE_SEQ, torch.Generator().manual_seed(0))
"""


@pytest.mark.parametrize("case", _VERIFIED, ids=lambda c: c.name)
def test_rnnx_verify_against_the_model_code_passes_on_the_exported_file(case: ThirdPartyCase, exported: MadeOnFirstUse, tmp_path) -> None:
    """``rnnx verify FILE --against code.py:NAME`` drives the package's own forward (through the
    file's call record) and passes, outputs and every recurrent layer."""
    *_, path, _ = exported[case.name, 3]  # the file export's test checks, made from _FACTORY's model and example
    code = tmp_path / "model_code.py"
    code.write_text(_FACTORY.format(root=str(Path(__file__).resolve().parents[2]), name=case.name))
    done = rnnx_in_process("verify", path, "--against", f"{code}:build", "--json")  # in-process: verify's call is tested, not the process
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["passed"] and report["layers"] and all(la["status"] == "ok" for la in report["layers"]), report["layers"]
