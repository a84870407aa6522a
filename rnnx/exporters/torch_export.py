"""``rnnx.export``: a PyTorch model to ONNX with native recurrent nodes, checked.

The route: copy the model, put it in eval mode, swap each nn.LSTM / GRU / RNN for a
:class:`~rnnx.exporters.modules.NativeRecurrence` (one custom op per layer), let
torch.onnx's default (dynamo) exporter do the rest of the model with rnnx's translations,
lower what ONNX has no node for (projections), then check: onnx.checker, shape
inference, and ONNX Runtime against the original module on fresh seeded inputs at a
sequence length and a batch size different from the example's.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import parity
from rnnx.errors import RNNXError

DEFAULT_OPSET = 17
# torch.onnx builds at 18 or later; rnnx converts down itself with onnx's converter, since
# torch.onnx's own down-conversion fails in a process that ran its TorchScript exporter before.
TORCH_ONNX_MIN_OPSET = 18
SEQ, BATCH = "seq", "batch"


@dataclass
class ExportReport:
    path: str
    opset: int
    op_types: dict[str, int]
    recurrences: list[dict[str, Any]]
    lowered: list[str] = field(default_factory=list)
    unrolled_cells: list[str] = field(default_factory=list)
    fused: list[dict[str, Any]] = field(default_factory=list)
    external_data: bool = False
    check: parity.ParityReport | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.check is None or bool(self.check)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "opset": self.opset,
            "op_types": self.op_types,
            "recurrences": self.recurrences,
            "lowered": self.lowered,
            "unrolled_cells": self.unrolled_cells,
            "fused": self.fused,
            "external_data": self.external_data,
            "check": None if self.check is None else {"passed": bool(self.check), "rows": self.check.to_json()},
            "notes": self.notes,
        }

    def __str__(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_types.items()))
        lines = [f"wrote {self.path} (opset {self.opset}{', external data' if self.external_data else ''})", f"nodes: {ops}"]
        for r in self.recurrences:
            lines.append(f"  {r['module']}: {r['spec']} -> {r['onnx']}")
        lines += [f"note: {n}" for n in self.notes]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


class _Root:
    """Wraps a bare recurrent module so that swapping has a parent to write into."""

    @staticmethod
    def wrap(module: Any) -> Any:
        from torch import nn

        class Root(nn.Module):
            def __init__(self, inner: nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input: Any, hx: Any = None) -> Any:
                return self.inner(input, hx)

        return Root(module)


def _as_tuple(example_inputs: Any) -> tuple[Any, ...]:
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def infer_dynamic_axes(example: Sequence[Any], modules: Sequence[Any], has_cells: bool = False) -> list[dict[int, str]]:
    """Which dims of each input are the sequence and the batch, from the recurrent modules."""
    import torch

    batch_first = bool(modules and modules[0].batch_first)
    state_leads = {m.num_layers * (2 if m.bidirectional else 1) for m in modules}
    state_sizes = {m.hidden_size for m in modules} | {getattr(m, "proj_size", 0) for m in modules}
    axes: list[dict[int, str]] = []
    for i, x in enumerate(example):
        if not isinstance(x, torch.Tensor):
            axes.append({})
        elif x.dim() == 3 and i > 0 and x.shape[0] in state_leads and x.shape[2] in state_sizes:
            axes.append({1: BATCH})
        elif x.dim() == 2 and i > 0 and has_cells and x.is_floating_point():  # a cell's (batch, hidden) state
            axes.append({0: BATCH})
        elif x.dim() >= 2:
            axes.append({0: BATCH, 1: SEQ} if batch_first else {0: SEQ, 1: BATCH})
        elif x.dim() == 1 and not x.is_floating_point():
            axes.append({0: BATCH})
        else:
            axes.append({})
    return axes


def _fresh_inputs(example: Sequence[Any], axes: Sequence[dict[int, str]], sizes: dict[str, int], seed: int) -> tuple[Any, ...]:
    import torch

    rng = np.random.default_rng(seed)
    out = []
    for x, ax in zip(example, axes):
        if not isinstance(x, torch.Tensor):
            out.append(x)
            continue
        shape = [sizes[ax[d]] if d in ax else s for d, s in enumerate(x.shape)]
        if x.is_floating_point():
            out.append(torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(x.dtype))
        elif x.dim() == 1 and ax.get(0) == BATCH:  # sequence lengths: sorted, the longest fills T
            lens = np.sort(rng.integers(1, sizes[SEQ] + 1, size=shape[0]))[::-1].copy()
            lens[0] = sizes[SEQ]
            out.append(torch.from_numpy(lens).to(x.dtype))
        elif x.dtype == torch.bool:
            out.append(torch.from_numpy(rng.random(shape) < 0.5))
        else:
            high = int(x.max().item()) + 1 if x.numel() else 2
            out.append(torch.from_numpy(rng.integers(0, max(high, 1), size=shape)).to(x.dtype))
    return tuple(out)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.onnx prints progress and warnings of its own; keep stdout clean for --json."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript", "torch._dynamo", "torch.fx")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip() and not line.startswith(("Failed to", "-", "#")):
            return line.strip()[:300]
    return type(exc).__name__


def export(
    model: Any,
    example_inputs: Any,
    path: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    dynamic_axes: Sequence[dict[int, str]] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    check: bool = True,
    seed: int = 0,
) -> ExportReport:
    """Export ``model`` to ``path`` with native LSTM/GRU/RNN nodes and check it."""
    import onnx

    try:
        import onnxscript  # noqa: F401  torch.onnx's exporter and rnnx's translations are written in it
        import torch
    except ImportError as exc:
        raise RNNXError(f"rnnx export needs {exc.name}, which is not installed: pip install 'rnnx[torch]'") from None

    from rnnx.exporters import ops
    from rnnx.exporters.modules import CELL_MODULES, RECURRENT_MODULES, NativeCell, packed_sequences_as_lengths, swap_recurrent_modules
    from rnnx.graphs.build import save_model
    from rnnx.graphs.fuse_steps import fuse_steps
    from rnnx.graphs.legalize import drop_opset18_split_attribute
    from rnnx.graphs.lower import lower_projections

    from torch.utils._pytree import tree_flatten, tree_unflatten

    path = Path(path)
    args = _as_tuple(example_inputs)
    example, structure = tree_flatten(args)  # (x, (h0, c0)) -> [x, h0, c0]
    if isinstance(model, torch.jit.ScriptModule):
        return _export_scripted(model, args, path, opset=opset, dynamic_axes=dynamic_axes, output_names=output_names, check=check, seed=seed)
    work = copy.deepcopy(model).eval()
    if type(work) in RECURRENT_MODULES or type(work) in CELL_MODULES:
        work = _Root.wrap(work)
    originals = [m for m in model.modules() if type(m) in RECURRENT_MODULES]
    swapped = swap_recurrent_modules(work)
    has_cells = any(type(m) in CELL_MODULES for m in model.modules())
    axes = list(dynamic_axes) if dynamic_axes is not None else infer_dynamic_axes(example, originals, has_cells)
    if len(axes) != len(example):
        raise RNNXError(f"dynamic axes: expected one entry per input ({len(example)}), found {len(axes)}")
    dims = {SEQ: torch.export.Dim(SEQ), BATCH: torch.export.Dim(BATCH)}
    for i, (x, ax) in enumerate(zip(example, axes)):
        for d, role in ax.items():
            if role not in dims:
                raise RNNXError(f"dynamic axes of input {i}: expected 'seq' or 'batch', found {role!r}")
            if isinstance(x, torch.Tensor) and x.shape[d] < 2:
                raise RNNXError(
                    f"input {i}: its {role} axis (dim {d}) is {x.shape[d]} in the example; torch.export fixes size-1 axes, "
                    "so give an example with 2 or more"
                )
    stepped = [name for name, m in swapped if isinstance(m, NativeCell)]
    # A Python loop over time cannot be traced with a symbolic length: trace it at the
    # example's length, and let fuse_steps make the sequence axis dynamic again.
    traced_axes = [{d: r for d, r in ax.items() if not (stepped and r == SEQ)} for ax in axes]
    dynamic_shapes = tree_unflatten([{d: dims[role] for d, role in ax.items()} or None for ax in traced_axes], structure)
    try:
        with _quiet(), packed_sequences_as_lengths():
            program = torch.onnx.export(
                work, args, dynamic_shapes=tuple(dynamic_shapes), custom_translation_table=ops.TRANSLATIONS,
                opset_version=max(opset, TORCH_ONNX_MIN_OPSET), input_names=list(input_names) if input_names else None,
                output_names=list(output_names) if output_names else None, verbose=False,
            )
    except Exception as exc:  # torch.export / torch.onnx raise many types; the first line tells what failed
        raise RNNXError(f"torch.onnx could not export the model: {_first_line(exc)}; run with --debug for the full trace") from exc
    proto = program.model_proto
    if opset < TORCH_ONNX_MIN_OPSET:
        proto = _convert_down(proto, opset)
    if not output_names:
        bare = type(model) in RECURRENT_MODULES
        defaults = ["Y", "h_n", "c_n"] if bare else [f"output_{i}" for i in range(len(proto.graph.output))]
        rename_outputs(proto, defaults[: len(proto.graph.output)])
    lowered = lower_projections(proto)
    fused = fuse_steps(proto) if stepped else None
    drop_opset18_split_attribute(proto)
    proto.ir_version = min(proto.ir_version, onnx.helper.find_min_ir_version_for(list(proto.opset_import)))
    onnx.checker.check_model(proto)
    proto = onnx.shape_inference.infer_shapes(proto)
    external = save_model(proto, path)
    op_types = collections.Counter(n.op_type for n in proto.graph.node)
    report = ExportReport(
        path=str(path),
        opset=next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
        op_types=dict(op_types),
        recurrences=[
            {"module": name, "spec": str(native.spec), "onnx": _onnx_form(native)}
            for name, native in swapped
        ],
        lowered=lowered.lowered,
        external_data=external,
        fused=[] if fused is None else fused.fused,
    )
    has_seq = any(role == SEQ for ax in axes for role in ax.values())  # a cell called once has no sequence axis
    seq_dynamic = not stepped or not has_seq or (fused is not None and bool(fused.fused) and all(f.get("dynamic_seq") for f in fused.fused))
    if stepped and not seq_dynamic:
        report.unrolled_cells = stepped
        reasons = "; ".join(f"{r['node']}: {r['reason']}" for r in (fused.left_alone if fused is not None else []))
        report.notes.append(f"cells stepped in Python stay one node per step, at the example's length only ({reasons or 'no chain found'})")
    for f in report.fused:
        report.notes.append(f"{f['steps']} steps of a stepped cell fused into one {f['op']} node over {f['source']}" + (", sequence length dynamic" if f.get("dynamic_seq") else ""))
    if lowered:
        report.notes.append(f"ONNX has no LSTM projection: {len(lowered.lowered)} layer(s) lowered to Scans with the input product hoisted")
    if check:
        fixed_seq = None if seq_dynamic else max((int(x.shape[d]) for x, ax in zip(example, axes) for d, r in ax.items() if r == SEQ), default=None)
        report.check = check_export(model, example, structure, axes if seq_dynamic else traced_axes, path, seed=seed, fixed_seq=fixed_seq)
    return report


class _ScriptedRecurrence:
    """What infer_dynamic_axes needs to know of a recurrent submodule of a TorchScript model."""

    def __init__(self, module: Any) -> None:
        self.batch_first = bool(module.batch_first)
        self.num_layers, self.bidirectional = int(module.num_layers), bool(module.bidirectional)
        self.hidden_size, self.proj_size = int(module.hidden_size), int(getattr(module, "proj_size", 0))


def _export_scripted(
    model: Any, args: tuple[Any, ...], path: Path, *, opset: int, dynamic_axes: Sequence[dict[int, str]] | None,
    output_names: Sequence[str] | None, check: bool, seed: int,
) -> ExportReport:
    """A TorchScript model cannot be re-traced or have its modules swapped: torch.onnx's
    TorchScript exporter writes it (it emits native LSTM/GRU/RNN nodes for nn modules and
    refuses projections), then rnnx fuses what it can and checks the result."""
    import tempfile

    import onnx
    import torch
    from torch.utils._pytree import tree_flatten

    from rnnx.graphs.build import save_model
    from rnnx.graphs.fuse_cells import fuse_cells
    from rnnx.graphs.fuse_steps import fuse_steps

    example, structure = tree_flatten(args)
    modules = [_ScriptedRecurrence(m) for m in model.modules() if getattr(m, "original_name", "") in ("LSTM", "GRU", "RNN")]
    axes = list(dynamic_axes) if dynamic_axes is not None else infer_dynamic_axes(example, modules)
    names = [f"input_{i}" for i in range(len(example))]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "scripted.onnx"
        try:
            with _quiet():
                torch.onnx.export(model.eval(), args, str(raw), dynamo=False, opset_version=opset, input_names=names,
                                  output_names=list(output_names) if output_names else None,
                                  dynamic_axes={n: {d: role for d, role in ax.items()} for n, ax in zip(names, axes) if ax})
        except Exception as exc:  # the TorchScript exporter raises many types; the first line says what failed
            raise RNNXError(f"torch.onnx could not export the TorchScript model: {_first_line(exc)}") from exc
        proto = onnx.load(str(raw))
    if not output_names:
        rename_outputs(proto, [f"output_{i}" for i in range(len(proto.graph.output))])
    cells, chains = fuse_cells(proto), fuse_steps(proto)
    onnx.checker.check_model(proto)
    external = save_model(proto, path)
    op_types = collections.Counter(n.op_type for n in proto.graph.node)
    native = {k: v for k, v in op_types.items() if k in ("LSTM", "GRU", "RNN")}
    report = ExportReport(
        path=str(path), opset=opset, op_types=dict(op_types),
        recurrences=[{"module": "(TorchScript)", "spec": "-", "onnx": ", ".join(f"{v} x {k}" for k, v in native.items()) or "none"}],
        external_data=external, fused=chains.fused,
    )
    report.notes.append("a TorchScript file is exported by torch.onnx's TorchScript exporter: rnnx cannot swap its modules")
    if cells:
        report.notes.append(f"{len(cells.fused)} decomposed cell(s) made native, {len(chains.fused)} chain(s) fused")
    if check:
        report.check = check_export(model, example, structure, axes, path, seed=seed)
    return report


def _convert_down(proto: Any, opset: int) -> Any:
    import onnx

    try:
        converted = onnx.version_converter.convert_version(proto, opset)
    except Exception as exc:  # onnx's converter raises RuntimeError/ConvertError for ops it cannot map
        raise RNNXError(f"the exported model cannot be converted to opset {opset} ({str(exc).splitlines()[0][:200]}); try --opset 18") from None
    return converted  # Split's opset-18 attribute survives; drop_opset18_split_attribute removes it


def rename_outputs(proto: Any, names: Sequence[str]) -> None:
    """Give the graph's outputs readable names (torch.onnx calls them after the last op)."""
    mapping = {o.name: new for o, new in zip(proto.graph.output, names) if o.name != new}
    if not mapping:
        return
    for node in proto.graph.node:
        for i, name in enumerate(node.output):
            if name in mapping:
                node.output[i] = mapping[name]
        for i, name in enumerate(node.input):
            if name in mapping:
                node.input[i] = mapping[name]
    for vi in list(proto.graph.output) + list(proto.graph.value_info):
        if vi.name in mapping:
            vi.name = mapping[vi.name]


def _onnx_form(native: Any) -> str:
    from rnnx.exporters.modules import NativeCell

    if isinstance(native, NativeCell):
        return f"one {ops_name(native.spec)} step per call"
    return "Scan (projection lowered)" if native.spec.proj_size else f"{native.spec.num_layers} x {ops_name(native.spec)}"


def ops_name(spec: Any) -> str:
    return {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}[spec.cell]


def check_export(
    model: Any, example: Sequence[Any], structure: Any, axes: Sequence[dict[int, str]], path: Path, seed: int = 0, fixed_seq: int | None = None
) -> parity.ParityReport:
    """ONNX Runtime against the original module at two shapes unlike the example's
    (the batch only, with ``fixed_seq``, when the graph keeps the example's length)."""
    from rnnx.engines.onnxruntime import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(path)
    base = {SEQ: 0, BATCH: 0}
    for x, ax in zip(example, axes):
        for d, role in ax.items():
            base[role] = max(base[role], int(x.shape[d]))
    report = parity.ParityReport()
    was_training = model.training
    model.eval()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            _compare_at_new_shapes(model, example, structure, axes, runner, base, seed, report, fixed_seq)
    finally:
        model.train(was_training)
    return report


def _compare_at_new_shapes(
    model: Any, example: Sequence[Any], structure: Any, axes: Sequence[dict[int, str]], runner: Any, base: dict[str, int], seed: int,
    report: parity.ParityReport, fixed_seq: int | None = None,
) -> None:
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    for k, (dt, db) in enumerate(((6, 4), (17, 1))):
        sizes = {SEQ: fixed_seq if fixed_seq is not None else base[SEQ] + dt, BATCH: max(base[BATCH], 1) + db}
        inputs = _fresh_inputs(example, axes, sizes, seed + k)
        with torch.no_grad():
            want, _ = tree_flatten(model(*tree_unflatten(list(inputs), structure)))
        feed = {name: x.numpy() for name, x in zip(runner.input_names, [i for i in inputs if isinstance(i, torch.Tensor)])}
        got = runner(feed)
        want_arrays = {name: w.detach().numpy().astype(np.float64) for name, w in zip(runner.output_names, want)}
        report.rows += parity.compare("onnxruntime", got, want_arrays, sizes[SEQ], sizes[BATCH])
