"""Repairs for known defects in what other tools write, applied before rnnx reads a graph."""

from __future__ import annotations

from typing import Any


def drop_opset18_split_attribute(proto: Any) -> None:
    """torch.onnx builds at opset 18 and converts down; the conversion keeps Split's
    ``num_outputs`` (new in 18), which opset 17 rejects. Without it, opset 17 splits into
    as many equal parts as the node has outputs: the same thing for even splits, and the
    self-check catches any other."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 18)
    if opset >= 18:
        return
    for node in proto.graph.node:
        if node.op_type == "Split":
            keep = [a for a in node.attribute if a.name != "num_outputs"]
            del node.attribute[:]
            node.attribute.extend(keep)
