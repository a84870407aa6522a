"""TorchScript files: torch.onnx's TorchScript exporter, then fuse, record and the same self-check.

A ScriptModule cannot be traced by torch.export or have its modules swapped, so torch
cannot find its dynamic axes. They come from its recurrent submodules instead (a
``torch.jit.script`` file keeps their attributes, a ``torch.jit.trace`` file only their
parameters and the call it recorded: see :func:`recurrence_of`): an input of rank 3 or more
is (seq, batch, ...) or, batch-first, (batch, seq, ...); a state is (layers*directions,
batch, size); a 1-D integer input holds lengths. The TorchScript
exporter emits native LSTM/GRU/RNN nodes for nn modules and refuses projections.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.exporters import call_record, record
from rnnx.exporters.determinism import check_determinism
from rnnx.exporters.example_values import value_summary
from rnnx.exporters.shapes import Leaf, Naming
from rnnx.exporters.torchscript_route import translate
from rnnx.exporters.writing import ExportReport, write_checked
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.shapes.roles import BATCH, LENGTH

SEQ = "seq"


@dataclass(frozen=True)
class Recurrence:
    """What the axes need of one recurrent submodule of a TorchScript model."""

    batch_first: bool
    num_layers: int
    bidirectional: bool
    hidden_size: int
    proj_size: int = 0


_ATEN_OPS = ("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu")


def recurrence_of(module: Any) -> Recurrence:
    """A scripted module keeps nn.LSTM's attributes (``batch_first``, ``num_layers``, ...); a
    traced one keeps only its parameters and the graph it recorded. Its layers and directions
    are read from the parameters' names (``weight_ih_l1``, ``..._reverse``), its sizes from their
    shapes (``weight_hh_l0`` is (gates*hidden, hidden or proj), ``weight_hr_l0`` (proj,
    hidden)), and ``batch_first`` from the ``aten::lstm`` / ``gru`` / ``rnn_*`` call it recorded."""
    if all(hasattr(module, a) for a in ("batch_first", "num_layers", "bidirectional", "hidden_size")):
        return Recurrence(bool(module.batch_first), int(module.num_layers), bool(module.bidirectional), int(module.hidden_size),
                          int(getattr(module, "proj_size", 0) or 0))
    params = {name: tuple(p.shape) for name, p in module.named_parameters(recurse=False)}
    layers = sum(1 for name in params if re.fullmatch(r"weight_ih_l\d+", name))
    if not layers or "weight_hh_l0" not in params:
        raise RNNXError(f"a TorchScript {getattr(module, 'original_name', 'module')} without weight_ih_l0/weight_hh_l0 parameters: "
                        "rnnx cannot tell its layers and sizes; export the model's Python code (file.py:NAME) instead")
    proj = params.get("weight_hr_l0")
    hidden = proj[1] if proj else params["weight_hh_l0"][1]
    return Recurrence(_recorded_batch_first(module), layers, "weight_ih_l0_reverse" in params, int(hidden), int(proj[0]) if proj else 0)


def _recorded_batch_first(module: Any) -> bool:
    """``batch_first`` as the traced module's recurrent call recorded it (False if it recorded
    none, or only the packed-sequence form, which has no batch_first)."""
    try:
        nodes = list(module.graph.nodes())
    except (AttributeError, RuntimeError):  # a module without a forward of its own
        return False
    for node in nodes:
        if node.kind() in _ATEN_OPS:
            try:
                value = node.namedInput("batch_first").toIValue()
            except RuntimeError:  # the packed-sequence overload: (data, batch_sizes, ...), no batch_first
                continue
            if value is not None:
                return bool(value)
    return False


def _axes(example: Sequence[Any], modules: Sequence[Any]) -> list[dict[int, str]]:
    import torch

    recurrences = [recurrence_of(m) for m in modules]
    batch_first = bool(recurrences and recurrences[0].batch_first)
    state_leads = {r.num_layers * (2 if r.bidirectional else 1) for r in recurrences}
    state_sizes = {r.hidden_size for r in recurrences} | {r.proj_size for r in recurrences}
    axes: list[dict[int, str]] = []
    for i, x in enumerate(example):
        if not isinstance(x, torch.Tensor):
            axes.append({})
        elif x.dim() == 3 and i > 0 and x.shape[0] in state_leads and x.shape[2] in state_sizes:
            axes.append({1: "batch"})
        elif x.dim() >= 2:
            axes.append({0: "batch", 1: SEQ} if batch_first else {0: SEQ, 1: "batch"})
        elif x.dim() == 1 and not x.is_floating_point():
            axes.append({0: "batch"})
        else:
            axes.append({})
    return axes


def export_scripted(model: Any, args: tuple[Any, ...], path: Path, *, opset: int, input_names: Sequence[str] | None,
                    output_names: Sequence[str] | None, check: bool, seed: int, tolerances: Any = None,
                    nondeterministic_atol: float | None = None) -> Any:
    import onnx
    import torch
    from torch.utils._pytree import tree_flatten


    example, structure = tree_flatten(args)
    modules = [m for m in model.modules() if getattr(m, "original_name", "") in ("LSTM", "GRU", "RNN")]
    axes = _axes(example, modules)
    tensors = [x for x in example if isinstance(x, torch.Tensor)]
    names = list(input_names) if input_names else [f"input_{i}" for i in range(len(tensors))]
    if len(names) != len(tensors):
        raise RNNXError(f"input names: expected one per tensor input ({len(tensors)}), found {len(names)}")
    tensor_axes = [ax for x, ax in zip(example, axes) if isinstance(x, torch.Tensor)]
    proto = translate(model.eval(), args, names, dict(zip(names, tensor_axes)), opset, output_names, "torch.onnx could not export the TorchScript model")
    if not output_names:
        record.rename_values(proto, {o.name: f"output_{i}" for i, o in enumerate(proto.graph.output)})
    cells, chains = fuse_cells(proto), fuse_steps(proto)
    onnx.checker.check_model(proto)
    tensor_names = iter(names)
    leaves = [Leaf(i, next(tensor_names) if isinstance(x, torch.Tensor) else f"arg_{i}", x) for i, x in enumerate(example)]
    dims = {name: [ax.get(d, int(x.shape[d])) for d in range(x.dim())] for name, x, ax in zip(names, tensors, tensor_axes)}
    roles = {label: BATCH if label == "batch" else LENGTH for ax in tensor_axes for label in ax.values()}
    lengths = {name: SEQ for name, x, ax in zip(names, tensors, tensor_axes) if x.dim() == 1 and not x.is_floating_point() and SEQ in roles}
    naming = Naming({}, roles, dims, lengths)
    record.write_metadata(proto, naming, [], {name: list(x.shape) for name, x in zip(names, tensors)}, call=call_record.call_of_module(model, args, names),
                          values={name: value_summary(x.detach().float().cpu().numpy() if x.is_floating_point() else x.detach().cpu().numpy())
                                  for name, x in zip(names, tensors)})
    op_types = collections.Counter(n.op_type for n in proto.graph.node)
    native = {k: v for k, v in op_types.items() if k in NATIVE_OPS}
    report = ExportReport(
        path=str(path), opset=opset, op_types=dict(op_types), axes=naming.axes(),
        recurrences=[{"module": "(TorchScript)", "spec": "-", "onnx": ", ".join(f"{v} x {k}" for k, v in native.items()) or "none"}],
        fused=[chain.to_json() for chain in chains.rewritten], tracing="by torch.onnx's TorchScript exporter; sequence and batch axes placed from the recurrent submodules",
    )
    report.notes.append("a TorchScript file is exported by torch.onnx's TorchScript exporter: rnnx cannot swap its modules")
    if cells:
        report.notes.append(f"{len(cells.rewritten)} decomposed cell(s) made native, {len(chains.rewritten)} chain(s) fused")
    varying = check_determinism(model, leaves, structure, nondeterministic_atol, output_names) if check else None
    write_checked(proto, path, report, model, leaves, structure, naming, check, seed, tolerances, varying=varying)
    return report

