"""How ``rnnx verify --against code.py:NAME`` calls the torch model on the feed it gives ONNX Runtime.

In order:

1. the file's ``rnnx.call`` record (:mod:`rnnx.exporters.record`): the example's structure as
   it was exported (a state tuple ``(h, c)``, a None, an int flag, ``*tensors``), each tensor
   leaf fed from the graph input it became and every other leaf given its recorded value
   (one the file could not hold is taken from the model's own ``example_inputs``). First the
   model's forward must bind the recorded call as the exported one did: a forward that
   refuses it, or binds an argument to another parameter, is refused in one line naming
   what differs;
2. the model's own ``example_inputs`` (defined in its file): its structure, its tensors
   replaced by the feed in graph input order;
3. neither: one tensor per graph input, in order (files from other exporters).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.exporters.call_record import CallRecord, bound_names, build_call, describe_call, read_call
from rnnx.exporters.selfcheck import run_eager
from rnnx.exporters.user_code import tensors

RECORD, EXAMPLE, FLAT = "the file's call record", "the model's example_inputs", "one tensor per graph input"


@dataclass
class Call:
    """How to call the torch model: ``args(feed, dtype)`` gives its positional arguments."""

    args: Callable[[dict[str, np.ndarray], Any], tuple[Any, ...]]
    example_arrays: dict[str, np.ndarray]  # the example's tensors by graph input name (id ranges, sizes)
    source: str
    notes: list[str] = field(default_factory=list)
    shown: str = ""  # the call, for the report: ``forward(input, (hidden_0, hidden_1))``


def plan_call(proto: Any, model: Any, example: Any, names: list[str], label: str) -> Call:
    """The call of ``model`` (its ``example`` inputs or None) for the file ``proto`` whose
    graph inputs are ``names``; ``label`` names the model in messages."""
    record, why = read_call(proto)
    notes = [f"{why}: the torch model is called as files without one are"] if why else []
    if record is not None:
        fed = record.tensors()
        if sorted(fed) == sorted(names) and len(set(fed)) == len(fed):
            call = _recorded(record, model, example, label)
            call.notes = notes + call.notes
            return call
        notes.append(f"its call record feeds graph inputs {fed}, the file has {names}: the record is not this file's, "
                     "and the torch model is called as files without one are")
    call = _unrecorded(example, names)
    call.notes = notes
    return call


def torch_outputs(model: Any, call: Call, feed: dict[str, np.ndarray], dtype: Any = None) -> list[np.ndarray]:
    """The torch model on ``feed`` (floating tensors as ``dtype`` where given), its tensor outputs flattened."""
    from torch.utils._pytree import tree_flatten

    values, structure = tree_flatten(call.args(feed, dtype))
    return [t.detach().cpu().numpy() for t in tensors(run_eager(model, values, structure))]


def check_binding(model: Any, record: CallRecord, label: str) -> None:
    """Refuse, in one line, a model whose forward does not bind the recorded call as the
    exported model's did: too many or too few arguments, or one bound to another parameter."""
    import torch

    if record.parameters is None or isinstance(model, torch.jit.ScriptModule):
        return  # no names recorded, or a TorchScript forward whose signature Python cannot read reliably
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return
    if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        return  # forward(*args, **kwargs): a wrapper whose signature says nothing
    exported = f"forward({describe_call(record)})"
    try:
        sig.bind(*record.args)
        here = bound_names(model, len(record.args)) or []
    except TypeError as exc:
        raise RNNXError(f"{label}: the file was exported from the call {exported}, which this model's forward{sig} does not take ({exc}); "
                        "is this the model the file was exported from?") from None
    differ = [f"argument {k + 1} binds to {b!r}, in the file to {a!r}" for k, (a, b) in enumerate(zip(record.parameters, here)) if a != b]
    if differ:
        raise RNNXError(f"{label}: its forward{sig} binds the file's recorded call {exported} differently: {'; '.join(differ)}; "
                        "is this the model the file was exported from?")


def _recorded(record: CallRecord, model: Any, example: Any, label: str) -> Call:
    import torch

    check_binding(model, record, label)
    given = tuple(example) if isinstance(example, (tuple, list)) else (example,) if example is not None else None
    arrays: dict[str, np.ndarray] = {}

    def from_example(path: tuple[Any, ...], kind: str) -> Any:
        value = _at(given, path)
        if value is _MISSING:
            where = "".join(f"[{k!r}]" for k in path[1:])
            raise RNNXError(f"argument {path[0] + 1}{where} of the call the file records is a {kind}, which the file cannot hold; "
                            f"define example_inputs in {label.rpartition(':')[0] or label} to give it")
        return value

    # the example's tensors where the record has a tensor leaf: token id ranges and sizes for the feed
    if given is not None:
        for path, leaf in record.leaves():
            value = _at(given, path)
            if "tensor" in leaf and isinstance(value, torch.Tensor):
                arrays[leaf["tensor"]] = value.detach().cpu().numpy()
    unrecorded = {path: from_example(path, leaf["unrecorded"]) for path, leaf in record.leaves() if "unrecorded" in leaf}

    def args(feed: dict[str, np.ndarray], dtype: Any) -> tuple[Any, ...]:
        def tensor(name: str) -> Any:
            return _cast(torch.from_numpy(np.ascontiguousarray(feed[name])), dtype)

        return build_call(record, tensor, lambda path, kind: _cast(unrecorded[path], dtype))

    return Call(args, arrays, RECORD, shown=f"forward({describe_call(record)}), as {RECORD} says"
                + (f" (binding {', '.join(record.parameters)})" if record.parameters else ""))


def _unrecorded(example: Any, names: list[str]) -> Call:
    """The call without a record: the example's structure where the model has one, else flat."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    if example is None:
        _, structure = tree_flatten(tuple(range(len(names))))
        extras: list[Any] = [None] * len(names)
        arrays: dict[str, np.ndarray] = {}
        source = FLAT
    else:
        leaves, structure = tree_flatten(tuple(example) if isinstance(example, (tuple, list)) else (example,))
        tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
        if len(tensors) != len(names):
            raise RNNXError(f"the model's example inputs hold {len(tensors)} tensors, but the ONNX file takes {len(names)} inputs ({', '.join(names)}); "
                            "is this the model the file was exported from?")
        extras = [None if isinstance(v, torch.Tensor) else v for v in leaves]
        arrays = {n: t.detach().cpu().numpy() for n, t in zip(names, tensors)}
        source = EXAMPLE

    def args(feed: dict[str, np.ndarray], dtype: Any) -> tuple[Any, ...]:
        tensors = iter(torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names)
        values = [_cast(next(tensors) if extra is None else extra, dtype) for extra in extras]
        return tuple(tree_unflatten(values, structure))

    return Call(args, arrays, source, shown=f"{source}" + (" (the file has no call record)" if source == FLAT else ""))


def _cast(value: Any, dtype: Any) -> Any:
    import torch

    if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    return value


_MISSING = object()


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    """``value[path[0]][path[1]]...``, or _MISSING where the example has nothing there."""
    if value is None:
        return _MISSING
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return value
