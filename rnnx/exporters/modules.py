"""Stand-ins for nn.LSTM / nn.GRU / nn.RNN that call rnnx's custom ops, one per layer.

Each stand-in holds its layers' weights in ONNX layout as buffers (they become the
ONNX initializers), converted through the canonical form, and takes and returns what
the original module does: (input, hx) with batch_first, PackedSequence-free padded
input plus optional lengths, and (output, h_n) or (output, (h_n, c_n)).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import rnnx
from rnnx.errors import RNNXError
from rnnx.exporters import ops  # noqa: F401  (registers torch.ops.rnnx.*)
from rnnx.formats.onnx import layer_arrays
from rnnx.spec import RNNSpec

RECURRENT_MODULES = (nn.LSTM, nn.GRU, nn.RNN)
CELL_MODULES = (nn.LSTMCell, nn.GRUCell, nn.RNNCell)


def spec_of_module(module: nn.Module) -> RNNSpec:
    if isinstance(module, nn.LSTM):
        cell = "lstm"
    elif isinstance(module, nn.GRU):
        cell = "gru"
    elif isinstance(module, nn.RNN):
        cell = "rnn_" + module.nonlinearity
    else:
        raise RNNXError(f"{type(module).__name__}: expected nn.LSTM, nn.GRU or nn.RNN")
    return RNNSpec(
        cell=cell,
        input_size=module.input_size,
        hidden_size=module.hidden_size,
        num_layers=module.num_layers,
        direction="bidirectional" if module.bidirectional else "forward",
        bias=module.bias,
        proj_size=getattr(module, "proj_size", 0),
    )


@dataclass
class PaddedBatch:
    """Stands in for a PackedSequence while exporting: the padded data and the lengths,
    which become the ONNX node's ``sequence_lens``."""

    data: torch.Tensor
    lengths: torch.Tensor
    batch_first: bool


def _pack_padded(input: torch.Tensor, lengths: Any, batch_first: bool = False, enforce_sorted: bool = True) -> PaddedBatch:
    lengths = lengths if isinstance(lengths, torch.Tensor) else torch.as_tensor(lengths)
    return PaddedBatch(input, lengths, batch_first)


def _pad_packed(sequence: PaddedBatch, batch_first: bool = False, padding_value: float = 0.0, total_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    data = sequence.data if sequence.batch_first == batch_first else sequence.data.transpose(0, 1)
    if padding_value:
        steps = torch.arange(data.shape[1 if batch_first else 0], device=data.device)
        valid = steps.unsqueeze(0) < sequence.lengths.unsqueeze(1)  # (batch, seq)
        valid = (valid if batch_first else valid.transpose(0, 1)).unsqueeze(-1)
        data = torch.where(valid, data, torch.full_like(data, padding_value))
    return data, sequence.lengths


@contextlib.contextmanager
def packed_sequences_as_lengths() -> Iterator[int]:
    """While exporting, pack_padded_sequence / pad_packed_sequence pass padded tensors and
    lengths through instead (also where a module imported them by name). Yields how many
    names were patched."""
    import torch.nn.utils.rnn as rnn_utils

    replacements = {rnn_utils.pack_padded_sequence: _pack_padded, rnn_utils.pad_packed_sequence: _pad_packed}
    patched = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            try:
                replacement = replacements.get(value)
            except TypeError:  # unhashable values cannot be the functions
                continue
            if replacement is not None:
                namespace[name] = replacement
                patched.append((namespace, name, value))
    try:
        yield len(patched)
    finally:
        for namespace, name, value in patched:
            namespace[name] = value


class NativeRecurrence(nn.Module):
    """Replaces one recurrent layer stack; exports as one native node per layer."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.spec = spec_of_module(module)
        self.batch_first = bool(module.batch_first)
        state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
        weights = rnnx.from_format(state, "torch", spec=self.spec)
        self.layer_keys: list[dict[str, str]] = []
        device = next(module.parameters()).device
        for k in range(self.spec.num_layers):
            arrays = layer_arrays(weights, k)
            keys = {}
            for key in ("W", "R", "B", "proj"):
                if key in arrays:
                    name = f"l{k}_{key}"
                    self.register_buffer(name, torch.from_numpy(arrays[key].copy()).to(device))
                    keys[key] = name
            self.layer_keys.append(keys)

    def _layer(self, k: int, x: torch.Tensor, lens: torch.Tensor | None, h0: torch.Tensor | None, c0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        spec, keys = self.spec, self.layer_keys[k]
        get = lambda key: getattr(self, keys[key]) if key in keys else None  # noqa: E731
        W, R, B = get("W"), get("R"), get("B")
        if spec.cell == "lstm":
            return torch.ops.rnnx.lstm(x, W, R, B, lens, h0, c0, None, get("proj"), spec.hidden_size, spec.direction)
        if spec.cell == "gru":
            y, h = torch.ops.rnnx.gru(x, W, R, B, lens, h0, spec.hidden_size, spec.direction, int(spec.reset_after))
        else:
            y, h = torch.ops.rnnx.rnn(x, W, R, B, lens, h0, spec.hidden_size, spec.direction, spec.cell[4:])
        return y, h, None

    def forward(self, input: torch.Tensor | PaddedBatch, hx: Any = None) -> tuple[Any, Any]:
        spec = self.spec
        D = spec.num_directions
        packed = isinstance(input, PaddedBatch)
        data = input.data if packed else input
        batch_first = input.batch_first if packed else self.batch_first
        if data.dim() != 3:
            raise RNNXError(f"{type(self).__name__}: expected a 3-D input (unbatched input is not exported), found {data.dim()}-D")
        x = data.transpose(0, 1) if batch_first else data
        lengths = input.lengths if packed else None
        h0 = c0 = None
        if hx is not None:
            h0, c0 = hx if spec.cell == "lstm" else (hx, None)
        lens = lengths.to(torch.int32) if lengths is not None else None
        hs, cs = [], []
        for k in range(spec.num_layers):
            sl = slice(k * D, (k + 1) * D)
            x, h, c = self._layer(k, x, lens, None if h0 is None else h0[sl], None if c0 is None else c0[sl])
            hs.append(h)
            cs.append(c)
        y = PaddedBatch(x, input.lengths, False) if packed else (x.transpose(0, 1) if batch_first else x)
        h_n = torch.cat(hs) if len(hs) > 1 else hs[0]
        if spec.cell == "lstm":
            return y, (h_n, torch.cat(cs) if len(cs) > 1 else cs[0])
        return y, h_n


def spec_of_cell(module: nn.Module) -> RNNSpec:
    if isinstance(module, nn.LSTMCell):
        cell = "lstm"
    elif isinstance(module, nn.GRUCell):
        cell = "gru"
    else:
        cell = "rnn_" + module.nonlinearity
    return RNNSpec(cell=cell, input_size=module.input_size, hidden_size=module.hidden_size, bias=module.bias)


class NativeCell(nn.Module):
    """Replaces an nn.LSTMCell / GRUCell / RNNCell; each call exports as a one-step native node."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.spec = spec_of_cell(module)
        state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
        arrays = layer_arrays(rnnx.from_format(state, "torch", spec=self.spec), 0)
        device = next(module.parameters()).device
        for key in ("W", "R", "B"):
            self.register_buffer(key, torch.from_numpy(arrays[key].copy()).to(device) if key in arrays else None)

    def forward(self, input: torch.Tensor, hx: Any = None) -> Any:
        spec = self.spec
        if input.dim() != 2:
            raise RNNXError(f"{type(self).__name__}: expected a batched 2-D input, found {input.dim()}-D")
        zeros = lambda: input.new_zeros(input.shape[0], spec.hidden_size)  # noqa: E731
        if spec.cell == "lstm":
            h, c = hx if hx is not None else (zeros(), zeros())
            return torch.ops.rnnx.lstm_cell(input, h, c, self.W, self.R, self.B, spec.hidden_size)
        h = hx if hx is not None else zeros()
        if spec.cell == "gru":
            return torch.ops.rnnx.gru_cell(input, h, self.W, self.R, self.B, spec.hidden_size)
        return torch.ops.rnnx.rnn_cell(input, h, self.W, self.R, self.B, spec.hidden_size, spec.cell[4:])


def swap_recurrent_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Replace every nn.LSTM / GRU / RNN and every Cell inside ``model`` (in place) by its stand-in."""
    swapped: list[tuple[str, nn.Module]] = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) in RECURRENT_MODULES or type(child) in CELL_MODULES:
                native = NativeRecurrence(child) if type(child) in RECURRENT_MODULES else NativeCell(child)
                setattr(module, child_name, native)
                swapped.append((f"{name}.{child_name}" if name else child_name, native))
    if type(model) in RECURRENT_MODULES:
        raise RNNXError("internal: wrap a bare recurrent module before swapping")  # export() wraps it
    return swapped


def cell_modules(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, CELL_MODULES)]
