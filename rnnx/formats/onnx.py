"""``onnx``: ONNX LSTM / GRU / RNN nodes in .onnx files, read node by node and written as
runnable stacks. The tensors' layout is :mod:`rnnx.layouts.onnx`."""

from __future__ import annotations

from pathlib import Path

from rnnx.formats.onnx_build import plan_stack_model, save_planned
from rnnx.formats.onnx_read import choose_group, load_model, recurrent_groups
from rnnx.formats.registry import register_module
from rnnx.layouts.onnx import from_native, to_native
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    model = load_model(path, lazy=True)
    group = choose_group(recurrent_groups(model), select, str(path))
    return from_native(group.layer_dicts(), spec)


def groups(path: Path) -> list[str]:
    return [g.name for g in recurrent_groups(load_model(path, lazy=True))]


def write(weights: RNNWeights, path: Path) -> None:
    save_planned(plan_stack_model(weights), path)  # streamed from the canonical arrays


# Files hold every spec (a projection as Scans); the native node dicts refuse what ONNX's nodes
# cannot hold (rnnx.layouts.onnx.refusals), in to_native.
register_module(globals(), name="onnx", to_native=to_native, extensions=(".onnx",),
                description="W/R/B/P of ONNX LSTM/GRU/RNN nodes; .onnx files are read node by node and written as runnable stacks")
