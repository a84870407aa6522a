"""A float16 graph that takes and returns float32: Casts at its edges (``--keep-io-types``,
as onnxconverter-common names the same choice).

The graph inside keeps computing in float16; only what crosses its boundary changes type, so a
caller feeds and reads float32 while the weights stay rounded once, to float16. Names stay: each
graph input and output keeps its name and moves to the float32 side of its Cast.
"""

from __future__ import annotations

from typing import Any

_EDGE_SUFFIX = "__fp16"


def computes_in_float16(proto: Any) -> bool:
    """Whether an ONNX model's weights are float16: stored so (what ``--precision fp16`` writes), or
    float32 weights its graph casts to float16 (ONNX Runtime folds those into float16 weights).
    The weights decide, not the inputs: float16 inputs cast up to meet float32 weights are computed
    in float32, and float32 inputs cast down at the edges (``--keep-io-types``) in float16. Every
    caller asks this: the ONNX Runtime runner (the float16 graphs its CPU provider crashes on), and
    the checks that hold a file to its precision's rounding floor (verify, fuse and lower's check;
    tests/engines/test_ort_options.py shows each on a file of either kind)."""
    from onnx import TensorProto

    half = TensorProto.FLOAT16
    graph = proto.graph
    weights = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            weights.update(node.output)
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and value.data_type == half:
                return True
        elif node.op_type == "Cast" and node.input and node.input[0] in weights:
            if any(a.name == "to" and a.i == half for a in node.attribute):
                return True
    return any(t.data_type == half for t in graph.initializer)


def keep_io_types(proto: Any) -> list[str]:
    """Every float16 graph input and output of ``proto``'s main graph made float32, with a Cast
    to float16 after each input and a Cast to float32 before each output; returns their names."""
    from onnx import TensorProto, helper  # loaded on first use: the command line starts without onnx

    graph = proto.graph
    changed: list[str] = []
    casts_in = []
    for value in graph.input:
        if value.type.tensor_type.elem_type != TensorProto.FLOAT16:
            continue
        inner = value.name + _EDGE_SUFFIX
        _rename_uses(graph, value.name, inner)
        value.type.tensor_type.elem_type = TensorProto.FLOAT
        casts_in.append(helper.make_node("Cast", [value.name], [inner], to=TensorProto.FLOAT16, name=f"{inner}_cast"))
        changed.append(value.name)
    casts_out = []
    for value in graph.output:
        if value.type.tensor_type.elem_type != TensorProto.FLOAT16:
            continue
        inner = value.name + _EDGE_SUFFIX
        for node in graph.node:  # the producer now writes the float16 tensor; the Cast writes the output's name
            node.output[:] = [inner if o == value.name else o for o in node.output]
        _rename_uses(graph, value.name, inner)
        value.type.tensor_type.elem_type = TensorProto.FLOAT
        casts_out.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.FLOAT, name=f"{inner}_cast"))
        changed.append(value.name)
    nodes = casts_in + list(graph.node) + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    return changed


def _rename_uses(graph: Any, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and in the subgraphs that see it, read as ``new``."""
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == attr.GRAPH else list(attr.graphs)):
                if not any(v.name == old for v in sub.input):  # a body input of that name hides the outer one
                    _rename_uses(sub, old, new)
