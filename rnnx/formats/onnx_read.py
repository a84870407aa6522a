"""Find LSTM / GRU / RNN nodes in an ONNX model and group stacked layers.

Rules:
- every LSTM, GRU and RNN node counts, in the main graph and in If / Loop / Scan bodies;
- weights are read from initializers or Constant nodes; weights fed as graph inputs are
  reported as such and cannot be extracted;
- node B follows node A in one stack when B's X comes from A's Y through only
  shape-moving ops (:data:`PASSTHROUGH`), both have the same op, direction and hidden
  size. A stack is named after its first node; any node's own name selects that node.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, overload

import numpy as np

from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.fileio import require_file
from rnnx.formats.onnx_fold import fold, producers
from rnnx.formats.onnx_gate import check_external_data, check_opsets
from rnnx.formats.onnx_lazy import identity, is_lazy, mappable, mark, read_skeleton, stored_tensors, supported, to_array
from rnnx.formats.onnx_quantized import attribute_values, is_quantized, stand_in
from rnnx.layouts.onnx import (
    ACTIVATION_ATTRIBUTES,
    DEFAULT_OPSET,
    GATE_ORDER,
    LOWERED_KEY,
    NATIVE_OPS,
    OP_TYPES,
    PEEPHOLE_ORDER,
    SCAN_GATE_ORDER,
    WEIGHT_INPUTS,
    activation_attributes,
    scan_constant,
)
from rnnx.spec import RNNSpec

PASSTHROUGH = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten", "Dropout", "Cast")

#: ``value_dims(value, unnamed=INVENTED)``: a dynamic dimension the file leaves unnamed is given
#: the label :func:`invented_label` makes, the one rnnx's reports, ``--dim`` and the record use.
INVENTED: Final = "invented"


def invented_label(value: str, axis: int) -> str:
    """The label of axis ``axis`` of the value named ``value`` where the file names none."""
    return f"{value}_dim{axis}"


@overload
def value_dims(value: Any, *, unnamed: Literal["invented"] | int) -> list[int | str]: ...
@overload
def value_dims(value: Any, *, unnamed: None) -> list[int | str | None]: ...
def value_dims(value: Any, *, unnamed: Literal["invented"] | int | None) -> list[int | str] | list[int | str | None]:
    """An ONNX value's dims (a ValueInfoProto: a graph input, output or value_info), one per
    axis: a fixed size as an int, a dynamic one the file names as its name (dim_param), and one
    it leaves unnamed as ``unnamed`` says: :data:`INVENTED` for :func:`invented_label`'s label, else
    the value given (None, 0). As ONNX Runtime reads them: a dim_value of 0 is a size (an empty
    axis), one below 0 is unnamed (tools write -1 for "any size"). [] where the file gives no shape."""
    dims: list[int | str | None] = []
    for axis, dim in enumerate(value.type.tensor_type.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            dims.append(int(dim.dim_value))
        elif dim.dim_param:
            dims.append(dim.dim_param)
        else:
            dims.append(invented_label(value.name, axis) if unnamed == INVENTED else unnamed)
    return dims


def data_files(path: Path) -> list[Path]:
    """The external-data files an ONNX file names (inputs too: no output may replace them)."""
    import onnx
    from onnx import TensorProto

    if os.path.exists(path) and not os.path.isfile(path):
        require_file(Path(path))  # a FIFO or a device: refused in one line, before a read that could block for ever
    try:  # the structure only: a large file's inline weights are not read for this
        skeleton = read_skeleton(path) if supported() else None
        model = skeleton[0] if skeleton is not None else onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001  not a model: its reader refuses it in its own words
        return []
    found = []
    for tensor in stored_tensors(model.graph):
        if tensor.data_location == TensorProto.EXTERNAL and not is_lazy(tensor):  # a lazy one is in the file itself
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if location and "\0" not in location:
                found.append(path.parent / location)
    return sorted(set(found))


def file_bytes(path: Path) -> int:
    """The size of an ONNX file and of the external data it names: what loading it reads."""
    return sum(p.stat().st_size for p in [Path(path), *data_files(Path(path))])


def load_model(path: Path, lazy: bool = False) -> Any:
    """The model at ``path``, its external data checked (see :func:`check_external_data`).

    ``lazy=False``: every tensor in memory, a model to edit and save. ``lazy=True``: a read-only
    skeleton (:mod:`rnnx.formats.onnx_lazy`) whose large tensors, inline or external, stay in
    their files; :func:`to_array` reads them as views of a memory map. Never save a skeleton:
    its tensors point at absolute paths, which onnx and rnnx refuse to load.
    """
    import onnx
    from onnx import external_data_helper

    path = require_file(Path(path))
    found = read_skeleton(path) if lazy and supported() else None
    model, token = found if found is not None else (None, "")
    lazy = model is not None
    if model is None:
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # protobuf's DecodeError and friends: the file is not a model
            raise RNNXError(f"{path}: cannot parse as an ONNX model ({type(exc).__name__}); the file is damaged or not ONNX") from None
    check_external_data(model, path, token)
    check_opsets(model, path)
    try:
        if lazy:
            _map_external_data(model, path, token)
        else:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # noqa: BLE001  OSError, ValueError, onnx's ValidationError: the data is not readable as claimed
        raise RNNXError(f"{path}: cannot read its external data ({one_line(exc, DETAIL_CHARS)})") from None
    return model


def _map_external_data(model: Any, path: Path, token: str) -> None:
    """Point each checked external tensor of a skeleton at its file's absolute path and identity,
    for :func:`to_array` to map; the few data types a map cannot hold are left for onnx to load."""
    from onnx import TensorProto, external_data_helper

    base = path.parent.resolve()
    for tensor in stored_tensors(model.graph):
        if tensor.data_location != TensorProto.EXTERNAL or is_lazy(tensor, token):
            continue
        if not mappable(tensor.data_type):  # packed or string data: loaded as the eager reader does
            external_data_helper.load_external_data_for_tensor(tensor, str(path.parent))
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
            continue
        info = {e.key: e.value for e in tensor.external_data}
        target = (base / info["location"]).resolve()
        status = target.lstat()
        offset = int(info.get("offset", 0))
        length = int(info.get("length", status.st_size - offset))
        mark(tensor, str(target), offset, length, identity(status), token)


@dataclass
class RecurrentNode:
    node: Any
    graph: str
    attributes: dict[str, Any]
    tensors: dict[str, np.ndarray | None]
    sources: dict[str, str]
    lowered: bool = False  # rebuilt from the Scans rnnx lowered it into (see read_lowered)

    @property
    def name(self) -> str:
        return self.node.name

    def as_dict(self) -> dict[str, Any]:
        missing = [k for k in ("W", "R") if self.tensors.get(k) is None]
        if missing:
            raise RNNXError(
                f"node {self.name!r}: {missing[0]} comes from {self.sources.get(missing[0], 'nowhere')}, not from an "
                "initializer or Constant, nor from them by Slice/Concat/Reshape-like operators; rnnx can only extract weights "
                "stored in the model: fold the computation into initializers first (onnx-simplifier, or onnxscript's optimizer)"
            )
        for key in ("B", "P"):
            if self.tensors.get(key) is None and self.sources.get(key) == "graph input":
                raise RNNXError(f"node {self.name!r}: {key} is a graph input; rnnx can only extract weights stored in the model")
        return {"op_type": self.node.op_type, **self.attributes, **{k: v for k, v in self.tensors.items() if v is not None}}


@dataclass
class RecurrentGroup:
    name: str
    nodes: list[RecurrentNode] = field(default_factory=list)

    def layer_dicts(self) -> list[dict[str, Any]]:
        return [n.as_dict() for n in self.nodes]


def _subgraphs(graph: Any, path: str) -> Iterator[tuple[Any, str]]:
    yield graph, path
    for node in graph.node:
        for attr in node.attribute:
            if attr.g is not None and attr.type == attr.GRAPH:
                yield from _subgraphs(attr.g, f"{path}/{node.name or node.op_type}.{attr.name}")
            for i, g in enumerate(attr.graphs):
                yield from _subgraphs(g, f"{path}/{node.name or node.op_type}.{attr.name}[{i}]")


# The ONNX types of LSTM/GRU/RNN attributes (the operator schemas'), checked before use:
# a file may say hidden_size="abc" or give layout as a string.
_ATTRIBUTE_TYPES = {"hidden_size": "INT", "layout": "INT", "linear_before_reset": "INT", "input_forget": "INT", "clip": "FLOAT",
                    "direction": "STRING", "activations": "STRINGS", "activation_alpha": "FLOATS", "activation_beta": "FLOATS"}


def node_attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values, strings decoded (undecodable bytes replaced)."""
    from onnx import AttributeProto

    if node.op_type in NATIVE_OPS:
        for a in node.attribute:
            want = _ATTRIBUTE_TYPES.get(a.name)
            if want is not None and a.type != getattr(AttributeProto, want):
                found = AttributeProto.AttributeType.Name(a.type) if a.type in AttributeProto.AttributeType.values() else str(a.type)
                raise RNNXError(f"{node.op_type} node {node.name!r}: attribute {a.name} must be {want}, found {found}; the file is damaged")
    return attribute_values(node)


def constants(graph: Any, outer: dict[str, tuple[np.ndarray, str]]) -> dict[str, tuple[np.ndarray, str]]:
    from onnx import helper

    known = dict(outer)
    for init in graph.initializer:
        known[init.name] = (to_array(init), "initializer")
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    known[node.output[0]] = (to_array(helper.get_attribute_value(attr)), "Constant")
    return known


def recurrent_nodes(model: Any) -> list[RecurrentNode]:
    """Every recurrent node of the model, subgraphs included, with its stored weights."""

    found = []
    known: dict[str, tuple[np.ndarray, str]] = {}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), DEFAULT_OPSET)
    for graph, path in _subgraphs(model.graph, "main"):
        known = constants(graph, known)
        graph_inputs = {i.name for i in graph.input}
        made_by = producers(graph)
        for node in graph.node:
            if is_quantized(node):  # com.microsoft's DynamicQuantizeLSTM, as the LSTM it stands for (weights dequantized)
                found.append(RecurrentNode(*stand_in(node, path, known, graph_inputs)))
            if node.op_type not in NATIVE_OPS:
                continue
            attrs = node_attributes(node)
            tensors: dict[str, np.ndarray | None] = {}
            sources: dict[str, str] = {}
            for key, index in WEIGHT_INPUTS.items():
                name = node.input[index] if len(node.input) > index else ""
                if not name:
                    continue
                if name in known:
                    tensors[key], sources[key] = known[name]
                elif name not in graph_inputs and (folded := fold(name, graph, made_by, known, opset)) is not None:
                    tensors[key], sources[key] = folded  # torch.onnx's exporter leaves large weights as Slices and Concats
                else:
                    tensors[key] = None
                    sources[key] = "graph input" if name in graph_inputs else "a computed tensor"
            found.append(RecurrentNode(node, path, attrs, tensors, sources))
    found += lowered_nodes(model, constants(model.graph, {}))
    for i, rnode in enumerate(found):
        if not rnode.node.name:
            rnode.node.name = f"{rnode.node.op_type}_{i}"
    return found


def read_lowered(model: Any) -> list[dict[str, Any]]:
    """The records of the recurrences rnnx lowered into Scans in ``model`` (a damaged or
    foreign entry reads as none)."""
    for p in model.metadata_props:
        if p.key == LOWERED_KEY and len(p.value) < (16 << 20):
            try:
                records = json.loads(p.value)
            except (ValueError, RecursionError):
                return []
            return [r for r in records if isinstance(r, dict) and isinstance(r.get("inputs"), dict) and isinstance(r.get("outputs"), dict)] \
                if isinstance(records, list) else []
    return []


def lowered_nodes(model: Any, known: dict[str, tuple[np.ndarray, str]]) -> list[RecurrentNode]:
    """The lowered recurrences of the main graph as the native nodes they were: their weights
    read back from the Scans' constants. The biases come back summed into the input bias
    (the Scan adds them once), except a GRU's recurrent n bias: the same outputs."""
    from onnx import helper

    found = []
    for record in read_lowered(model):
        try:
            spec = RNNSpec.parse(str(record.get("spec")))
        except (RNNXError, ValueError):
            continue
        prefix = str(record.get("prefix") or f"{record.get('node')}__")
        tensors = _lowered_tensors(spec, prefix, known)
        if tensors is None or spec.num_layers != 1:
            continue
        op_type = OP_TYPES[spec.cell]
        outputs = [str(record["outputs"].get(k, "")) for k in ("Y", "Y_h", "Y_c")[: 3 if op_type == "LSTM" else 2]]
        ins = {k: str(v) for k, v in record["inputs"].items()}
        inputs = [ins.get("X", ""), "", "", "", ins.get("seq_lens", ""), ins.get("h0", "")] + ([ins.get("c0", "")] if op_type == "LSTM" else [])
        node = helper.make_node(op_type, inputs, outputs, name=str(record.get("node")))
        attrs: dict[str, Any] = {"direction": spec.direction, "hidden_size": spec.hidden_size}
        if spec.cell == "gru":
            attrs["linear_before_reset"] = int(spec.reset_after)
        attrs.update(activation_attributes(spec))
        found.append(RecurrentNode(node, "main", attrs, tensors, {k: "a lowered Scan's constant" for k in tensors}, lowered=True))
    return found


def _lowered_tensors(spec: RNNSpec, prefix: str, known: dict[str, tuple[np.ndarray, str]]) -> dict[str, np.ndarray | None] | None:
    H, scan, onnx_order = spec.hidden_size, SCAN_GATE_ORDER[spec.cell], GATE_ORDER[spec.cell]

    def get(d: int, name: str) -> np.ndarray:
        return np.asarray(known[scan_constant(prefix, d, name)][0])

    def reorder(stacked: np.ndarray, order: tuple[str, ...]) -> np.ndarray:
        parts = dict(zip(order, np.split(stacked, len(order), axis=0)))
        return np.concatenate([parts[g] for g in onnx_order], axis=0)

    W, R, B, P, proj = [], [], [], [], []
    try:
        for d in range(spec.num_directions):
            W.append(reorder(get(d, "Wt").T, scan))
            if spec.cell == "gru":
                R.append(reorder(np.concatenate([get(d, "Rt_rz").T, get(d, "Rt_n").T]), scan))
                recurrent_bias = {"r": np.zeros(H), "z": np.zeros(H), "n": get(d, "bR_n").astype(np.float64)}
            else:
                R.append(reorder(get(d, "Rt").T, scan))
                recurrent_bias = {g: np.zeros(H) for g in scan}
            hoisted = get(d, "bias")  # every bias but a GRU's recurrent n bias, which the Scan adds itself
            B.append(np.concatenate([reorder(hoisted, scan), np.concatenate([recurrent_bias[g] for g in onnx_order])]).astype(hoisted.dtype))
            if spec.peepholes:
                P.append(np.concatenate([get(d, "P" + g) for g in PEEPHOLE_ORDER]))
            if spec.proj_size:
                proj.append(get(d, "Pt").T)
        stacked = {"W": np.stack(W), "R": np.stack(R)}
        if any(t.shape[:2] != (spec.num_directions, len(spec.gates) * H) for t in stacked.values()):
            raise ValueError("the constants' shapes are not the recorded spec's")
        tensors: dict[str, np.ndarray | None] = dict(stacked)
        if spec.bias:
            tensors["B"] = np.stack(B)
        if P:
            tensors["P"] = np.stack(P)
        if proj:
            tensors["proj"] = np.stack(proj)
    except (KeyError, ValueError):
        # not the Scans rnnx wrote, or a record whose spec does not fit its constants (a split
        # of the wrong size): the record reads as none, as a damaged one does
        return None
    return tensors


def _previous_layer(rnode: RecurrentNode, producers: dict[str, Any], by_output: dict[str, RecurrentNode]) -> RecurrentNode | None:
    name = rnode.node.input[0]
    for _ in range(8):
        if name in by_output:
            return by_output[name]
        producer = producers.get(name)
        if producer is None or producer.op_type not in PASSTHROUGH or not producer.input:
            return None
        name = producer.input[0]
    return None


def _stackable(a: RecurrentNode, b: RecurrentNode) -> bool:
    keys = ("direction", "hidden_size", "linear_before_reset", *ACTIVATION_ATTRIBUTES)
    return a.node.op_type == b.node.op_type and a.graph == b.graph and all(a.attributes.get(k) == b.attributes.get(k) for k in keys)


def recurrent_groups(model: Any) -> list[RecurrentGroup]:
    """Stacks of recurrent nodes, in model order."""
    nodes = recurrent_nodes(model)
    producers = {}
    for graph, _ in _subgraphs(model.graph, "main"):
        for node in graph.node:
            for out in node.output:
                producers[out] = node
    by_output = {n.node.output[0]: n for n in nodes if n.node.output and n.node.output[0]}
    successor: dict[int, RecurrentNode] = {}
    has_previous: set[int] = set()
    for rnode in nodes:
        prev = _previous_layer(rnode, producers, by_output)
        if prev is not None and _stackable(prev, rnode) and id(prev) not in successor:
            successor[id(prev)] = rnode
            has_previous.add(id(rnode))
    groups = []
    for rnode in nodes:
        if id(rnode) in has_previous:
            continue
        group = RecurrentGroup(rnode.name, [rnode])
        while id(group.nodes[-1]) in successor:
            group.nodes.append(successor[id(group.nodes[-1])])
        groups.append(group)
    return groups


def choose_group(groups: list[RecurrentGroup], select: str | None, where: str) -> RecurrentGroup:
    """The stack named ``select`` (or a single node of that name), else the only stack."""
    if not groups:
        raise RNNXError(f"{where}: expected an LSTM, GRU or RNN node, found none; if the recurrence is decomposed (a Loop or Scan over a cell step, "
                        "or unrolled cells), `rnnx fuse` (rnnx.pipelines.fuse.fuse_file) can rewrite it into native nodes first")
    listing = "; ".join(f"{g.name} ({len(g.nodes)} x {g.nodes[0].node.op_type})" for g in groups)
    if select is None:
        if len(groups) > 1:
            raise RNNXError(f"{where}: {len(groups)} recurrent stacks ({listing}); pass select=NAME")
        return groups[0]
    for g in groups:
        if g.name == select:
            return g
    for g in groups:
        for n in g.nodes:
            if n.name == select:
                return RecurrentGroup(n.name, [n])
    raise RNNXError(f"{where}: no recurrent stack or node named {select!r}; found {listing}")
