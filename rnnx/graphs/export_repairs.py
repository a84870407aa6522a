"""Repairs of what torch.onnx writes for other authors' model code, before rnnx names anything.

- A model may return one of its inputs (``forward(x, lengths) -> (scores, lengths)``) or the
  same tensor twice. ONNX names a value once, so such an output is the input's own name,
  and renaming outputs would rename the input with it (or give two outputs one name, which
  onnx's checker refuses as not single static assignment). Each such output gets its own
  value through an Identity node.
- ``x.squeeze(1)`` on a dimension that is not 1 does nothing in torch, but torch.onnx writes
  it as a Squeeze, which ONNX Runtime refuses ("Dimension of input 1 must be 1 instead of
  32"). An axis whose static size, as ONNX's shape inference finds it, is not 1 is dropped
  from the Squeeze; a Squeeze left with no axis becomes an Identity.
"""

from __future__ import annotations

from typing import Any

from rnnx.formats.onnx_read import value_dims
from rnnx.graphs.index import GraphIndex
from rnnx.pass_result import PassResult


def separate_outputs(proto: Any) -> PassResult:
    """Give every graph output that is also a graph input, an initializer or an earlier
    output its own value (an Identity of it)."""
    from onnx import helper

    graph = proto.graph
    taken = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    names = {n for node in graph.node for n in node.output} | taken | {o.name for o in graph.output}
    result: PassResult[Any] = PassResult()
    seen: set[str] = set()
    for k, out in enumerate(graph.output):
        if out.name in taken or out.name in seen:
            fresh, i = f"{out.name}_out", 2
            while fresh in names:
                fresh, i = f"{out.name}_out{i}", i + 1
            names.add(fresh)
            graph.node.append(helper.make_node("Identity", [out.name], [fresh], name=f"rnnx_output_{k}"))
            result.rewritten.append(f"output {k} ({out.name}) is an input or an earlier output: given its own value {fresh}")
            out.name = fresh
        seen.add(out.name)
    return result


def _static_dims(proto: Any) -> dict[str, list[int | None]]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # shape inference is help here, not a requirement: nothing is dropped without it
        return {}
    dims: dict[str, list[int | None]] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.tensor_type.HasField("shape"):
            dims[vi.name] = [d if isinstance(d, int) else None for d in value_dims(vi, unnamed=None)]
    return dims


def drop_noop_squeezes(proto: Any) -> PassResult:
    """Drop the axes of main-graph Squeeze nodes (opset 13+: axes as an input) whose input
    has a static size other than 1 there."""
    from onnx import helper

    graph = proto.graph
    result: PassResult[Any] = PassResult()
    squeezes = [n for n in graph.node if n.op_type == "Squeeze" and n.domain in ("", "ai.onnx") and len(n.input) > 1 and n.input[1]]
    if not squeezes:
        return result
    dims = _static_dims(proto)
    index = GraphIndex(graph)
    for node in squeezes:
        shape = dims.get(node.input[0])
        axes = index.axes(node)
        if shape is None or axes is None:
            continue
        rank = len(shape)
        noop = [a for a in axes if -rank <= a < rank and shape[a % rank] not in (None, 1)]
        if not noop:
            continue
        kept = [a for a in axes if a not in noop]
        where = f"{node.name or node.output[0]}: axes {noop} of a {shape} input are not 1, so torch's squeeze did nothing there"
        if kept:
            name = f"{node.input[1]}_kept"
            graph.node.insert(list(graph.node).index(node), helper.make_node("Constant", [], [name], value_ints=kept, name=f"{node.name}_axes"))
            node.input[1] = name
            result.rewritten.append(where + "; those axes dropped")
        else:
            node.op_type = "Identity"
            del node.input[1:]
            result.rewritten.append(where + "; the Squeeze became an Identity")
    return result
