"""Weights an exporter left as a small computation over stored tensors, folded to their values.

torch.onnx's default (dynamo) exporter folds a recurrent node's W and R into initializers
only below a size limit; above it, W is ``Unsqueeze(Concat(Slice(weight_ih_l0), ...))``: torch's
gates cut apart and put back in ONNX's order. Such a tensor depends on nothing but stored
tensors, so its value is known: onnx's reference evaluator computes it from them. Only
operators that move or cut data are folded (never one that could make a tensor larger
than its inputs), and only a bounded number of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Operators that only cut, join, reorder or re-label data: their output holds no more
#: elements than their inputs.
FOLDABLE = frozenset({"Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Identity", "Split", "Flatten"})
MAX_NODES = 256  # a whole stack's worth of slices per tensor is a few dozen


def producers(graph: Any) -> dict[str, Any]:
    """Each tensor name of ``graph`` to the node that computes it."""
    return {out: node for node in graph.node for out in node.output if out}


def fold(name: str, graph: Any, made_by: dict[str, Any], known: dict[str, tuple[np.ndarray, str]], opset: int) -> tuple[np.ndarray, str] | None:
    """``name``'s value and a description of where it came from, when it is computed from
    ``known`` tensors by :data:`FOLDABLE` operators only; else None."""
    nodes: dict[int, Any] = {}
    leaves: set[str] = set()
    todo, seen = [name], set()
    while todo:
        tensor = todo.pop()
        if not tensor or tensor in seen:
            continue
        seen.add(tensor)
        if tensor in known:
            leaves.add(tensor)
            continue
        node = made_by.get(tensor)
        if node is None or node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx") or len(nodes) >= MAX_NODES:
            return None
        nodes[id(node)] = node
        todo.extend(node.input)
    if not nodes:
        return None
    ordered = [n for n in graph.node if id(n) in nodes]
    if len(ordered) != len(nodes):  # a node seen through another reference: do not guess
        return None
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    feeds = {leaf: known[leaf][0] for leaf in sorted(leaves)}
    inputs = [helper.make_tensor_value_info(leaf, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), list(np.shape(v))) for leaf, v in feeds.items()]
    output = helper.make_tensor_value_info(name, 0, None)
    model = helper.make_model(helper.make_graph(ordered, "fold", inputs, [output]), opset_imports=[helper.make_opsetid("", opset)])
    try:
        value = ReferenceEvaluator(model).run(None, feeds)[0]
    except Exception:  # noqa: BLE001  the evaluator's own errors: the computation is not what it seemed; leave it unfolded
        return None
    ops = sorted({n.op_type for n in ordered})
    return np.asarray(value), f"computed from stored tensors ({'/'.join(ops)}, folded)"
