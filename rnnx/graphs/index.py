"""A read-only index over an ONNX graph, and the one way passes rewrite it.

The passes change few nodes in graphs of modest size, so they work on the protobuf with
this small index rather than through a separate IR.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np


class GraphIndex:
    """Producers, consumers and constants of one graph, looked up by tensor name."""

    def __init__(self, graph: Any) -> None:
        from rnnx.graphs.find import to_array

        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for n in graph.node:
            for i in n.input:
                if i:
                    self.consumers[i].append(n)
        self.constants = {i.name: to_array(i) for i in graph.initializer}
        for n in graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.constants[n.output[0]] = to_array(n.attribute[0].t)
        self.outputs = {o.name for o in graph.output}

    def prod(self, name: str, op_type: str) -> Any:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def axes(self, node: Any) -> list[int] | None:
        if len(node.input) > 1 and node.input[1] in self.constants:
            return [int(a) for a in np.atleast_1d(self.constants[node.input[1]])]
        for a in node.attribute:
            if a.name == "axes":
                return list(a.ints)
        return None

    def attr(self, node: Any, name: str, default: Any = None) -> Any:
        from onnx import helper

        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default


def remove_dead(graph: Any) -> None:
    live = {o.name for o in graph.output}
    for sub in graph.node:  # names used inside subgraphs count as live
        for a in sub.attribute:
            if a.type == a.GRAPH:
                live |= {i for n in a.g.node for i in n.input}
    changed = True
    nodes = list(graph.node)
    while changed:
        used = live | {i for n in nodes for i in n.input}
        keep = [n for n in nodes if any(o in used for o in n.output)]
        changed = len(keep) != len(nodes)
        nodes = keep
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    inits = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)


def toposort(graph: Any) -> None:
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:  # outer-scope names of subgraphs etc.: keep the rest in their order
            ordered += pending
            break
        for n in ready:
            ordered.append(n)
            available |= set(n.output)
        pending = [n for n in pending if n not in ready]
    del graph.node[:]
    graph.node.extend(ordered)


def rewrite(graph: Any, removed: set[int], added: Iterable[Any], initializers: Iterable[Any] = ()) -> None:
    """Drop the nodes whose ids are in ``removed``, add ``added``, then drop what became
    dead and restore topological order."""
    kept = [n for n in graph.node if id(n) not in removed]
    del graph.node[:]
    graph.node.extend(kept + list(added))
    graph.initializer.extend(initializers)
    remove_dead(graph)
    toposort(graph)
