"""Layer by layer: which recurrent layer of an ONNX graph drifts.

Every recurrent layer of the main graph, native (an LSTM/GRU/RNN node) or lowered (the
Scans ``rnnx lower`` and projected exports write, which keep the node's tensor names and
leave a record in ``rnnx.lowered``), has its input and output tensors marked as extra
graph outputs, as ``polygraphy run --onnx-outputs mark all`` does. After a run, each
layer's float64 reference is computed on the inputs that layer actually received and
held against the outputs it actually produced. A layer whose own computation is right
matches even when an earlier layer fed it something wrong, so the first layer that
leaves the tolerance is the one that drifts.

What the reference computes with is the layer's *truth*: the weights of the torch module
it was exported from when that is known (then a weight stored wrongly in the file shows),
else the node's own weights (then only the arithmetic is checked).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from rnnx import reference
from rnnx.check import Rule, judge
from rnnx.errors import RNNXError
from rnnx.formats.onnx_quantized import Quantization, error_bound, is_dequantized, is_quantized, main_graph_quantizations
from rnnx.formats.onnx_read import read_lowered, recurrent_nodes
from rnnx.layouts import onnx as onnx_layout
from rnnx.layouts.onnx import NODE_OUTPUTS, OP_TYPES, STATE_INPUTS
from rnnx.spec import RNNSpec
from rnnx.tolerance import Tolerance, calibrated, per_step_max
from rnnx.verify.diagnose import differing, explain, one_layer, renumbered
from rnnx.weights import RNNWeights

INPUT_ROLES = STATE_INPUTS
OUTPUT_ROLES = NODE_OUTPUTS


@dataclass
class Layer:
    """One recurrent layer of the graph, by the tensors it reads and writes."""

    name: str
    op: str
    form: str  # "native" or "lowered"
    inputs: dict[str, str]  # role -> tensor
    outputs: dict[str, str]  # role -> tensor
    spec: RNNSpec | None = None  # one layer
    own: RNNWeights | None = None  # the node's stored weights (a lowered layer's read back from its Scans)
    unreadable: str = ""  # why the node's weights have no canonical form
    layout: int = 0  # ONNX layout attribute: 1 is batch-major
    merged_y: bool = False  # Y already (seq, batch, dirs*size): the projected placeholder's
    quantization: Quantization | None = None  # a quantized node (DynamicQuantizeLSTM): held to the bound its scales give


# Layer k of a stack as a one-layer stack (its tensors renamed ``l0.``: a Truth keeps k, so that
# what is said about them names the module's own layer).
single_layer = one_layer


class Truth(NamedTuple):
    """What a layer's reference computes with: the weights, how to say where they came from,
    and which layer of that module they are (a file's stack may be split over several nodes,
    each restarting at layer 0; messages use the module's own number)."""

    weights: RNNWeights
    said: str
    layer: int = 0


def find_layers(model: Any) -> list[Layer]:
    """The recurrent layers of the main graph, in graph order."""
    position = {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}
    layers = []
    lowered_own: dict[str, RNNWeights] = {}
    quantized = dict(zip([tuple(n.output) for n in model.graph.node if is_quantized(n)], main_graph_quantizations(model)))
    for rn in recurrent_nodes(model):
        if rn.graph != "main":
            continue  # inside a Loop or If body: its tensors cannot be marked as graph outputs
        if rn.lowered:  # its weights, read back from its Scans; the record below gives its tensors
            try:
                lowered_own[rn.name] = onnx_layout.from_native([rn.as_dict()])
            except RNNXError:
                pass
            continue
        node = rn.node
        layer = Layer(rn.name, node.op_type, "native", _named(list(node.input), INPUT_ROLES), _named(list(node.output), OUTPUT_ROLES),
                      layout=int(rn.attributes.get("layout", 0) or 0),
                      quantization=quantized.get(tuple(node.output)) if is_dequantized(node) else None)
        try:
            layer.own = onnx_layout.from_native([rn.as_dict()])
            layer.spec = layer.own.spec
        except RNNXError as exc:
            layer.unreadable = str(exc)
        layers.append(layer)
    for rec in read_lowered(model):
        try:
            spec = RNNSpec.parse(str(rec.get("spec")))
        except (RNNXError, ValueError):
            continue
        ins = {k: str(v) for k, v in rec["inputs"].items() if k in INPUT_ROLES and v}
        outs = {k: str(v) for k, v in rec["outputs"].items() if k in OUTPUT_ROLES and v}
        if "X" in ins and outs and all(v in position for v in outs.values()):
            layers.append(Layer(str(rec.get("node")), OP_TYPES[spec.cell], "lowered",
                                ins, outs, spec=spec, merged_y=bool(rec.get("merged_y")), own=lowered_own.get(str(rec.get("node")))))
    layers.sort(key=lambda la: min(position.get(t, len(position)) for t in la.outputs.values()))
    return layers


def _named(names: list[str], roles: dict[str, int]) -> dict[str, str]:
    return {role: names[i] for role, i in roles.items() if i < len(names) and names[i]}


def mark_outputs(model: Any, layers: list[Layer]) -> tuple[Any, list[str]]:
    """A copy of ``model`` whose outputs also give every layer's input and output tensors;
    and the names added (graph inputs and initializers are known already and not marked)."""
    import onnx
    from onnx import TensorProto, helper

    marked = copy.deepcopy(model)
    graph = marked.graph
    have = {o.name for o in graph.output} | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    types: dict[str, int] = {}
    try:  # only for the element types of the tensors to mark; a graph it cannot follow still runs
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        types = {vi.name: vi.type.tensor_type.elem_type for vi in inferred.graph.value_info}
    except Exception:  # noqa: BLE001  onnx raises several types on graphs it cannot infer
        types = {}
    added = []
    for layer in layers:
        elem = types.get(layer.outputs.get("Y", ""), TensorProto.FLOAT)
        for role, name in {**layer.inputs, **layer.outputs}.items():
            if name in have:
                continue
            have.add(name)
            elem_type = types.get(name) or (TensorProto.INT32 if role == "seq_lens" else elem)
            graph.output.append(helper.make_tensor_value_info(name, elem_type, None))
            added.append(name)
    return marked, added


@dataclass
class LayerCheck:
    name: str
    op: str
    form: str
    truth: str  # what the reference computed with
    status: str  # "ok", "drifts" or "not checked"
    reason: str = ""
    max_abs: float = 0.0
    worst_case: str = ""
    per_step: list[float] = field(default_factory=list)  # Y's max abs error per step, at the worst case
    outputs: dict[str, float] = field(default_factory=dict)  # max abs error per output, over all cases
    tolerance: str = ""
    ratio: float | None = None  # the worst max abs error over its rounding floor (the calibrated rule), where one was measured
    diagnosis: list[str] = field(default_factory=list)  # the cause first; partial explanations labelled with their share
    not_offered: list[str] = field(default_factory=list)  # mistakes tried that change nothing on the worst case's inputs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _as_reference_inputs(layer: Layer, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The layer's inputs in rnnx's layout: X (seq, batch, in), states (dirs, batch, size)."""
    x = np.asarray(values[layer.inputs["X"]])
    if x.ndim != 3:
        raise RNNXError(f"layer {layer.name}: its X has shape {list(x.shape)}, expected 3 dimensions")
    out = {"X": x.transpose(1, 0, 2) if layer.layout == 1 else x}
    for role in ("h0", "c0"):
        if role in layer.inputs:
            state = np.asarray(values[layer.inputs[role]])
            out[role] = state.transpose(1, 0, 2) if layer.layout == 1 else state
    if "seq_lens" in layer.inputs:
        out["seq_lens"] = np.asarray(values[layer.inputs["seq_lens"]]).astype(np.int64)
    return out


def _as_node_outputs(layer: Layer, spec: RNNSpec, y: np.ndarray, h: np.ndarray, c: np.ndarray | None) -> dict[str, np.ndarray]:
    """The reference's (seq, batch, dirs*size) Y and (dirs, batch, size) states as the node gives them."""
    T, B, _ = y.shape
    D, size = spec.num_directions, spec.output_size
    if layer.merged_y:
        node_y = y
    elif layer.layout == 1:
        node_y = y.transpose(1, 0, 2).reshape(B, T, D, size)
    else:
        node_y = y.reshape(T, B, D, size).transpose(0, 2, 1, 3)
    out = {"Y": node_y, "Y_h": h.transpose(1, 0, 2) if layer.layout == 1 else h}
    if c is not None:
        out["Y_c"] = c.transpose(1, 0, 2) if layer.layout == 1 else c
    return out


def _node_y_as_rnnx(layer: Layer, y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, np.float64)
    if layer.merged_y:
        return y
    if layer.layout == 1:
        B, T, D, H = y.shape
        return y.reshape(B, T, D * H).transpose(1, 0, 2)
    T, D, B, H = y.shape
    return y.transpose(0, 2, 1, 3).reshape(T, B, D * H)


def check_layers(layers: list[Layer], truths: dict[str, Truth], runs: list[tuple[str, dict[str, np.ndarray]]],
                 tol: Tolerance, calibrate: bool = True) -> list[LayerCheck]:
    """Each layer on every run: ``truths`` maps a layer name to its :class:`Truth` (weights,
    description, the module's layer number); ``runs`` are (case label, every tensor's value by name).

    With ``calibrate`` (nobody set a tolerance), each output is held to the calibrated rule
    (:func:`rnnx.tolerance.compare_calibrated`): the reference's arithmetic run in the layer's
    dtype on the same inputs sets the rounding floor; ``tol`` holds where it gives none."""
    checks = []
    for layer in layers:
        given = Truth(*truths[layer.name]) if layer.name in truths else None
        truth, said = (given.weights, given.said) if given is not None else ((layer.own, "its own weights") if layer.own is not None else (None, ""))
        check = LayerCheck(layer.name, layer.op, layer.form, said, "ok", tolerance=str(tol))
        checks.append(check)
        if truth is None:
            check.status = "not checked"
            check.reason = layer.unreadable or "lowered, and no torch module matches it, so its weights are not known"
            continue
        worst: tuple[float, str, dict[str, np.ndarray], np.ndarray, Tolerance] | None = None
        bounds = []
        for label, values in runs:
            missing = [t for t in [*layer.inputs.values(), *layer.outputs.values()] if t not in values]
            if missing:
                check.status, check.reason = "not checked", f"tensor {missing[0]!r} was not produced by the run"
                break
            inputs = _as_reference_inputs(layer, values)
            try:
                ref = reference.forward(truth, inputs["X"], inputs.get("h0"), inputs.get("c0"), inputs.get("seq_lens"))
            except RNNXError as exc:
                check.status, check.reason = "not checked", f"its inputs do not fit {truth.spec}: {exc}"
                break
            want = _as_node_outputs(layer, truth.spec, ref.y, ref.h_n, ref.c_n)
            run_tol = tol
            honest = _honest_outputs(layer, truth, inputs, values) if calibrate and layer.quantization is None else {}
            if layer.quantization is not None and layer.own is not None:
                from_float = truth is not layer.own and not truth.equal(layer.own)
                run_tol = Tolerance(error_bound([layer.quantization], layer.own, inputs, from_float), 0.0)
                bounds.append(run_tol.atol)
                check.tolerance = f"{layer.quantization.op}: each run within the bound its scales give (up to {max(bounds):.3g}), rtol 0"
            for role, tensor in layer.outputs.items():
                if role not in want:
                    continue
                dtype = np.asarray(values[tensor]).dtype.name
                row = judge(values[tensor], want[role], Rule(run_tol, honest.get(role), dtype))
                stats = row.stats
                assert stats is not None  # a truth was given
                check.outputs[role] = max(check.outputs.get(role, 0.0), stats.max_abs)
                if stats.floor is not None:
                    check.ratio = max(check.ratio or 0.0, stats.ratio or 0.0)
                    check.tolerance = f"max abs within {stats.multiple:g}x the rounding floor (the reference in {dtype})"
                if not row.passed:
                    check.status = "drifts"
                if role == "Y" and (worst is None or stats.max_abs > worst[0]):
                    time_axis = 1 if layer.layout == 1 and not layer.merged_y else 0
                    check.per_step = per_step_max(values[tensor], want[role], time_axis)
                    held = calibrated(stats.floor, stats.multiple) if stats.floor is not None and stats.multiple is not None else run_tol
                    worst = (stats.max_abs, label, inputs, _node_y_as_rnnx(layer, values[tensor]), held)
        if check.status == "not checked":
            continue
        check.max_abs = max(check.outputs.values(), default=0.0)
        if worst is not None:
            check.worst_case = worst[1]
        if check.status == "drifts" and worst is not None:
            check.diagnosis, check.not_offered = _diagnose(layer, truth, given.layer if given is not None else None, worst[2], worst[3], worst[4])
    return checks


def _honest_outputs(layer: Layer, truth: RNNWeights, inputs: dict[str, np.ndarray], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference's arithmetic in the dtype the layer ran in (float32, float16), by output role;
    empty where there is none (float64, a dtype numpy cannot compute in)."""
    y_tensor = layer.outputs.get("Y") or next(iter(layer.outputs.values()), None)
    dtype = np.asarray(values[y_tensor]).dtype if y_tensor in values else np.dtype(np.float32)
    if dtype.name not in ("float32", "float16"):
        return {}
    ref = reference.forward(truth, inputs["X"], inputs.get("h0"), inputs.get("c0"), inputs.get("seq_lens"), dtype=dtype.type)
    return _as_node_outputs(layer, truth.spec, ref.y, ref.h_n, ref.c_n)


def _diagnose(layer: Layer, truth: RNNWeights, number: int | None, inputs: dict[str, np.ndarray], y: np.ndarray,
              tol: Tolerance) -> tuple[list[str], list[str]]:
    """Which mistake explains the layer's output, and how much of it (:func:`rnnx.verify.diagnose.explain`),
    with the torch module's own layer number; and the mistakes not offered because they change nothing."""
    stored = layer.own if layer.own is not None and layer.own is not truth and layer.own.spec == truth.spec else None
    if not layer.merged_y:
        found = explain(truth, inputs, y, atol=max(tol.atol * 10, 1e-3), tol=tol, stored=stored, first_layer=number,
                        source="the torch module's")
        return found.lines(), found.not_offered
    # a merged Y (a lowered projected layer's placeholder): the stored tensors that differ, unweighed
    differ = differing(stored, truth) if stored is not None else []
    if not differ:
        return [], []
    shown = [f"{renumbered(n, number)} (by {d:.2g})" for n, d in differ]
    return ["stored weights differ from the torch module's: " + ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")], []
