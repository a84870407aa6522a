"""Stand-ins for nn.LSTM / GRU / RNN and their Cells that call rnnx's custom ops.

A stand-in is the original module with a mixin in front of its class: it keeps every
attribute, parameter and method, and only its forward changes. It holds its layers'
weights in ONNX layout (they become the ONNX initializers), converted through the
canonical form, and takes and returns what the original module does: (input, hx) with
batch_first or unbatched, PackedSequence-free padded input plus optional lengths, and
(output, h_n) or (output, (h_n, c_n)).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters import ops  # noqa: F401  (registers torch.ops.rnnx.*)
from rnnx.formats.files import from_format
from rnnx.layouts import torch as torch_layout
from rnnx.layouts.onnx import layer_arrays
from rnnx.spec import RNNSpec

RECURRENT_MODULES = (nn.LSTM, nn.GRU, nn.RNN)
CELL_MODULES = (nn.LSTMCell, nn.GRUCell, nn.RNNCell)


def spec_of_module(module: nn.Module) -> RNNSpec:
    """The spec of an nn.LSTM/GRU/RNN, or of a cell (one layer, one direction)."""
    if isinstance(module, (nn.LSTM, nn.LSTMCell)):
        cell = "lstm"
    elif isinstance(module, (nn.GRU, nn.GRUCell)):
        cell = "gru"
    elif isinstance(module, (nn.RNN, nn.RNNCell)):
        cell = "rnn_" + module.nonlinearity
    else:
        raise RNNXError(f"{type(module).__name__}: expected nn.LSTM, nn.GRU or nn.RNN")
    return RNNSpec(cell=cell, input_size=module.input_size, hidden_size=module.hidden_size, num_layers=getattr(module, "num_layers", 1),
                   direction="bidirectional" if getattr(module, "bidirectional", False) else "forward", bias=module.bias,
                   proj_size=getattr(module, "proj_size", 0))


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


_NO_OWN = object()


@contextlib.contextmanager
def data_writes_traced() -> Iterator[None]:
    """While tracing, ``tensor.data`` is the tensor itself. Model code writes through ``.data``
    to change a tensor in place outside autograd (Tacotron's attention masks its energies with
    ``alignment.data.masked_fill_(mask, -inf)``); eagerly that writes the tensor's own storage,
    but ``.data`` makes a detached alias that neither torch.export (it fails on the alias, "a
    fake tensor in the exported program constant's list") nor the TorchScript trace (it drops
    the write) follows. Without autograd the two are the same computation, so the write is
    traced as the in-place op on the tensor it changes. Assigning ``.data`` works as before."""
    import torch

    base = torch._C.TensorBase.data
    own = torch.Tensor.__dict__.get("data", _NO_OWN)
    torch.Tensor.data = property(lambda self: self, lambda self, value: base.__set__(self, value))
    try:
        yield
    finally:
        if own is _NO_OWN:
            del torch.Tensor.data
        else:
            torch.Tensor.data = own


def forward_weights(module: nn.Module, spec: RNNSpec, where: str, cell_style: bool = False) -> dict[str, torch.Tensor]:
    """The weights ``module`` computes with, by torch's names, read as its forward reads them:
    as attributes, not from ``state_dict()``. A weight-drop wrapper takes the recurrent matrix
    out of the registry and assigns it before every call (AWD-LSTM's WeightDrop and fastai's
    WeightDropout a plain tensor, ``torch.nn.utils.parametrize`` a property computed from
    ``parametrizations.<name>.original``), so the state_dict lacks it. In eval mode, as export
    swaps a copy, the attribute holds the raw weight: the model ran on the example in eval mode
    just before, and a parametrization computes it on reading."""
    out = {}
    for key, *_ in torch_layout.keys(spec, cell_style):
        try:
            value = getattr(module, key, None)
        except Exception as exc:  # noqa: BLE001  a parametrization is the user's code
            raise RNNXError(f"{where} ({type(module).__name__}): reading {key} raised {one_line(exc, CAUSE_CHARS, typed=True)}; "
                            "fix the code that computes it") from None
        if not isinstance(value, torch.Tensor):
            found = "nothing" if value is None else f"a {type(value).__name__}"
            raise RNNXError(f"{where} ({type(module).__name__}): expected {key} as a tensor attribute, the weight its forward reads, "
                            f"found {found}; a wrapper that assigns it at each call (weight drop) must have run once: "
                            "call the model on the example in eval mode before swapping, or export through rnnx.export, which does")
        out[key] = value.detach()
    return out


class ForwardTimeWeights:
    """Mixed in before both stand-ins: a wrapper may assign a swapped module's weight at every
    call, which the native forward does not read (it computes with the weights read at the swap).
    AWD-LSTM's WeightDrop assigns ``F.dropout(raw, p, training)``; in eval mode that is the raw
    Parameter itself, which nn.Module then registers under the weight's name, and the next call,
    traced, assigns a plain tensor there, which nn.Module refuses. Such an assignment makes the
    name the plain attribute the wrapper meant it to be."""

    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if (params is not None and name in params and name in self.__dict__.get("_rnnx_weight_names", ())
                and isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter)):
            del params[name]
        super().__setattr__(name, value)


def _native_layers(module: nn.Module, spec: RNNSpec, where: str, cell_style: bool) -> list[dict[str, torch.Tensor]]:
    """Each layer's W, R, B (and proj) in ONNX layout, on the module's device, from the weights
    its forward reads."""
    state = forward_weights(module, spec, where, cell_style)
    device = next(iter(state.values())).device
    weights = from_format({k: v.cpu() for k, v in state.items()}, "torch", spec=spec)
    module.__dict__["_rnnx_weight_names"] = frozenset(state)
    layers: list[dict[str, torch.Tensor]] = []
    for k in range(spec.num_layers):
        arrays = layer_arrays(weights, k)
        layers.append({key: torch.from_numpy(arrays[key].copy()).to(device) for key in ("W", "R", "B", "proj") if key in arrays})
    return layers


def _mark_call(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The first forward pre-hook of a module given :func:`_forward_through_call`: the forward
    that follows comes through ``__call__``, its hooks already run."""
    module.__dict__["_rnnx_calls"] = module.__dict__.get("_rnnx_calls", 0) + 1


def _forward_through_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """An instance's forward: called by ``__call__`` (after :func:`_mark_call`), the class's
    forward; called directly, ``__call__``, so that the hooks run."""
    pending = self.__dict__.get("_rnnx_calls", 0)
    if pending:
        self.__dict__["_rnnx_calls"] = pending - 1
        return type(self).forward(self, *args, **kwargs)
    try:
        return self(*args, **kwargs)
    finally:
        self.__dict__["_rnnx_calls"] = 0  # a hook that raised after the mark leaves no count behind


@contextlib.contextmanager
def direct_calls_seen(model: Any) -> Iterator[int]:
    """While rnnx runs the user's model, a recurrent module whose forward is called directly
    (AWD-LSTM's WeightDrop calls ``self.module.forward(*args)``, skipping ``__call__``) runs its
    forward pre-hooks all the same: rnnx tells which inputs reach a recurrence as states, and the
    dimension audit which dimension is a batch or a length, by hooks on the recurrent modules.
    Each is given an instance forward bound to itself (a deep copy made meanwhile, such as the
    float64 truth, is bound to itself too) and removed after. The model itself is left as it is:
    rnnx calls it, and its forward's signature names the inputs. Yields how many were given one."""
    patched = []
    modules = model.named_modules() if isinstance(model, nn.Module) else ()
    for name, module in modules:
        if name and isinstance(module, RECURRENT_MODULES + CELL_MODULES) and "forward" not in module.__dict__:
            handle = module.register_forward_pre_hook(_mark_call, prepend=True, with_kwargs=True)
            module.__dict__["forward"] = types.MethodType(_forward_through_call, module)
            patched.append((module, handle))
    try:
        yield len(patched)
    finally:
        for module, handle in patched:
            handle.remove()
            module.__dict__.pop("forward", None)
            module.__dict__.pop("_rnnx_calls", None)


class NativeRecurrence(ForwardTimeWeights):
    """Mixed in before nn.LSTM / GRU / RNN: the module keeps its class, attributes, parameters
    and methods, and only its forward calls rnnx's ops, one per layer.

    The weights in ONNX layout are computed once, when the module is swapped, and kept
    outside the module's registries, so ``state_dict()``, ``named_buffers()`` and
    ``parameters()`` read exactly as before; torch.export lifts them as constants.
    """

    # set by _rnnx_prepare, and (batch_first) by the nn.LSTM / GRU / RNN this is mixed into
    _rnnx_spec: RNNSpec
    _rnnx_layers: list[dict[str, torch.Tensor]]
    batch_first: bool

    def _rnnx_prepare(self, where: str = "") -> None:
        spec = spec_of_module(self)
        self.__dict__["_rnnx_layers"] = _native_layers(self, spec, where or type(self).__name__, cell_style=False)
        self.__dict__["_rnnx_spec"] = spec

    def _rnnx_layer(self, k: int, x: torch.Tensor, lens: torch.Tensor | None, h0: torch.Tensor | None,
                    c0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        spec, arrays = self._rnnx_spec, self._rnnx_layers[k]
        W, R, B = arrays["W"], arrays["R"], arrays.get("B")
        if spec.cell == "lstm":
            return torch.ops.rnnx.lstm(x, W, R, B, lens, h0, c0, None, arrays.get("proj"), spec.hidden_size, spec.direction)
        if spec.cell == "gru":
            y, h = torch.ops.rnnx.gru(x, W, R, B, lens, h0, spec.hidden_size, spec.direction, int(spec.reset_after))
        else:
            y, h = torch.ops.rnnx.rnn(x, W, R, B, lens, h0, spec.hidden_size, spec.direction, spec.cell[4:])
        return y, h, None

    def forward(self, input: torch.Tensor | PaddedBatch, hx: Any = None) -> tuple[Any, Any]:
        spec = self._rnnx_spec
        D = spec.num_directions
        if isinstance(input, PaddedBatch):
            padded, data, batch_first = input, input.data, input.batch_first
        else:
            padded, data, batch_first = None, input, bool(self.batch_first)
        packed = padded is not None
        if data.dim() not in (2, 3) or (packed and data.dim() != 3):
            raise RNNXError(f"{type(self).__name__}: expected a 2-D (unbatched) or 3-D input, found {data.dim()}-D")
        unbatched = data.dim() == 2
        if unbatched:  # (seq, input) and states (layers*dirs, hidden), as nn.LSTM takes them
            data, batch_first = data.unsqueeze(1), False
            if hx is not None:
                hx = tuple(h.unsqueeze(1) for h in hx) if spec.cell == "lstm" else hx.unsqueeze(1)
        x = data.transpose(0, 1) if batch_first else data
        h0 = c0 = None
        if hx is not None:
            h0, c0 = hx if spec.cell == "lstm" else (hx, None)
        lens = padded.lengths.to(torch.int32) if padded is not None else None
        for name, state in (("h_0", h0), ("c_0", c0)):
            # nn.LSTM checks this too; while tracing it makes the leading dim static. torch.jit.trace
            # (the TorchScript route) gives shapes as tensors, which torch._check refuses: skipped there.
            if state is not None and not torch.jit.is_tracing():
                torch._check(state.dim() == 3 and state.shape[0] == spec.num_layers * D,
                             lambda: f"expected {name} of {spec.num_layers * D} layers*directions, found shape {tuple(state.shape)}")
        hs, cs = [], []
        for k in range(spec.num_layers):
            sl = slice(k * D, (k + 1) * D)
            x, h, c = self._rnnx_layer(k, x, lens, None if h0 is None else h0[sl], None if c0 is None else c0[sl])
            hs.append(h)
            cs.append(c)
        h_n = torch.cat(hs) if len(hs) > 1 else hs[0]
        c_n = (torch.cat(cs) if len(cs) > 1 else cs[0]) if spec.cell == "lstm" else None
        if unbatched:
            y, h_n = x.squeeze(1), h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        elif padded is not None:
            y = PaddedBatch(x, padded.lengths, False)
        else:
            y = x.transpose(0, 1) if batch_first else x
        return (y, (h_n, c_n)) if spec.cell == "lstm" else (y, h_n)


class NativeCell(ForwardTimeWeights):
    """Mixed in before nn.LSTMCell / GRUCell / RNNCell: each call exports as a one-step native
    node; the module is otherwise the original (see :class:`NativeRecurrence`)."""

    _rnnx_spec: RNNSpec  # set by _rnnx_prepare
    _rnnx_layers: list[dict[str, torch.Tensor]]

    def _rnnx_prepare(self, where: str = "") -> None:
        spec = spec_of_module(self)
        self.__dict__["_rnnx_layers"] = _native_layers(self, spec, where or type(self).__name__, cell_style=True)
        self.__dict__["_rnnx_spec"] = spec

    def forward(self, input: torch.Tensor, hx: Any = None) -> Any:
        spec, arrays = self._rnnx_spec, self._rnnx_layers[0]
        if input.dim() not in (1, 2):
            raise RNNXError(f"{type(self).__name__}: expected a 1-D (unbatched) or 2-D input, found {input.dim()}-D")
        if input.dim() == 1:
            if hx is not None:
                hx = tuple(h.unsqueeze(0) for h in hx) if spec.cell == "lstm" else hx.unsqueeze(0)
            out = self.forward(input.unsqueeze(0), hx)
            return tuple(o.squeeze(0) for o in out) if spec.cell == "lstm" else out.squeeze(0)
        W, R, B = arrays["W"], arrays["R"], arrays.get("B")
        zeros = lambda: input.new_zeros(input.shape[0], spec.hidden_size)  # noqa: E731
        if spec.cell == "lstm":
            h, c = hx if hx is not None else (zeros(), zeros())
            return torch.ops.rnnx.lstm_cell(input, h, c, W, R, B, spec.hidden_size)
        h = hx if hx is not None else zeros()
        if spec.cell == "gru":
            return torch.ops.rnnx.gru_cell(input, h, W, R, B, spec.hidden_size)
        return torch.ops.rnnx.rnn_cell(input, h, W, R, B, spec.hidden_size, spec.cell[4:])


def in_front(mixin: type, cls: type) -> type:
    """``cls`` with ``mixin``'s forward in front (rnnx's stand-in's, the streaming forward); same
    name, so messages and reprs read as before."""
    # Through a typed parameter: mypy does not take a bare ``type(x)`` as the cache's Hashable argument.
    return _in_front(mixin, cls)


@functools.cache
def _in_front(mixin: type, cls: type) -> type:
    return type(cls.__name__, (mixin, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def swappable(module: nn.Module) -> bool:
    """An nn.LSTM / GRU / RNN / *Cell, or a subclass that keeps the original forward."""
    for base in RECURRENT_MODULES + CELL_MODULES:
        if isinstance(module, base) and not isinstance(module, (NativeRecurrence, NativeCell)):
            return type(module).forward is base.forward
    return False


def swap_recurrent_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Give every swappable module inside ``model`` (itself included) rnnx's forward, in place.

    Only the class changes: attributes (the user's own too), parameters, hooks, methods such
    as ``flatten_parameters()`` and ``isinstance`` checks stay what they were.
    """
    swapped: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if swappable(module):
            module.__class__ = in_front(NativeRecurrence if isinstance(module, RECURRENT_MODULES) else NativeCell, type(module))
            module._rnnx_prepare(name or "(the model)")
            swapped.append((name, module))
    return swapped


def module_spec(module: nn.Module) -> RNNSpec:
    """The spec of a swapped module."""
    return module._rnnx_spec
