"""Test models for the exporters: each a case torch.onnx handles badly, with its example inputs.

Shared by the tests and by tools/compare_exporters.py, which writes the README table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class Tagger(nn.Module):
    """Linear front end, 2-layer bidirectional LSTM with initial states, linear head."""

    def __init__(self, proj_size: int = 0) -> None:
        super().__init__()
        self.front = nn.Linear(6, 8)
        self.rnn = nn.LSTM(8, 10, num_layers=2, bidirectional=True, dropout=0.3, proj_size=proj_size)
        self.head = nn.Linear(2 * (proj_size or 10), 3)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> Any:
        y, (h, c) = self.rnn(torch.relu(self.front(x)), (h0, c0))
        return self.head(y), h, c


class PackedEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(10, 2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Any:
        y, h = self.rnn(pack_padded_sequence(x, lengths, batch_first=True))
        y, _ = pad_packed_sequence(y, batch_first=True)
        return self.head(y), h


class SteppedCell(nn.Module):
    """An LSTMCell called in a Python loop over time, as people write decoders."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], 6)
        c = x.new_zeros(x.shape[1], 6)
        ys = []
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
            ys.append(h)
        return torch.stack(ys)


class SteppedGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], 5)
        ys = []
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
            ys.append(h)
        return torch.stack(ys)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], nn.Module]
    example: Callable[[], tuple[Any, ...]]
    native: str  # the ONNX op that must carry the recurrence ("Scan" when lowered)


CASES = [
    Case("lstm-2layer-bidir-states", lambda: Tagger(), lambda: (torch.randn(5, 3, 6), torch.randn(4, 3, 10), torch.randn(4, 3, 10)), "LSTM"),
    Case("lstm-projection", lambda: Tagger(proj_size=4), lambda: (torch.randn(5, 3, 6), torch.randn(4, 3, 4), torch.randn(4, 3, 10)), "Scan"),
    Case("gru-batch-first", lambda: nn.GRU(4, 5, num_layers=2, batch_first=True), lambda: (torch.randn(3, 7, 4),), "GRU"),
    Case("rnn-relu", lambda: nn.RNN(4, 5, num_layers=2, nonlinearity="relu", bidirectional=True), lambda: (torch.randn(6, 2, 4),), "RNN"),
    Case("packed-sequence", PackedEncoder, lambda: (torch.randn(3, 7, 4), torch.tensor([7, 5, 2])), "GRU"),
    Case("lstmcell-stepped", SteppedCell, lambda: (torch.randn(7, 3, 4),), "LSTM"),
]


class SteppedWithSideUse(nn.Module):
    """A stepped GRUCell whose every intermediate h also feeds a sum: not one recurrence node."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], 5)
        total = x.new_zeros(x.shape[1], 5)
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
            total = total + torch.relu(h)
        return total


class CalledOnce(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(4, 6)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> Any:
        return self.cell(x, (h, c))
