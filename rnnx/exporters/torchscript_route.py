"""The second translation route: torch.onnx's TorchScript exporter, with rnnx's ops kept native.

torch.onnx's dynamo route translates the decomposed ATen graph that torch.export makes;
some ops outside the recurrences have no translation there (``torch.clamp`` with an int and
a float bound: "Cannot find a compatible OpOverload"), while the older TorchScript exporter,
which traces the module and translates each ATen call with its own symbolic functions,
handles them. rnnx's stand-in modules call the same custom ops on both routes; the
symbolics below make each of them the native node that :data:`rnnx.exporters.ops.TRANSLATIONS`
makes on the dynamo route (a projected LSTM becomes the same placeholder that
:func:`rnnx.formats.onnx_scan.lower_projections` lowers), so everything after translation
(naming, fusing, lowering, the self-check) is shared. The dynamic axes are the ones torch
found on the dynamo route, passed as ``dynamic_axes``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.exporters.writing import first_line, quiet
from rnnx.formats.onnx_scan import DOMAIN as LOWER_DOMAIN, LSTM_PROJECTED

ROUTE = "torch.onnx's TorchScript exporter"


def _none(g: Any) -> Any:
    from torch.onnx._internal.torchscript_exporter.symbolic_helper import _optional_input_placeholder_tensor

    return _optional_input_placeholder_tensor(g)


def _opt(g: Any, v: Any) -> Any:
    from torch.onnx._internal.torchscript_exporter.symbolic_helper import _is_none

    return _none(g) if v is None or _is_none(v) else v


def _merge(g: Any, y: Any) -> Any:
    # (seq, dirs, batch, size) -> (seq, batch, dirs*size), as ops._merge does on the dynamo route
    import torch

    t = g.op("Transpose", y, perm_i=[0, 2, 1, 3])
    return g.op("Reshape", t, g.op("Constant", value_t=torch.tensor([0, 0, -1], dtype=torch.int64)))


def _step(g: Any, x: Any) -> Any:
    import torch

    return g.op("Unsqueeze", x, g.op("Constant", value_t=torch.tensor([0], dtype=torch.int64)))


def _unstep(g: Any, y: Any) -> Any:
    import torch

    return g.op("Squeeze", y, g.op("Constant", value_t=torch.tensor([0], dtype=torch.int64)))


def _lstm(g, x, w, r, b, seq_lens, h0, c0, p, proj, hidden_size, direction):
    inputs = [x, w, r] + [_opt(g, v) for v in (b, seq_lens, h0, c0, p)]
    if proj is not None and not _is_none_value(proj):
        return g.op(f"{LOWER_DOMAIN}::{LSTM_PROJECTED}", *inputs, proj, hidden_size_i=hidden_size, direction_s=direction, outputs=3)
    y, y_h, y_c = g.op("LSTM", *inputs, hidden_size_i=hidden_size, direction_s=direction, outputs=3)
    return _merge(g, y), y_h, y_c


def _gru(g, x, w, r, b, seq_lens, h0, hidden_size, direction, linear_before_reset):
    inputs = [x, w, r] + [_opt(g, v) for v in (b, seq_lens, h0)]
    y, y_h = g.op("GRU", *inputs, hidden_size_i=hidden_size, direction_s=direction, linear_before_reset_i=linear_before_reset, outputs=2)
    return _merge(g, y), y_h


def _rnn(g, x, w, r, b, seq_lens, h0, hidden_size, direction, activation):
    inputs = [x, w, r] + [_opt(g, v) for v in (b, seq_lens, h0)]
    acts = [activation.capitalize()] * (2 if direction == "bidirectional" else 1)
    y, y_h = g.op("RNN", *inputs, hidden_size_i=hidden_size, direction_s=direction, activations_s=acts, outputs=2)
    return _merge(g, y), y_h


def _lstm_cell(g, x, h, c, w, r, b, hidden_size):
    _, y_h, y_c = g.op("LSTM", _step(g, x), w, r, _opt(g, b), _none(g), _step(g, h), _step(g, c), hidden_size_i=hidden_size, outputs=3)
    return _unstep(g, y_h), _unstep(g, y_c)


def _gru_cell(g, x, h, w, r, b, hidden_size):
    _, y_h = g.op("GRU", _step(g, x), w, r, _opt(g, b), _none(g), _step(g, h), hidden_size_i=hidden_size, linear_before_reset_i=1, outputs=2)
    return _unstep(g, y_h)


def _rnn_cell(g, x, h, w, r, b, hidden_size, activation):
    _, y_h = g.op("RNN", _step(g, x), w, r, _opt(g, b), _none(g), _step(g, h), hidden_size_i=hidden_size,
                  activations_s=[activation.capitalize()], outputs=2)
    return _unstep(g, y_h)


def _is_none_value(v: Any) -> bool:
    from torch.onnx._internal.torchscript_exporter.symbolic_helper import _is_none

    return _is_none(v)


# op -> (symbolic, how parse_args reads each argument after g: v = a graph value, i = int, s = str)
_SYMBOLICS = {
    "rnnx::lstm": (_lstm, "vvvvvvvvvis"),
    "rnnx::gru": (_gru, "vvvvvvisi"),
    "rnnx::rnn": (_rnn, "vvvvvviss"),
    "rnnx::lstm_cell": (_lstm_cell, "vvvvvvi"),
    "rnnx::gru_cell": (_gru_cell, "vvvvvi"),
    "rnnx::rnn_cell": (_rnn_cell, "vvvvvis"),
}


@functools.cache
def register_symbolics() -> None:
    """Teach the TorchScript exporter rnnx's ops (once per process; 9 covers every opset)."""
    import torch
    from torch.onnx._internal.torchscript_exporter.symbolic_helper import parse_args

    for name, (fn, kinds) in _SYMBOLICS.items():
        torch.onnx.register_custom_op_symbolic(name, parse_args(*kinds)(fn), 9)


@contextlib.contextmanager
def _native_output_to(path: Path) -> Iterator[None]:
    """The exporter's C++ side writes straight to file descriptors 1 and 2 (a custom op's missing
    shape inference, the whole graph when an op has no symbolic); keep that off the user's
    terminal and out of a pipeline's JSON."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)


FLAT_SCOPE = "model"  # the attribute that holds the model in a flat call's wrapper: the first scope of its nodes' names


def flat_call(work: Any, values: Sequence[Any], structure: Any) -> tuple[Any, tuple[Any, ...]]:
    """A module that takes the example's tensors flat, one argument each, and calls ``work``
    with the example's own structure rebuilt around them (namedtuples, dicts, flags): the
    TorchScript exporter hands a namedtuple to forward as a plain tuple (sb3's
    ``lstm_states.pi`` then fails) and reads a trailing dict as keyword arguments."""
    import torch
    from torch.utils._pytree import tree_unflatten

    positions = [k for k, v in enumerate(values) if isinstance(v, torch.Tensor)]
    fixed = list(values)

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            setattr(self, FLAT_SCOPE, work)

        def forward(self, *tensors: Any) -> Any:
            leaves = list(fixed)
            for k, t in zip(positions, tensors):
                leaves[k] = t
            return getattr(self, FLAT_SCOPE)(*tree_unflatten(leaves, structure))

    return Flat(), tuple(values[k] for k in positions)


def unscope(proto: Any) -> None:
    """Node names of a flat call's export without the wrapper's scope (``/model/rnn/LSTM`` ->
    ``/rnn/LSTM``), so that they name the model's own modules."""
    prefix = f"/{FLAT_SCOPE}/"
    for node in proto.graph.node:
        if node.name.startswith(prefix):
            node.name = "/" + node.name[len(prefix):]


def translate(work: Any, args: tuple[Any, ...], names: Sequence[str], dynamic_axes: Mapping[str, Mapping[int, str]], opset: int,
              output_names: Sequence[str] | None = None, failed: str = f"{ROUTE} could not translate the model") -> Any:
    """The ONNX proto of ``work`` (a model with rnnx's stand-ins, or a TorchScript file's) traced
    on ``args``, graph inputs named ``names``; raises RNNXError, ``failed`` and the exporter's
    first line, if it fails."""
    import onnx
    import torch

    from rnnx.exporters.modules import data_writes_traced, packed_sequences_as_lengths

    register_symbolics()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "torchscript.onnx"
        try:
            with quiet(), _native_output_to(Path(tmp) / "stderr.txt"), packed_sequences_as_lengths(), data_writes_traced(), torch.no_grad():
                torch.onnx.export(work, args, str(raw), dynamo=False, opset_version=opset, input_names=list(names),
                                  output_names=list(output_names) if output_names else None, dynamic_axes={n: dict(ax) for n, ax in dynamic_axes.items() if ax})
        except Exception as exc:  # the TorchScript exporter raises many types; the first line says what failed
            raise RNNXError(f"{failed}: {first_line(exc)}") from exc
        return onnx.load(str(raw))
