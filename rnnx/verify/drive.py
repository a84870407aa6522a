"""How to drive an ONNX file of a recurrent stack: which graph input is X, h0, c0 or the
lengths, which output is Y, h_n or c_n, and whether X and Y are batch-major.

Three sources, tried in order, each overridden by the user's ``--input-map NAME=ROLE``:

1. the record ``rnnx export`` writes (``rnnx.recurrences``): the graph inputs and outputs
   each recurrence reaches, and its layout;
2. the graph's wiring: from the stack's first node, each of its inputs is followed back
   through shape-only ops (Transpose, Reshape, Slice, Cast, ...) to a graph input, and each
   output of its nodes forward to a graph output; a Transpose that swaps the first two axes
   on X's way in marks the file batch-major (``rnnx convert --batch-first``, tf2onnx);
3. nothing else: an input no rule reaches is refused by name, with the flag that maps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.formats.onnx_metadata import read_metadata
from rnnx.formats.onnx_read import recurrent_groups
from rnnx.graphs import walk
from rnnx.layouts.onnx import NODE_OUTPUTS, STATE_INPUTS

INPUT_ROLES = ("X", "h0", "c0", "seq_lens")
OUTPUT_ROLES = ("Y", "h_n", "c_n")
# Positions on a native LSTM/GRU/RNN node, by role.
_NODE_OUTPUTS = dict(zip(OUTPUT_ROLES, NODE_OUTPUTS.values()))  # the stack's names for the node's Y, Y_h, Y_c
_EXPORT_ROLES = {"X": "X", "sequence_lens": "seq_lens", "initial_h": "h0", "initial_c": "c0", "Y": "Y", "Y_h": "h_n", "Y_c": "c_n"}
_SHAPE_ONLY = ("Identity", "Cast", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Slice", "Concat", "Split", "Flatten", "Gather")


@dataclass
class Drive:
    inputs: dict[str, str]  # graph input -> role
    outputs: dict[str, str]  # graph output -> role
    batch_first: bool = False
    source: str = "graph wiring"
    dtypes: dict[str, np.dtype] = field(default_factory=dict)  # integer graph inputs' dtypes

    def roles(self) -> set[str]:
        return set(self.inputs.values()) | set(self.outputs.values())

    def feed(self, by_role: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {}
        for name, role in self.inputs.items():
            value = by_role[role]
            if role == "X" and self.batch_first:
                value = np.ascontiguousarray(value.transpose(1, 0, 2))
            if name in self.dtypes:
                value = value.astype(self.dtypes[name])
            feed[name] = value
        return feed

    def results(self, by_name: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, role in self.outputs.items():
            value = by_name[name]
            if role == "Y" and self.batch_first and value.ndim == 3:
                value = value.transpose(1, 0, 2)
            out[role] = value
        return out


class DrivenRunner:
    """A runner of the file's own names, answering in rnnx's roles (time-major)."""

    def __init__(self, runner: Any, drive: Drive) -> None:
        self.runner, self.drive = runner, drive
        self.input_names = sorted(set(drive.inputs.values()))
        self.precision = getattr(runner, "precision", "")
        self.device = getattr(runner, "device", "cpu")

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.drive.results(self.runner(self.drive.feed(inputs)))


def parse_map(items: list[str] | None) -> dict[str, str]:
    """``--input-map NAME=ROLE`` (ROLE one of X, h0, c0, seq_lens, Y, h_n, c_n)."""
    mapping = {}
    for item in items or []:
        name, sep, role = item.rpartition("=")
        if not sep or not name or role not in INPUT_ROLES + OUTPUT_ROLES:
            raise RNNXError(f"input_map: {item!r}: expected NAME=ROLE with ROLE one of {', '.join(INPUT_ROLES + OUTPUT_ROLES)}")
        mapping[name] = role
    return mapping


def reaches_x(model: Any, spec: Any) -> bool:
    """Whether a graph input reaches the recurrence's X (through shape-only ops, or as rnnx
    export recorded): a recurrent stack's file. In a whole model the sequence is computed."""
    _, recurrences = read_metadata(model)
    drive = (_from_record(recurrences, model.graph, spec) if recurrences else None) or _from_wiring(model, model.graph, spec)
    return "X" in drive.inputs.values()


def plan(model: Any, spec: Any, overrides: dict[str, str] | None = None, batch_first: bool | None = None) -> Drive:
    """The drive of ``model`` for a stack of ``spec``; refuses, by name, what it cannot map."""

    graph = model.graph
    inits = {i.name for i in graph.initializer}
    graph_inputs = [i.name for i in graph.input if i.name not in inits]
    graph_outputs = [o.name for o in graph.output]
    _, recurrences = read_metadata(model)
    drive = _from_record(recurrences, graph, spec) if recurrences else None
    drive = drive or _from_wiring(model, graph, spec)
    for name, role in (overrides or {}).items():
        if name not in graph_inputs and name not in graph_outputs:
            raise RNNXError(f"input_map: {name}={role}: the graph has no input or output {name!r}; it has inputs {graph_inputs} and outputs {graph_outputs}")
        target = drive.inputs if role in INPUT_ROLES else drive.outputs
        for other in [k for k, v in target.items() if v == role]:
            del target[other]
        (drive.inputs if name in graph_inputs else drive.outputs)[name] = role
        drive.source += " and --input-map"
    if batch_first is not None:
        drive.batch_first = batch_first
    unmapped = [n for n in graph_inputs if n not in drive.inputs]
    if unmapped:
        raise RNNXError(f"graph input {unmapped[0]!r} could not be mapped to a role of the recurrent stack (X, h0, c0, seq_lens); "
                        f"name it with --input-map {unmapped[0]}=ROLE")
    # An output no role reaches would be dropped unchecked (a head multiplying Y by NaN passed): every output is checked or refused.
    unmapped = [n for n in graph_outputs if n not in drive.outputs]
    if unmapped:
        raise RNNXError(f"graph output {unmapped[0]!r} could not be mapped to a role of the recurrent stack (Y, h_n, c_n), so verify "
                        f"could not check it; name it with --input-map {unmapped[0]}=ROLE, or verify the file as a whole model (--against MODEL.py)")
    shared = [r for r in OUTPUT_ROLES if sum(v == r for v in drive.outputs.values()) > 1]
    if shared:  # results() keeps one value per role: the others would go unchecked
        names = [n for n, r in drive.outputs.items() if r == shared[0]]
        raise RNNXError(f"graph outputs {names} each carry the recurrence's {shared[0]}, and verify checks one output per role; "
                        f"name the one to check with --input-map {names[0]}={shared[0]} and the others with their own roles")
    if "X" not in drive.inputs.values():
        raise RNNXError("no graph input reaches the recurrence's X through shape-only ops: the sequence is computed inside the graph "
                        "(a whole model, not a recurrent stack); name the input with --input-map NAME=X if it is one")
    if "Y" not in drive.outputs.values() and "h_n" not in drive.outputs.values():
        raise RNNXError(f"no graph output carries the recurrence's Y or final state; name one with input_map=NAME=Y (outputs: {graph_outputs})")
    for vi in graph.input:
        if vi.name in drive.inputs and drive.inputs[vi.name] == "seq_lens":
            from onnx import helper

            drive.dtypes[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    return drive


def _from_record(recurrences: list[dict[str, Any]], graph: Any, spec: Any) -> Drive | None:
    """From ``rnnx export``'s record, when it holds one recurrence of this spec fed from graph inputs."""
    chosen = [r for r in recurrences if r.get("spec") == str(spec)] or recurrences
    if len(chosen) != 1 or not isinstance(chosen[0].get("inputs"), dict) or not isinstance(chosen[0].get("outputs"), dict):
        return None
    rec = chosen[0]
    inputs = {name: _EXPORT_ROLES[key] for key, names in rec["inputs"].items() if key in _EXPORT_ROLES and isinstance(names, list) and len(names) == 1
              for name in names}
    outputs = {name: _EXPORT_ROLES[key] for key, names in rec["outputs"].items() if key in _EXPORT_ROLES and isinstance(names, list) and len(names) == 1
               for name in names}
    x = [n for n, r in inputs.items() if r == "X"]
    producers = walk.producers_of(graph)
    if not x or not _shape_only_path(x[0], rec.get("nodes") or [], graph, producers):
        return None  # X is computed inside: a whole model
    return Drive(inputs, outputs, batch_first=rec.get("layout") == "batch_first", source="rnnx export's record")


def _shape_only_path(graph_input: str, node_names: list[str], graph: Any, producers: dict[str, Any]) -> bool:
    first = next((n for n in graph.node if n.name in node_names), None)
    if first is None:
        return False
    found, _ = walk.back(first.input[0], producers, _SHAPE_ONLY)
    return found == graph_input


def _from_wiring(model: Any, graph: Any, spec: Any) -> Drive:
    groups = [g for g in recurrent_groups(model) if all(n.graph == "main" for n in g.nodes)]
    if not groups:
        raise RNNXError("no LSTM, GRU or RNN node in the main graph: nothing for verify to drive (lowered files are checked by the command that lowered them)")
    group = groups[0] if len(groups) == 1 else next((g for g in groups if len(g.nodes) == spec.num_layers), None)
    chained = [rn.node for g in groups for rn in g.nodes]
    # A stack whose layers do not stack as one group (a layer's attributes differ from the others':
    # a wrong file) is still the spec's layers when there are as many: driven whole, so that its
    # outputs are reached and the wrong layer fails, not refused as an output nothing maps.
    nodes = [rn.node for rn in group.nodes] if group is not None else chained if len(chained) == spec.num_layers else [rn.node for rn in groups[0].nodes]
    producers, consumers = walk.producers_of(graph), walk.consumers_of(graph)
    graph_inputs = {i.name for i in graph.input}
    outputs = {o.name for o in graph.output}
    drive = Drive({}, {})
    for role, pos in STATE_INPUTS.items():
        for node in nodes[:1] if role == "X" else nodes:
            if pos < len(node.input) and node.input[pos]:
                source, swaps = walk.back(node.input[pos], producers, _SHAPE_ONLY)
                if source is not None and source in graph_inputs:
                    drive.inputs[source] = role
                    if role == "X":
                        drive.batch_first = swaps % 2 == 1
    for role, pos in _NODE_OUTPUTS.items():
        for node in nodes[-1:] if role == "Y" else nodes:
            if pos < len(node.output) and node.output[pos]:
                for name in walk.forward(node.output[pos], consumers, _SHAPE_ONLY, outputs):
                    drive.outputs.setdefault(name, role)
    return drive
