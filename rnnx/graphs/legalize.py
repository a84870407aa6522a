"""Repairs for known defects in what other tools write, and the opset a graph really needs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rnnx.errors import CAUSE_CHARS, DETAIL_CHARS, RNNXError, one_line
from rnnx.graphs.index import all_graphs

# Attributes that a newer opset added and that onnx's version converter leaves behind,
# with the value that means what the older opset does without them. Split's num_outputs:
# without it, opset 17 splits into as many equal parts as the node has outputs, the same
# thing for even splits (the self-check catches any other).
_DROPPABLE = {("Split", "num_outputs"): None, ("ReduceMean", "noop_with_empty_axes"): 0, ("ReduceMax", "noop_with_empty_axes"): 0,
              ("ReduceMin", "noop_with_empty_axes"): 0, ("ReduceProd", "noop_with_empty_axes"): 0, ("ReduceL1", "noop_with_empty_axes"): 0,
              ("ReduceL2", "noop_with_empty_axes"): 0, ("ReduceLogSum", "noop_with_empty_axes"): 0,
              ("ReduceLogSumExp", "noop_with_empty_axes"): 0, ("ReduceSumSquare", "noop_with_empty_axes"): 0,
              # new in 14: Reshape's allowzero 0 is opset 13's rule (a 0 copies the input's size), and
              # BatchNormalization's training_mode 0 is inference, all opset 13 had
              ("Reshape", "allowzero"): 0, ("BatchNormalization", "training_mode"): 0}




def model_opset(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


@functools.cache
def first_opset(op_type: str) -> int | None:
    """The opset that introduced ``op_type`` in the default domain (None if ONNX has none)."""
    import onnx

    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op_type and s.domain == ""]
    return min(versions) if versions else None


def require_opset(proto: Any, opset: int) -> None:
    """Refuse, in one line, a graph that uses an op ``opset`` does not have: name the op and
    the lowest opset that holds every op of the graph."""
    needed: dict[str, int] = {}
    for graph in all_graphs(proto.graph):
        for node in graph.node:
            if node.domain in ("", "ai.onnx"):
                since = first_opset(node.op_type)
                if since is not None and since > opset:
                    needed[node.op_type] = since
    if needed:
        op, since = max(needed.items(), key=lambda kv: kv[1])
        lowest = max(needed.values())
        raise RNNXError(f"opset {opset} has no {op} (ONNX added it in opset {since}), which the model uses; export with opset={lowest} or later")


@functools.cache
def _attribute_names(op_type: str, opset: int) -> frozenset[str] | None:
    """The attributes ``op_type`` has at ``opset`` (None if it has no schema there); looked up
    once per op type, not once per node."""
    import onnx

    try:
        return frozenset(onnx.defs.get_schema(op_type, opset, "").attributes)
    except onnx.defs.SchemaError:
        return None


def drop_newer_attributes(proto: Any, strict: bool = True) -> None:
    """Remove attributes that the model's opset does not define, where the value left
    behind by the version converter means what the older op does anyway; refuse others
    (or, not ``strict``, leave them for the checker to name)."""
    from onnx import helper

    opset = model_opset(proto)
    for graph in all_graphs(proto.graph):
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") or not node.attribute:
                continue
            allowed = _attribute_names(node.op_type, opset)
            if allowed is None:
                continue  # require_opset has already refused ops the opset lacks
            keep = []
            for a in node.attribute:
                if a.name in allowed:
                    keep.append(a)
                    continue
                key = (node.op_type, a.name)
                if key not in _DROPPABLE or (_DROPPABLE[key] is not None and helper.get_attribute_value(a) != _DROPPABLE[key]):
                    if not strict:
                        keep.append(a)
                        continue
                    raise RNNXError(f"opset {opset}: {node.op_type} node {node.name!r} needs attribute {a.name}, which opset {opset} lacks; export with a newer opset=")
            if len(keep) != len(node.attribute):
                del node.attribute[:]
                node.attribute.extend(keep)


_REDUCE_AXES_INPUT_IN_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                            "ReduceLogSumExp", "ReduceSumSquare")


def convert_down(proto: Any, opset: int) -> Any:
    """``proto`` (opset 18 or later, as torch.onnx writes) at ``opset``.

    onnx's version converter has no adapter for Split from 18 to 17 and needs the Reduce
    ops' axes as initializers, so the step to 17 is rnnx's own for the ops whose opset-18
    form it knows (Reduce* take axes as an input, Split takes num_outputs); any other op
    that changed in 18 goes through onnx's converter, as does every step below 17. The
    caller runs the checker on the finished graph.
    """
    if opset < 17:
        _layer_norms_decomposed(proto)
    if opset < 14:
        time_major_recurrences(proto)
    require_opset(proto, opset)
    if model_opset(proto) > 18:
        proto = _onnx_convert(proto, 18)
    if model_opset(proto) == 18 and opset < 18:
        if _only_known_18_changes(proto):
            _reduce_and_split_to_17(proto)
            for o in proto.opset_import:
                if o.domain in ("", "ai.onnx"):
                    o.version = 17
        else:
            proto = _onnx_convert(proto, 17)
        drop_newer_attributes(proto)
    if opset < 17:
        try:
            proto = _onnx_convert(proto, opset)
        except RNNXError:
            _relabel(proto, opset)
        drop_newer_attributes(proto)
    return proto


_RECURRENT_OPS = ("LSTM", "GRU", "RNN")
# layout=1's batch-major tensors and the time-major ones of layout 0 (ONNX's LSTM/GRU/RNN text):
# X (batch, seq, in) / (seq, batch, in); states (batch, dirs, size) / (dirs, batch, size); Y
# (batch, seq, dirs, size) / (seq, dirs, batch, size). Each pair's Transpose, by input and output position.
_TO_TIME_MAJOR = {0: [1, 0, 2], 5: [1, 0, 2], 6: [1, 0, 2]}
_TO_BATCH_MAJOR = {0: [2, 0, 1, 3], 1: [1, 0, 2], 2: [1, 0, 2]}


def time_major_recurrences(proto: Any) -> None:
    """Every LSTM/GRU/RNN node with ``layout=1`` made ``layout=0`` between Transposes, so that it
    means the same below opset 14, which has no layout attribute (TensorRT 8.0 and 8.2 parse up
    to 13). Names stay: the node's inputs and outputs keep the tensors around it."""
    from onnx import helper

    def made_time_major(node: Any) -> list[Any] | None:
        layout = next((a for a in node.attribute if a.name == "layout"), None)
        if node.op_type not in _RECURRENT_OPS or node.domain not in ("", "ai.onnx") or layout is None:
            return None
        _drop_attributes(node, "layout")
        if helper.get_attribute_value(layout) == 0:
            return None
        tag, before, after = node.name or node.output[0], [], []
        for k, perm in _TO_TIME_MAJOR.items():
            if k < len(node.input) and node.input[k]:
                moved = f"{tag}__time_major_in{k}"
                before.append(helper.make_node("Transpose", [node.input[k]], [moved], perm=perm, name=moved))
                node.input[k] = moved
        for k, perm in _TO_BATCH_MAJOR.items():
            if k < len(node.output) and node.output[k]:
                moved = f"{tag}__time_major_out{k}"
                after.append(helper.make_node("Transpose", [moved], [node.output[k]], perm=perm, name=f"{moved}_back"))
                node.output[k] = moved
        return [*before, node, *after]

    _replace_nodes(proto, made_time_major)


def _replace_nodes(proto: Any, replace: Callable[[Any], list[Any] | None]) -> None:
    """Each node of every graph replaced by the nodes ``replace`` makes of it (None: kept as it is)."""
    for graph in all_graphs(proto.graph):
        nodes = []
        for node in graph.node:
            made = replace(node)
            nodes += [node] if made is None else made
        del graph.node[:]
        graph.node.extend(nodes)


def _drop_attributes(node: Any, *names: str) -> None:
    keep = [a for a in node.attribute if a.name not in names]
    del node.attribute[:]
    node.attribute.extend(keep)


def _layer_norms_decomposed(proto: Any) -> None:
    """LayerNormalization (new in 17) as the reductions it stands for, as torch.onnx's
    TorchScript exporter writes it for older opsets: (x - mean) / sqrt(var + eps) * scale + bias."""
    from onnx import TensorProto, helper

    def decomposed(node: Any) -> list[Any] | None:
        if node.op_type != "LayerNormalization" or node.domain not in ("", "ai.onnx"):
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axis = int(attrs.get("axis", -1))
        if axis >= 0 or any(node.output[1:]):
            raise RNNXError(f"LayerNormalization node {node.name!r} (axis {axis}, or its mean and inverse deviation used) has no form below opset 17; export with opset=17")
        axes = list(range(axis, 0))
        x, y, p = node.input[0], node.output[0], f"{node.output[0]}_ln"
        eps = helper.make_tensor(f"{p}_eps", TensorProto.FLOAT, [], [float(attrs.get("epsilon", 1e-5))])
        nodes = [
            helper.make_node("ReduceMean", [x], [f"{p}_mean"], axes=axes, keepdims=1),
            helper.make_node("Sub", [x, f"{p}_mean"], [f"{p}_d"]),
            helper.make_node("Mul", [f"{p}_d", f"{p}_d"], [f"{p}_sq"]),
            helper.make_node("ReduceMean", [f"{p}_sq"], [f"{p}_var"], axes=axes, keepdims=1),
            helper.make_node("Constant", [], [f"{p}_eps"], value=eps),
            helper.make_node("Add", [f"{p}_var", f"{p}_eps"], [f"{p}_vare"]),
            helper.make_node("Sqrt", [f"{p}_vare"], [f"{p}_std"]),
            helper.make_node("Div", [f"{p}_d", f"{p}_std"], [f"{p}_norm"]),
            helper.make_node("Mul", [f"{p}_norm", node.input[1]], [y if len(node.input) < 3 or not node.input[2] else f"{p}_scaled"]),
        ]
        if len(node.input) > 2 and node.input[2]:
            nodes.append(helper.make_node("Add", [f"{p}_scaled", node.input[2]], [y]))
        return nodes

    _replace_nodes(proto, decomposed)


def _shape_ranges_as_slices(proto: Any) -> None:
    """Shape(start, end), new in 15, as Shape then Slice."""
    from onnx import TensorProto, helper

    def sliced(node: Any) -> list[Any] | None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or not ({"start", "end"} & set(attrs)):
            return None
        full, out = f"{node.output[0]}_full", node.output[0]
        bounds = [f"{out}_{k}" for k in ("start", "end")]
        values = [attrs.get("start", 0), attrs.get("end", 2**62)]
        return [helper.make_node("Shape", list(node.input), [full], name=node.name),
                *(helper.make_node("Constant", [], [b], value=helper.make_tensor(b, TensorProto.INT64, [1], [v])) for b, v in zip(bounds, values)),
                helper.make_node("Slice", [full, *bounds], [out], name=f"{node.name}_range")]

    _replace_nodes(proto, sliced)


def _relabel(proto: Any, opset: int) -> None:
    """Where onnx's converter lacks an adapter (Shape from 15 to 14, say), the newer ops'
    extensions between 14 and 17 are new attributes, inputs and types, so a node that uses
    none of them means the same at ``opset``: relabel, and let the checker name a node
    that does (ONNX Runtime's self-check then runs what was written)."""
    import onnx

    before = model_opset(proto)
    if opset < 15:
        _shape_ranges_as_slices(proto)
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    try:
        drop_newer_attributes(proto)
        onnx.checker.check_model(proto)
    except (RNNXError, onnx.checker.ValidationError) as exc:
        raise RNNXError(f"the model cannot be written at opset {opset}: {one_line(exc, CAUSE_CHARS)}; export with opset={before}") from None


def _onnx_convert(proto: Any, opset: int) -> Any:
    import onnx

    try:
        return onnx.version_converter.convert_version(proto, opset)
    except Exception as exc:  # onnx's converter raises RuntimeError/ConvertError for ops it cannot map
        text = one_line(exc, None)
        op_types = sorted({n.op_type for g in all_graphs(proto.graph) for n in g.node}, key=len, reverse=True)  # the longest name that fits
        op = next((o for o in op_types if o in text), None)
        what = f"its {op} nodes" if op else "the model"
        raise RNNXError(f"onnx's converter cannot bring {what} to opset {opset} ({one_line(text, DETAIL_CHARS)}); export with opset={model_opset(proto)}") from None


def _only_known_18_changes(proto: Any) -> bool:
    """Every op whose opset-18 version differs is one rnnx brings to 17 itself: Reduce* and
    Split (rewritten), or Pad without the axes input 18 added (the same op)."""
    import onnx

    for graph in all_graphs(proto.graph):
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") or node.op_type in _REDUCE_AXES_INPUT_IN_18 + ("Split",):
                continue
            if node.op_type == "Pad" and not (len(node.input) > 3 and node.input[3]):
                continue
            if onnx.defs.get_schema(node.op_type, 18, "").since_version == 18:
                return False
    return True


def _reduce_and_split_to_17(proto: Any) -> None:
    from onnx import helper, numpy_helper

    for graph in all_graphs(proto.graph):
        constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
                          if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
        for node in graph.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type in _REDUCE_AXES_INPUT_IN_18:
                noop = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "noop_with_empty_axes"), 0)
                axes_name = node.input[1] if len(node.input) > 1 else ""
                if axes_name and axes_name not in constants:
                    raise RNNXError(f"{node.op_type} node {node.name!r} reduces over axes computed at run time, which opset 17 cannot express; export with opset=18")
                if noop and not axes_name:
                    raise RNNXError(f"{node.op_type} node {node.name!r} reduces over no axes (noop_with_empty_axes), which opset 17 cannot express; export with opset=18")
                _drop_attributes(node, "noop_with_empty_axes")
                if axes_name:
                    node.attribute.append(helper.make_attribute("axes", [int(a) for a in constants[axes_name].reshape(-1)]))
                    del node.input[1:]
            elif node.op_type == "Split" and any(a.name == "num_outputs" for a in node.attribute):
                # Without a split input, opset 13-17 splits into as many equal parts as there are outputs.
                if len(node.input) > 1 and node.input[1]:
                    continue
                _drop_attributes(node, "num_outputs")

