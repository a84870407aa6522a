"""A corpus of recurrent model families, written the way open-source projects write them.

Each family is a small copy (hidden sizes 8-24) of a well-known design: CRNN OCR heads,
DeepSpeech2, streaming VADs with carried state, attention seq2seq, a Tacotron 2 decoder
stepped in a Python loop, the pytorch/examples word language model, and so on. The code
keeps the source projects' idioms (``nn.Sequential`` front ends, ``init_hidden``,
``x.size(0)``, permutes and views, ``pack_padded_sequence``, module attributes read
inside ``forward``) rather than a form chosen to be easy to export.

``Family.example(batch, steps, seed)`` builds a model's positional inputs; ``steps``
is the family's time axis (image width for CRNN, spectrogram frames for DeepSpeech, the
source length for seq2seq, the encoder memory length for the Tacotron decoder).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


@dataclass(frozen=True)
class Family:
    name: str
    make: Callable[[], nn.Module]
    example: Callable[[int, int, int], tuple[Any, ...]]
    native: str  # the ONNX op carrying the recurrence: "LSTM", "GRU" or "RNN"
    min_native: int  # the least number of such nodes expected in the main graph


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _as_if_trained(model: nn.Module) -> nn.Module:
    """Give batch norms the running statistics a trained checkpoint would have (not 0 and 1)."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
    return model


def _lengths(batch: int, steps: int, g: torch.Generator) -> torch.Tensor:
    """Sequence lengths sorted longest first, the longest filling ``steps``."""
    lengths = torch.randint(1, steps + 1, (batch,), generator=g, dtype=torch.int64)
    lengths = torch.sort(lengths, descending=True).values
    lengths[0] = steps
    return lengths


# --------------------------------------------------------------------------- crnn
# After crnn.pytorch (meijieru/crnn.pytorch, models/crnn.py), channels scaled down.


class BidirectionalLSTM(nn.Module):
    def __init__(self, nIn, nHidden, nOut):
        super(BidirectionalLSTM, self).__init__()

        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        t_rec = recurrent.view(T * b, h)

        output = self.embedding(t_rec)  # [T * b, nOut]
        output = output.view(T, b, -1)

        return output


class CRNN(nn.Module):
    def __init__(self, imgH=32, nc=1, nclass=11, nh=16, leakyRelu=False):
        super(CRNN, self).__init__()
        assert imgH % 16 == 0, "imgH has to be a multiple of 16"

        ks = [3, 3, 3, 3, 3, 3, 2]
        ps = [1, 1, 1, 1, 1, 1, 0]
        ss = [1, 1, 1, 1, 1, 1, 1]
        nm = [8, 16, 16, 16, 24, 24, 24]

        cnn = nn.Sequential()

        def convRelu(i, batchNormalization=False):
            nIn = nc if i == 0 else nm[i - 1]
            nOut = nm[i]
            cnn.add_module("conv{0}".format(i), nn.Conv2d(nIn, nOut, ks[i], ss[i], ps[i]))
            if batchNormalization:
                cnn.add_module("batchnorm{0}".format(i), nn.BatchNorm2d(nOut))
            if leakyRelu:
                cnn.add_module("relu{0}".format(i), nn.LeakyReLU(0.2, inplace=True))
            else:
                cnn.add_module("relu{0}".format(i), nn.ReLU(True))

        convRelu(0)
        cnn.add_module("pooling{0}".format(0), nn.MaxPool2d(2, 2))  # 8x16xW/2
        convRelu(1)
        cnn.add_module("pooling{0}".format(1), nn.MaxPool2d(2, 2))  # 16x8xW/4
        convRelu(2, True)
        convRelu(3)
        cnn.add_module("pooling{0}".format(2), nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # 16x4xW/4+1
        convRelu(4, True)
        convRelu(5)
        cnn.add_module("pooling{0}".format(3), nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # 24x2xW/4+2
        convRelu(6, True)  # 24x1xW/4+1

        self.cnn = cnn
        self.rnn = nn.Sequential(BidirectionalLSTM(nm[-1], nh, nh), BidirectionalLSTM(nh, nh, nclass))

    def forward(self, input):
        # conv features
        conv = self.cnn(input)
        b, c, h, w = conv.size()
        assert h == 1, "the height of conv must be 1"
        conv = conv.squeeze(2)
        conv = conv.permute(2, 0, 1)  # [w, b, c]

        # rnn features
        output = self.rnn(conv)

        # add log_softmax to converge output
        output = F.log_softmax(output, dim=2)
        return output


def _crnn_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    # steps is the image width
    return (torch.rand(batch, 1, 32, steps, generator=_gen(seed)) * 2 - 1,)


# --------------------------------------------------------------------------- deepspeech
# After deepspeech.pytorch (SeanNaren/deepspeech.pytorch, deepspeech_pytorch/model.py),
# without the length masking: a fixed-length spectrogram in, per-frame softmax out.


class SequenceWise(nn.Module):
    def __init__(self, module):
        """
        Collapses input of dim T*N*H to (T*N)*H, and applies to a module.
        Allows handling of variable sequence lengths and minibatch sizes.
        :param module: Module to apply input to.
        """
        super(SequenceWise, self).__init__()
        self.module = module

    def forward(self, x):
        t, n = x.size(0), x.size(1)
        x = x.view(t * n, -1)
        x = self.module(x)
        x = x.view(t, n, -1)
        return x

    def __repr__(self):
        tmpstr = self.__class__.__name__ + " (\n"
        tmpstr += self.module.__repr__()
        tmpstr += ")"
        return tmpstr


class InferenceBatchSoftmax(nn.Module):
    def forward(self, input_):
        if not self.training:
            return F.softmax(input_, dim=-1)
        else:
            return input_


class BatchRNN(nn.Module):
    def __init__(self, input_size, hidden_size, rnn_type=nn.RNN, bidirectional=False, batch_norm=True):
        super(BatchRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.batch_norm = SequenceWise(nn.BatchNorm1d(input_size)) if batch_norm else None
        self.rnn = rnn_type(input_size=input_size, hidden_size=hidden_size, bidirectional=bidirectional, bias=True)
        self.num_directions = 2 if bidirectional else 1

    def flatten_parameters(self):
        self.rnn.flatten_parameters()

    def forward(self, x):
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x, h = self.rnn(x)
        if self.bidirectional:
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2).view(x.size(0), x.size(1), -1)  # (TxNxH*2) -> (TxNxH) by sum
        return x


class DeepSpeech(nn.Module):
    def __init__(self, n_fft_bins=32, rnn_type=nn.RNN, rnn_hidden_size=16, nb_layers=3, num_classes=12, bidirectional=True):
        super(DeepSpeech, self).__init__()
        self.bidirectional = bidirectional

        self.conv = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=(9, 5), stride=(2, 2), padding=(4, 2)),
            nn.BatchNorm2d(8),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(8, 8, kernel_size=(5, 5), stride=(2, 1), padding=(2, 2)),
            nn.BatchNorm2d(8),
            nn.Hardtanh(0, 20, inplace=True),
        )
        # Based on above convolutions and spectrogram size using conv formula (W - F + 2P)/ S+1
        rnn_input_size = n_fft_bins
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 4 - 9) / 2 + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 2 - 5) / 2 + 1)
        rnn_input_size *= 8

        rnns = []
        rnn = BatchRNN(input_size=rnn_input_size, hidden_size=rnn_hidden_size, rnn_type=rnn_type, bidirectional=bidirectional, batch_norm=False)
        rnns.append(("0", rnn))
        for x in range(nb_layers - 1):
            rnn = BatchRNN(input_size=rnn_hidden_size, hidden_size=rnn_hidden_size, rnn_type=rnn_type, bidirectional=bidirectional)
            rnns.append(("%d" % (x + 1), rnn))
        self.rnns = nn.Sequential(OrderedDict(rnns))

        fully_connected = nn.Sequential(nn.BatchNorm1d(rnn_hidden_size), nn.Linear(rnn_hidden_size, num_classes, bias=False))
        self.fc = nn.Sequential(SequenceWise(fully_connected))
        self.inference_softmax = InferenceBatchSoftmax()

    def forward(self, x):
        x = self.conv(x)
        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # Collapse feature dimension
        x = x.transpose(1, 2).transpose(0, 1).contiguous()  # TxNxH

        x = self.rnns(x)

        x = self.fc(x)
        x = x.transpose(0, 1)
        # identity in training mode, softmax in eval mode
        x = self.inference_softmax(x)
        return x


def _deepspeech_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    # a log-magnitude spectrogram, (N, 1, freq, time); steps is the number of frames
    spect = torch.randn(batch, 1, 32, steps, generator=_gen(seed))
    return (spect,)


# --------------------------------------------------------------------------- vad
# A streaming voice-activity detector: one chunk at a time, the LSTM state carried
# between calls by the caller (as Silero-style VADs are run).


class StreamingVAD(nn.Module):
    def __init__(self, n_features=16, hidden_size=16, num_layers=2):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.encoder = nn.Sequential(nn.Linear(n_features, 24), nn.ReLU(), nn.Dropout(0.1))
        self.lstm = nn.LSTM(24, hidden_size, num_layers=num_layers, batch_first=True, dropout=0.1)
        self.decoder = nn.Sequential(nn.ReLU(), nn.Linear(hidden_size, 1), nn.Sigmoid())

    def init_state(self, batch_size):
        h = torch.zeros(self.num_layers, batch_size, self.hidden_size)
        c = torch.zeros(self.num_layers, batch_size, self.hidden_size)
        return h, c

    def forward(self, x, h, c):
        x = self.encoder(x)
        x, (h, c) = self.lstm(x, (h, c))
        prob = self.decoder(x)
        return prob, h, c


def _vad_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    g = _gen(seed)
    x = torch.randn(batch, steps, 16, generator=g)
    # the state carried over from the previous chunk
    h = torch.randn(2, batch, 16, generator=g) * 0.5
    c = torch.randn(2, batch, 16, generator=g) * 0.5
    return (x, h, c)


# --------------------------------------------------------------------------- seq2seq
# After the PyTorch chatbot tutorial (EncoderRNN, Attn 'dot', LuongAttnDecoderRNN),
# batch-first, the decoder run over the whole target with teacher forcing.


class EncoderRNN(nn.Module):
    def __init__(self, hidden_size, embedding, n_layers=1, dropout=0):
        super(EncoderRNN, self).__init__()
        self.n_layers = n_layers
        self.hidden_size = hidden_size
        self.embedding = embedding
        # Initialize GRU; the input_size and hidden_size params are both set to 'hidden_size'
        #   because our input size is a word embedding with number of features == hidden_size
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout), bidirectional=True, batch_first=True)

    def forward(self, input_seq, hidden=None):
        embedded = self.embedding(input_seq)
        outputs, hidden = self.gru(embedded, hidden)
        # Sum bidirectional GRU outputs
        outputs = outputs[:, :, : self.hidden_size] + outputs[:, :, self.hidden_size :]
        return outputs, hidden


class Attn(nn.Module):
    def __init__(self, method, hidden_size):
        super(Attn, self).__init__()
        self.method = method
        if self.method not in ["dot", "general"]:
            raise ValueError(self.method, "is not an appropriate attention method.")
        self.hidden_size = hidden_size
        if self.method == "general":
            self.attn = nn.Linear(self.hidden_size, hidden_size)

    def forward(self, hidden, encoder_outputs):
        # hidden: (B, T, H), encoder_outputs: (B, S, H)
        if self.method == "general":
            encoder_outputs = self.attn(encoder_outputs)
        attn_energies = torch.bmm(hidden, encoder_outputs.transpose(1, 2))  # (B, T, S)
        return F.softmax(attn_energies, dim=-1)


class LuongAttnDecoderRNN(nn.Module):
    def __init__(self, attn_model, embedding, hidden_size, output_size, n_layers=1, dropout=0.1):
        super(LuongAttnDecoderRNN, self).__init__()
        self.attn_model = attn_model
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers
        self.dropout = dropout

        self.embedding = embedding
        self.embedding_dropout = nn.Dropout(dropout)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout), batch_first=True)
        self.concat = nn.Linear(hidden_size * 2, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)
        self.attn = Attn(attn_model, hidden_size)

    def forward(self, input_seq, last_hidden, encoder_outputs):
        embedded = self.embedding(input_seq)
        embedded = self.embedding_dropout(embedded)
        rnn_output, hidden = self.gru(embedded, last_hidden)
        attn_weights = self.attn(rnn_output, encoder_outputs)
        context = attn_weights.bmm(encoder_outputs)  # (B, T, H)
        concat_input = torch.cat((rnn_output, context), 2)
        concat_output = torch.tanh(self.concat(concat_input))
        output = self.out(concat_output)
        return output, hidden


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab=40, tgt_vocab=36, hidden_size=16, n_layers=2, dropout=0.1):
        super().__init__()
        self.encoder = EncoderRNN(hidden_size, nn.Embedding(src_vocab, hidden_size), n_layers, dropout)
        self.decoder = LuongAttnDecoderRNN("dot", nn.Embedding(tgt_vocab, hidden_size), hidden_size, tgt_vocab, n_layers, dropout)

    def forward(self, src, tgt):
        encoder_outputs, encoder_hidden = self.encoder(src)
        # Set initial decoder hidden state to the encoder's final hidden state
        decoder_hidden = encoder_hidden[: self.decoder.n_layers]
        logits, _ = self.decoder(tgt, decoder_hidden, encoder_outputs)
        return F.log_softmax(logits, dim=-1)


def _seq2seq_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    g = _gen(seed)
    src = torch.randint(0, 40, (batch, steps), generator=g)
    tgt = torch.randint(0, 36, (batch, steps // 2 + 2), generator=g)
    return (src, tgt)


# --------------------------------------------------------------------------- tacotron_decoder
# After NVIDIA/tacotron2 (model.py: Prenet, LocationLayer, Attention, Decoder), state in
# local variables, a fixed number of decoder steps, no memory mask.


class LinearNorm(torch.nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, w_init_gain="linear"):
        super(LinearNorm, self).__init__()
        self.linear_layer = torch.nn.Linear(in_dim, out_dim, bias=bias)

        torch.nn.init.xavier_uniform_(self.linear_layer.weight, gain=torch.nn.init.calculate_gain(w_init_gain))

    def forward(self, x):
        return self.linear_layer(x)


class ConvNorm(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=1, stride=1, padding=None, dilation=1, bias=True, w_init_gain="linear"):
        super(ConvNorm, self).__init__()
        if padding is None:
            assert kernel_size % 2 == 1
            padding = int(dilation * (kernel_size - 1) / 2)

        self.conv = torch.nn.Conv1d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias)

        torch.nn.init.xavier_uniform_(self.conv.weight, gain=torch.nn.init.calculate_gain(w_init_gain))

    def forward(self, signal):
        conv_signal = self.conv(signal)
        return conv_signal


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super(LocationLayer, self).__init__()
        padding = int((attention_kernel_size - 1) / 2)
        self.location_conv = ConvNorm(2, attention_n_filters, kernel_size=attention_kernel_size, padding=padding, bias=False, stride=1, dilation=1)
        self.location_dense = LinearNorm(attention_n_filters, attention_dim, bias=False, w_init_gain="tanh")

    def forward(self, attention_weights_cat):
        processed_attention = self.location_conv(attention_weights_cat)
        processed_attention = processed_attention.transpose(1, 2)
        processed_attention = self.location_dense(processed_attention)
        return processed_attention


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim, attention_location_n_filters, attention_location_kernel_size):
        super(Attention, self).__init__()
        self.query_layer = LinearNorm(attention_rnn_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(attention_location_n_filters, attention_location_kernel_size, attention_dim)
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query, processed_memory, attention_weights_cat):
        """
        PARAMS
        ------
        query: decoder output (batch, n_mel_channels * n_frames_per_step)
        processed_memory: processed encoder outputs (B, T_in, attention_dim)
        attention_weights_cat: cumulative and prev. att weights (B, 2, max_time)

        RETURNS
        -------
        alignment (batch, max_time)
        """

        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(torch.tanh(processed_query + processed_attention_weights + processed_memory))

        energies = energies.squeeze(-1)
        return energies

    def forward(self, attention_hidden_state, memory, processed_memory, attention_weights_cat, mask=None):
        alignment = self.get_alignment_energies(attention_hidden_state, processed_memory, attention_weights_cat)

        if mask is not None:
            alignment.data.masked_fill_(mask, self.score_mask_value)

        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory)
        attention_context = attention_context.squeeze(1)

        return attention_context, attention_weights


class Prenet(nn.Module):
    def __init__(self, in_dim, sizes):
        super(Prenet, self).__init__()
        in_sizes = [in_dim] + sizes[:-1]
        self.layers = nn.ModuleList([LinearNorm(in_size, out_size, bias=False) for (in_size, out_size) in zip(in_sizes, sizes)])

    def forward(self, x):
        for linear in self.layers:
            # Tacotron 2 keeps this dropout on at inference; here it follows the module's mode.
            x = F.dropout(F.relu(linear(x)), p=0.5, training=self.training)
        return x


class TacotronDecoder(nn.Module):
    def __init__(
        self,
        n_mel_channels=8,
        encoder_embedding_dim=16,
        prenet_dim=16,
        attention_rnn_dim=24,
        decoder_rnn_dim=24,
        attention_dim=12,
        attention_location_n_filters=4,
        attention_location_kernel_size=7,
        p_attention_dropout=0.1,
        p_decoder_dropout=0.1,
        max_steps=6,
    ):
        super(TacotronDecoder, self).__init__()
        self.n_mel_channels = n_mel_channels
        self.encoder_embedding_dim = encoder_embedding_dim
        self.attention_rnn_dim = attention_rnn_dim
        self.decoder_rnn_dim = decoder_rnn_dim
        self.prenet_dim = prenet_dim
        self.p_attention_dropout = p_attention_dropout
        self.p_decoder_dropout = p_decoder_dropout
        self.max_steps = max_steps

        self.prenet = Prenet(n_mel_channels, [prenet_dim, prenet_dim])
        self.attention_rnn = nn.LSTMCell(prenet_dim + encoder_embedding_dim, attention_rnn_dim)
        self.attention_layer = Attention(attention_rnn_dim, encoder_embedding_dim, attention_dim, attention_location_n_filters, attention_location_kernel_size)
        self.decoder_rnn = nn.LSTMCell(attention_rnn_dim + encoder_embedding_dim, decoder_rnn_dim, 1)
        self.linear_projection = LinearNorm(decoder_rnn_dim + encoder_embedding_dim, n_mel_channels)

    def get_go_frame(self, memory):
        B = memory.size(0)
        decoder_input = memory.new_zeros(B, self.n_mel_channels)
        return decoder_input

    def forward(self, memory):
        B = memory.size(0)
        MAX_TIME = memory.size(1)

        attention_hidden = memory.new_zeros(B, self.attention_rnn_dim)
        attention_cell = memory.new_zeros(B, self.attention_rnn_dim)
        decoder_hidden = memory.new_zeros(B, self.decoder_rnn_dim)
        decoder_cell = memory.new_zeros(B, self.decoder_rnn_dim)
        attention_weights = memory.new_zeros(B, MAX_TIME)
        attention_weights_cum = memory.new_zeros(B, MAX_TIME)
        attention_context = memory.new_zeros(B, self.encoder_embedding_dim)
        processed_memory = self.attention_layer.memory_layer(memory)

        decoder_input = self.get_go_frame(memory)
        mel_outputs = []
        for _ in range(self.max_steps):
            decoder_input = self.prenet(decoder_input)

            cell_input = torch.cat((decoder_input, attention_context), -1)
            attention_hidden, attention_cell = self.attention_rnn(cell_input, (attention_hidden, attention_cell))
            attention_hidden = F.dropout(attention_hidden, self.p_attention_dropout, self.training)

            attention_weights_cat = torch.cat((attention_weights.unsqueeze(1), attention_weights_cum.unsqueeze(1)), dim=1)
            attention_context, attention_weights = self.attention_layer(attention_hidden, memory, processed_memory, attention_weights_cat)
            attention_weights_cum = attention_weights_cum + attention_weights

            decoder_rnn_input = torch.cat((attention_hidden, attention_context), -1)
            decoder_hidden, decoder_cell = self.decoder_rnn(decoder_rnn_input, (decoder_hidden, decoder_cell))
            decoder_hidden = F.dropout(decoder_hidden, self.p_decoder_dropout, self.training)

            decoder_hidden_attention_context = torch.cat((decoder_hidden, attention_context), dim=1)
            mel_output = self.linear_projection(decoder_hidden_attention_context)
            mel_outputs += [mel_output]
            decoder_input = mel_output

        # (T_out, B, n_mel_channels) -> (B, T_out, n_mel_channels)
        mel_outputs = torch.stack(mel_outputs).transpose(0, 1).contiguous()
        return mel_outputs


def _tacotron_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    # the text encoder's outputs; steps is the memory (input text) length
    return (torch.randn(batch, steps, 16, generator=_gen(seed)),)


# --------------------------------------------------------------------------- lm_tied
# pytorch/examples word_language_model/model.py (RNNModel), LSTM, tied weights.


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            except KeyError as e:
                raise ValueError(
                    """An invalid option for `--model` was supplied,
                                 options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']"""
                ) from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        # Optionally tie weights as in:
        # "Using the Output Embedding to Improve Language Models" (Press & Wolf 2016)
        # https://arxiv.org/abs/1608.05859
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


def _lm_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    g = _gen(seed)
    data = torch.randint(0, 50, (steps, batch), generator=g)  # (bptt, bsz) as batchify() lays it out
    # the hidden state carried (repackaged) from the previous bptt chunk
    hidden = (torch.randn(2, batch, 16, generator=g) * 0.3, torch.randn(2, batch, 16, generator=g) * 0.3)
    return (data, hidden)


# --------------------------------------------------------------------------- tagger
# A BiLSTM sequence tagger that builds its zero state from the LSTM's own attributes.


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size=60, embedding_dim=16, hidden_dim=12, tagset_size=7, num_layers=2, dropout=0.25):
        super(BiLSTMTagger, self).__init__()
        self.word_embeddings = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers=num_layers, bidirectional=True, batch_first=True, dropout=dropout)
        self.hidden2tag = nn.Linear(hidden_dim * 2, tagset_size)

    def init_hidden(self, batch_size, device):
        num_directions = 2 if self.lstm.bidirectional else 1
        shape = (self.lstm.num_layers * num_directions, batch_size, self.lstm.hidden_size)
        return (torch.zeros(*shape, device=device), torch.zeros(*shape, device=device))

    def forward(self, sentence):
        self.lstm.flatten_parameters()
        batch_size = sentence.size(0) if self.lstm.batch_first else sentence.size(1)
        hidden = self.init_hidden(batch_size, sentence.device)
        embeds = self.dropout(self.word_embeddings(sentence))
        lstm_out, _ = self.lstm(embeds, hidden)
        tag_space = self.hidden2tag(self.dropout(lstm_out))
        tag_scores = F.log_softmax(tag_space, dim=-1)
        return tag_scores


def _tagger_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randint(1, 60, (batch, steps), generator=_gen(seed)),)


# --------------------------------------------------------------------------- utterance_classifier
# Statistics pooling (mean, std, max) over a GRU, an L2-normalised embedding, a classifier.


class UtteranceClassifier(nn.Module):
    def __init__(self, n_mels=20, hidden_size=16, embedding_size=16, num_classes=5):
        super().__init__()
        self.gru = nn.GRU(n_mels, hidden_size, num_layers=2, batch_first=True, dropout=0.1)
        self.embedding = nn.Linear(3 * hidden_size, embedding_size)
        self.classifier = nn.Linear(embedding_size, num_classes)

    def forward(self, feats):
        out, _ = self.gru(feats)  # (B, T, H)
        mean = out.mean(dim=1)
        std = out.std(dim=1)
        peak = out.max(dim=1)[0]
        stats = torch.cat([mean, std, peak], dim=-1)
        emb = self.embedding(stats)
        emb = emb / torch.norm(emb, p=2, dim=-1, keepdim=True).clamp(min=1e-6)
        logits = self.classifier(emb) * emb.norm(dim=-1, keepdim=True)
        return logits, emb


def _utterance_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randn(batch, steps, 20, generator=_gen(seed)),)


# --------------------------------------------------------------------------- packed_speech_gru
# Ragged batches packed for the GRU, padded back, a per-frame classifier.


class PackedSpeechGRU(nn.Module):
    def __init__(self, n_feats=13, hidden_size=16, num_layers=2, num_classes=10):
        super().__init__()
        self.gru = nn.GRU(n_feats, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=True, dropout=0.1)
        self.classifier = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, feats, lengths):
        packed = pack_padded_sequence(feats, lengths.cpu(), batch_first=True)
        packed_out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(packed_out, batch_first=True)
        return self.classifier(out)


def _packed_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    g = _gen(seed)
    lengths = _lengths(batch, steps, g)
    feats = torch.randn(batch, steps, 13, generator=g)
    mask = torch.arange(steps)[None, :] < lengths[:, None]
    feats = feats * mask[:, :, None]  # zero padding, as a collate function leaves it
    return (feats, lengths)


# --------------------------------------------------------------------------- elmo_bilm
# ELMo-style biLM: a forward and a backward LSTM stack (the backward one on the time-flipped
# input), residual connections between layers, and AllenNLP's ScalarMix over the layers.


class ScalarMix(torch.nn.Module):
    def __init__(self, mixture_size, initial_scalar_parameters=None, trainable=True):
        super().__init__()
        self.mixture_size = mixture_size
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        self.scalar_parameters = nn.ParameterList(
            [nn.Parameter(torch.FloatTensor([initial_scalar_parameters[i]]), requires_grad=trainable) for i in range(mixture_size)]
        )
        self.gamma = nn.Parameter(torch.FloatTensor([1.0]), requires_grad=trainable)

    def forward(self, tensors):
        normed_weights = torch.nn.functional.softmax(torch.cat([parameter for parameter in self.scalar_parameters]), dim=0)
        normed_weights = torch.split(normed_weights, split_size_or_sections=1)

        pieces = []
        for weight, tensor in zip(normed_weights, tensors):
            pieces.append(weight * tensor)
        return self.gamma * sum(pieces)


class BiLanguageModel(nn.Module):
    def __init__(self, vocab_size=50, embedding_dim=16, num_layers=2, dropout=0.1):
        super().__init__()
        self.num_layers = num_layers
        self.token_embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.forward_layers = nn.ModuleList([nn.LSTM(embedding_dim, embedding_dim) for _ in range(num_layers)])
        self.backward_layers = nn.ModuleList([nn.LSTM(embedding_dim, embedding_dim) for _ in range(num_layers)])
        self.dropout = nn.Dropout(dropout)
        self.scalar_mix = ScalarMix(num_layers + 1, initial_scalar_parameters=[0.1, -0.2, 0.3][: num_layers + 1])

    def _run_stack(self, layers, inputs):
        outputs = []
        x = inputs
        for i, layer in enumerate(layers):
            y, _ = layer(x)
            y = self.dropout(y)
            if i != 0:
                y = y + x  # residual connection
            outputs.append(y)
            x = y
        return outputs

    def forward(self, tokens):
        embedded = self.token_embedding(tokens)  # (B, T, D)
        embedded = embedded.transpose(0, 1)  # (T, B, D)

        forward_outputs = self._run_stack(self.forward_layers, embedded)
        backward_outputs = self._run_stack(self.backward_layers, torch.flip(embedded, [0]))
        backward_outputs = [torch.flip(y, [0]) for y in backward_outputs]

        layers = [torch.cat([embedded, embedded], dim=-1)]
        for fwd, bwd in zip(forward_outputs, backward_outputs):
            layers.append(torch.cat([fwd, bwd], dim=-1))
        mixed = self.scalar_mix(layers)
        return mixed.transpose(0, 1)  # (B, T, 2D)


def _elmo_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randint(1, 50, (batch, steps), generator=_gen(seed)),)


# --------------------------------------------------------------------------- deepar
# DeepAR-style probabilistic forecaster: the lagged, scaled target with covariates into an
# LSTM, Gaussian heads for mu and sigma (softplus), rescaled.


class DeepAR(nn.Module):
    def __init__(self, num_covariates=3, lstm_hidden_dim=16, lstm_layers=2, lstm_dropout=0.1):
        super(DeepAR, self).__init__()
        self.lstm = nn.LSTM(input_size=1 + num_covariates, hidden_size=lstm_hidden_dim, num_layers=lstm_layers, bias=True, batch_first=True, dropout=lstm_dropout)
        # initialize LSTM forget gate bias to be 1 as recommanded by http://proceedings.mlr.press/v37/jozefowicz15.pdf
        for names in self.lstm._all_weights:
            for name in filter(lambda n: "bias" in n, names):
                bias = getattr(self.lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data[start:end].fill_(1.0)

        self.distribution_mu = nn.Linear(lstm_hidden_dim, 1)
        self.distribution_presigma = nn.Linear(lstm_hidden_dim, 1)
        self.distribution_sigma = nn.Softplus()

    def forward(self, target, covariates):
        # mean scaling, as in the DeepAR paper
        v = target.abs().mean(dim=1, keepdim=True) + 1.0  # (B, 1)
        scaled = target / v
        lagged = torch.cat([torch.zeros_like(scaled[:, :1]), scaled[:, :-1]], dim=1)
        lstm_input = torch.cat([lagged.unsqueeze(-1), covariates], dim=-1)
        output, (hidden, cell) = self.lstm(lstm_input)
        mu = self.distribution_mu(output).squeeze(-1)
        pre_sigma = self.distribution_presigma(output)
        sigma = self.distribution_sigma(pre_sigma).squeeze(-1)
        return mu * v, sigma * v


def _deepar_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    g = _gen(seed)
    target = torch.rand(batch, steps, generator=g) * 10.0
    covariates = torch.randn(batch, steps, 3, generator=g)
    return (target, covariates)


# --------------------------------------------------------------------------- session_rec
# GRU4Rec as RecBole writes it: item embeddings, GRU, a dense layer, the last step's
# representation scored against every item's embedding.


class GRU4Rec(nn.Module):
    def __init__(self, n_items=40, embedding_size=16, hidden_size=16, num_layers=1, dropout_prob=0.25):
        super(GRU4Rec, self).__init__()
        self.n_items = n_items
        self.item_embedding = nn.Embedding(n_items, embedding_size, padding_idx=0)
        self.emb_dropout = nn.Dropout(dropout_prob)
        self.gru_layers = nn.GRU(input_size=embedding_size, hidden_size=hidden_size, num_layers=num_layers, bias=False, batch_first=True)
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Embedding):
            nn.init.xavier_normal_(module.weight)
        elif isinstance(module, nn.GRU):
            nn.init.xavier_uniform_(module.weight_hh_l0)
            nn.init.xavier_uniform_(module.weight_ih_l0)

    def forward(self, item_seq):
        item_seq_emb = self.item_embedding(item_seq)
        item_seq_emb_dropout = self.emb_dropout(item_seq_emb)
        gru_output, _ = self.gru_layers(item_seq_emb_dropout)
        gru_output = self.dense(gru_output)
        seq_output = gru_output[:, -1, :]
        test_items_emb = self.item_embedding.weight
        scores = torch.matmul(seq_output, test_items_emb.transpose(0, 1))  # (B, n_items)
        return scores


def _session_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randint(1, 40, (batch, steps), generator=_gen(seed)),)


# --------------------------------------------------------------------------- demucs_blstm
# facebookresearch/demucs (demucs/model.py, BLSTM), as the model calls it between its
# encoder and decoder on (B, C, T).


class BLSTM(nn.Module):
    def __init__(self, dim, layers=1):
        super().__init__()
        self.lstm = nn.LSTM(bidirectional=True, num_layers=layers, hidden_size=dim, input_size=dim)
        self.linear = nn.Linear(2 * dim, dim)

    def forward(self, x):
        x = x.permute(2, 0, 1)
        x = self.lstm(x)[0]
        x = self.linear(x)
        x = x.permute(1, 2, 0)
        return x


def _demucs_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randn(batch, 16, steps, generator=_gen(seed)),)


# --------------------------------------------------------------------------- lstm_ctc
# An LSTM acoustic model for CTC: per-frame log-probabilities, (T, B, V) as nn.CTCLoss wants.


class LSTMCTC(nn.Module):
    def __init__(self, n_feats=20, hidden_size=16, num_layers=3, vocab_size=12, dropout=0.1):
        super().__init__()
        self.lstm = nn.LSTM(n_feats, hidden_size, num_layers=num_layers, batch_first=True, dropout=dropout)
        self.fc = nn.Linear(hidden_size, vocab_size)

    def forward(self, feats):
        x, _ = self.lstm(feats)
        x = self.fc(x)
        log_probs = F.log_softmax(x, dim=-1)
        return log_probs.transpose(0, 1)  # (T, B, V)


def _ctc_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randn(batch, steps, 20, generator=_gen(seed)),)


# --------------------------------------------------------------------------- attention_pool
# A BiGRU with additive attention pooling over time (Yang et al. 2016 style), then a classifier.


class AttentionPoolClassifier(nn.Module):
    def __init__(self, input_size=20, hidden_size=12, attention_size=16, num_classes=4):
        super().__init__()
        self.rnn = nn.GRU(input_size, hidden_size, batch_first=True, bidirectional=True)
        self.attention = nn.Sequential(nn.Linear(2 * hidden_size, attention_size), nn.Tanh(), nn.Linear(attention_size, 1, bias=False))
        self.fc = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, x):
        out, _ = self.rnn(x)  # (B, T, 2H)
        scores = self.attention(out).squeeze(-1)  # (B, T)
        alpha = F.softmax(scores, dim=1)
        pooled = torch.sum(alpha.unsqueeze(-1) * out, dim=1)  # (B, 2H)
        return self.fc(pooled), alpha


def _attention_pool_example(batch: int, steps: int, seed: int) -> tuple[Any, ...]:
    return (torch.randn(batch, steps, 20, generator=_gen(seed)),)


# --------------------------------------------------------------------------- the list

FAMILIES: list[Family] = [
    Family("crnn", lambda: _as_if_trained(CRNN()), _crnn_example, "LSTM", 2),
    Family("deepspeech", lambda: _as_if_trained(DeepSpeech()), _deepspeech_example, "RNN", 3),
    Family("vad", StreamingVAD, _vad_example, "LSTM", 2),
    Family("seq2seq", Seq2Seq, _seq2seq_example, "GRU", 4),
    Family("tacotron_decoder", TacotronDecoder, _tacotron_example, "LSTM", 2 * 6),  # two cells per step
    Family("lm_tied", lambda: RNNModel("LSTM", 50, 16, 16, 2, dropout=0.2, tie_weights=True), _lm_example, "LSTM", 2),
    Family("tagger", BiLSTMTagger, _tagger_example, "LSTM", 2),
    Family("utterance_classifier", UtteranceClassifier, _utterance_example, "GRU", 2),
    Family("packed_speech_gru", PackedSpeechGRU, _packed_example, "GRU", 2),
    Family("elmo_bilm", BiLanguageModel, _elmo_example, "LSTM", 4),
    Family("deepar", DeepAR, _deepar_example, "LSTM", 2),
    Family("session_rec", GRU4Rec, _session_example, "GRU", 1),
    Family("demucs_blstm", lambda: BLSTM(16, layers=2), _demucs_example, "LSTM", 2),
    Family("lstm_ctc", LSTMCTC, _ctc_example, "LSTM", 3),
    Family("attention_pool", AttentionPoolClassifier, _attention_pool_example, "GRU", 1),
]
