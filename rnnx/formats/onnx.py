"""``onnx``: ONNX LSTM / GRU / RNN nodes in .onnx files, read node by node and written as
runnable stacks. The tensors' layout is :mod:`rnnx.layouts.onnx`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnx.formats.onnx_build import build_stack_model, save_model
from rnnx.formats.onnx_read import choose_group, load_model, recurrent_groups, to_array
from rnnx.formats.registry import Format, register
from rnnx.layouts.onnx import OP_TYPES, from_native, to_native
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    model = load_model(path)
    groups = recurrent_groups(model)
    if not groups and select is None:
        stack = read_stored_stack(model)
        if stack is not None:
            return stack
    group = choose_group(groups, select, str(path))
    return from_native(group.layer_dicts(), spec)


def read_stored_stack(model: Any) -> RNNWeights | None:
    """A projected stack written by rnnx 0.1.0 before each weight was stored once: beside
    its Scans, initializers keep the per-layer node inputs under l{k}_W, l{k}_R, ..., and
    its metadata the spec. (Files written since are read through their lowered records.)"""
    props = {p.key: p.value for p in model.metadata_props}
    if "rnnx.spec" not in props:
        return None
    spec = RNNSpec.parse(props["rnnx.spec"])
    inits = {i.name: i for i in model.graph.initializer}
    if "l0_W" not in inits:
        return None
    layers = []
    for k in range(spec.num_layers):
        node: dict[str, Any] = {"op_type": OP_TYPES[spec.cell], "direction": spec.direction, "hidden_size": spec.hidden_size}
        for key in ("W", "R", "B", "P", "proj"):
            if f"l{k}_{key}" in inits:
                node[key] = to_array(inits[f"l{k}_{key}"])
        layers.append(node)
    return from_native(layers, spec)


def groups(path: Path) -> list[str]:
    return [g.name for g in recurrent_groups(load_model(path))]


def write(weights: RNNWeights, path: Path) -> None:
    save_model(build_stack_model(weights), path)


register(
    Format(
        name="onnx",
        to_native=to_native,
        from_native=from_native,
        read=read,
        write=write,
        groups=groups,
        extensions=(".onnx",),
        description="W/R/B/P of ONNX LSTM/GRU/RNN nodes; .onnx files are read node by node and written as runnable stacks",
    )
)
