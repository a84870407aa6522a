"""Build a standalone, runnable ONNX model of a recurrent stack from canonical weights.

One native node per layer (layout 0); an LSTM with a projection, which no ONNX node
holds, becomes Scans (see :mod:`rnnx.graphs.lower`). Inputs: ``X`` (seq, batch, input), ``h0`` and, for
LSTMs, ``c0`` (layers*directions, batch, size), and optionally ``seq_lens`` (batch,).
Outputs: ``Y`` (seq, batch, directions*size), ``h_n`` and ``c_n``, the same as PyTorch
and :mod:`rnnx.reference`. Batch and sequence axes are dynamic; no shape is baked in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, library_write
from rnnx.formats.onnx_lazy import stored_tensors
from rnnx.formats.onnx_metadata import set_metadata
from rnnx.formats.onnx_prune import prune
from rnnx.formats.onnx_scan import lower_layer, record_lowered
from rnnx.formats.onnx_stream import PlannedModel, check_planned, materialise, planned_tensor, write_planned
from rnnx.layouts.onnx import DEFAULT_OPSET, MIN_OPSET, OP_TYPES, activation_attributes, layer_pieces
from rnnx.tensor_pieces import Pieces
from rnnx.weights import RNNWeights


def check_opset(opset: int) -> None:
    """Refuse, in one line, an opset rnnx cannot write."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= newest:
        raise RNNXError(f"opset: expected {MIN_OPSET} to {newest} (this onnx's newest), found {opset}")


def build_stack_model(
    weights: RNNWeights,
    opset: int = DEFAULT_OPSET,
    batch_first: bool = False,
    initial_states: bool = True,
    sequence_lens: bool = False,
) -> Any:
    """The stack as one ModelProto with its weights in it (see :func:`plan_stack_model` to
    write a large one without holding it)."""
    return materialise(plan_stack_model(weights, opset, batch_first, initial_states, sequence_lens))


def plan_stack_model(
    weights: RNNWeights,
    opset: int = DEFAULT_OPSET,
    batch_first: bool = False,
    initial_states: bool = True,
    sequence_lens: bool = False,
) -> PlannedModel:
    """The stack's model, checked by onnx's checker, with its recurrent weights planned from
    the canonical arrays (nothing stacked in memory): write it with :func:`save_planned`."""
    from onnx import TensorProto, helper, numpy_helper

    check_opset(opset)
    spec = weights.spec
    elem = helper.np_dtype_to_tensor_dtype(weights.dtype)
    D, L, H = spec.num_directions, spec.num_layers, spec.hidden_size
    is_lstm = spec.cell == "lstm"
    nodes, inits = [], []
    seq_ax, batch_ax = ("batch", "seq") if batch_first else ("seq", "batch")

    planned: dict[str, Pieces] = {}

    def const(name: str, value: ArrayLike) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name: str, value: Pieces) -> str:
        inits.append(planned_tensor(name, value))
        planned[name] = value
        return name

    inputs = [helper.make_tensor_value_info("X", elem, [seq_ax, batch_ax, spec.input_size])]
    x = "X"
    if batch_first:
        nodes.append(helper.make_node("Transpose", ["X"], ["X_tbi"], perm=[1, 0, 2]))
        x = "X_tbi"
    if initial_states:
        inputs.append(helper.make_tensor_value_info("h0", elem, [L * D, "batch", spec.output_size]))
        if is_lstm:
            inputs.append(helper.make_tensor_value_info("c0", elem, [L * D, "batch", H]))
    seq = ""
    if sequence_lens:
        inputs.append(helper.make_tensor_value_info("seq_lens", TensorProto.INT32, ["batch"]))
        seq = "seq_lens"
    h_outs, c_outs = [], []
    records = []
    for k in range(L):
        h0 = c0 = ""
        if initial_states:
            starts, ends, axes = const(f"l{k}_start", [k * D]), const(f"l{k}_end", [(k + 1) * D]), const(f"l{k}_axis", [0])
            h0 = f"l{k}_h0"
            nodes.append(helper.make_node("Slice", ["h0", starts, ends, axes], [h0]))
            if is_lstm:
                c0 = f"l{k}_c0"
                nodes.append(helper.make_node("Slice", ["c0", starts, ends, axes], [c0]))
        layer_x, x = x, f"l{k}_out"
        if spec.proj_size:
            # No ONNX node has a projection: the layer is built as Scans straight from the
            # canonical weights, each weight stored once, and recorded for readers.
            name = f"LSTMProjected_l{k}"
            ins = {"X": layer_x, "seq_lens": seq, "h0": h0, "c0": c0}
            outs = [x, f"l{k}_Y_h", f"l{k}_Y_c"]
            nodes.extend(lower_layer(weights, k, ins, outs, f"{name}__", elem, merged_y=True))
            records.append({"node": name, "prefix": f"{name}__", "merged_y": True,
                            "spec": str(spec.with_(num_layers=1, input_size=spec.layer_input_size(k))),
                            "inputs": {r: t for r, t in ins.items() if t}, "outputs": dict(zip(("Y", "Y_h", "Y_c"), outs)), "node_metadata": {}})
        else:
            names = {key: weight(f"l{k}_{key}", value) for key, value in layer_pieces(weights, k).items()}
            node_inputs = [layer_x, names["W"], names["R"], names.get("B", ""), seq, h0] + ([c0, names.get("P", "")] if is_lstm else [])
            while node_inputs and not node_inputs[-1]:
                node_inputs.pop()
            attrs: dict[str, Any] = {"hidden_size": H, "direction": spec.direction}
            attrs.update(activation_attributes(spec))  # none for ONNX's defaults; every alpha and beta otherwise
            if spec.cell == "gru":
                attrs["linear_before_reset"] = int(spec.reset_after)
            op_type = OP_TYPES[spec.cell]
            outputs = [f"l{k}_Y", f"l{k}_Y_h"] + ([f"l{k}_Y_c"] if is_lstm else [])
            nodes.append(helper.make_node(op_type, node_inputs, outputs, name=f"{op_type}_l{k}", **attrs))
            # Y is (seq, dirs, batch, hidden): move dirs next to hidden, merge them; 0 keeps a dim as is.
            nodes.append(helper.make_node("Transpose", [f"l{k}_Y"], [f"l{k}_Y_t"], perm=[0, 2, 1, 3]))
            nodes.append(helper.make_node("Reshape", [f"l{k}_Y_t", const(f"l{k}_merge", np.array([0, 0, -1], np.int64))], [x]))
        h_outs.append(f"l{k}_Y_h")
        c_outs.append(f"l{k}_Y_c")
    if batch_first:
        nodes.append(helper.make_node("Transpose", [x], ["Y"], perm=[1, 0, 2]))
    else:
        nodes.append(helper.make_node("Identity", [x], ["Y"]))
    nodes.append(helper.make_node("Concat", h_outs, ["h_n"], axis=0) if L > 1 else helper.make_node("Identity", h_outs, ["h_n"]))
    outputs = [
        helper.make_tensor_value_info("Y", elem, [seq_ax, batch_ax, D * spec.output_size]),
        helper.make_tensor_value_info("h_n", elem, [L * D, "batch", spec.output_size]),
    ]
    if is_lstm:
        nodes.append(helper.make_node("Concat", c_outs, ["c_n"], axis=0) if L > 1 else helper.make_node("Identity", c_outs, ["c_n"]))
        outputs.append(helper.make_tensor_value_info("c_n", elem, [L * D, "batch", H]))
    graph = helper.make_graph(nodes, "rnnx_stack", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="rnnx")
    if records:
        record_lowered(model, records)
    set_metadata(model, {"rnnx.spec": str(spec), "rnnx.batch_first": str(int(batch_first))})  # beside lowering's record
    # The lowest IR version for the opset, so that older consumers (TensorRT 8.6) accept the file.
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    plan = PlannedModel(model, planned)
    for name in prune(model).initializers:  # a lowered layer's helpers its wiring does not use (no states given: no batch size)
        plan.pieces.pop(name, None)
    check_planned(plan)
    return plan


EXTERNAL_DATA_BYTES = 1_800_000_000  # below protobuf's 2 GiB limit, with room for the graph


def stored_bytes(graph: Any) -> int:
    """Bytes of every stored tensor: initializers and Constant nodes' values, subgraphs
    included (a lowered recurrence keeps its weights in Constants inside and beside its Scans),
    all of which onnx moves to external data."""
    return sum(t.ByteSize() for t in stored_tensors(graph))


def save_planned(plan: PlannedModel, path: Path) -> bool:
    """Write a planned model atomically, its weights streamed from their parts; past
    protobuf's limit they go to ``<name>.data`` beside it. Says whether they did."""
    path = Path(path)
    external = plan.planned_bytes + stored_bytes(plan.model.graph) > EXTERNAL_DATA_BYTES
    with atomic_output(path) as tmp, library_write(path):
        write_planned(plan, tmp, path.name, external)
    return external


def save_model(model: Any, path: Path) -> bool:
    """Write atomically; weights past protobuf's limit go to ``<name>.data`` beside it. Says whether they did."""
    path = Path(path)
    with atomic_output(path) as tmp:
        return write_model(model, tmp, path.name)


def write_model(model: Any, tmp: Path, final_name: str) -> bool:
    """Write ``model`` to ``tmp``, which will be renamed to ``final_name`` in the same folder;
    external data, when the weights pass protobuf's limit, goes to ``<final_name>.data``.
    What nothing reads (weights a pass replaced, their nodes, their value_info) is pruned
    first, in place, so that no file ships a tensor twice."""
    prune(model)
    external = stored_bytes(model.graph) > EXTERNAL_DATA_BYTES
    with library_write(tmp.with_name(final_name)):
        _save(model, tmp, final_name, external)
    return external


def _save(model: Any, tmp: Path, final_name: str, external: bool) -> None:
    import onnx

    if external:
        onnx.save(model, str(tmp), save_as_external_data=True, all_tensors_to_one_file=True, location=final_name + ".data",
                  convert_attribute=True)  # Constant nodes too: lowered recurrences keep their weights there
    else:
        onnx.save(model, str(tmp))
