"""A read-only index over an ONNX graph, and the one way passes rewrite it.

The passes change few nodes in graphs of modest size, so they work on the protobuf with
this small index rather than through a separate IR.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np


class GraphIndex:
    """Producers, consumers and constants of one graph, looked up by tensor name."""

    def __init__(self, graph: Any, outer_constants: dict[str, np.ndarray] | None = None) -> None:
        from rnnx.formats.onnx_read import to_array

        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for n in graph.node:
            for i in n.input:
                if i:
                    self.consumers[i].append(n)
        self.constants = dict(outer_constants or {})  # a subgraph reads its outer scope's weights
        self.constants.update({i.name: to_array(i) for i in graph.initializer})
        for n in graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.constants[n.output[0]] = to_array(n.attribute[0].t)
        self.outputs = {o.name for o in graph.output}
        # Static last-axis sizes where shape inference recorded them (for split weights).
        self.last_dim = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            dims = vi.type.tensor_type.shape.dim
            if dims and dims[-1].HasField("dim_value"):
                self.last_dim[vi.name] = int(dims[-1].dim_value)
        self.last_dim.update({k: int(v.shape[-1]) for k, v in self.constants.items() if v.ndim})

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


def graphs(graph: Any, outer: dict[str, np.ndarray] | None = None) -> Iterator[tuple[Any, dict[str, np.ndarray]]]:
    """The graph and every subgraph (If/Loop/Scan bodies, nested), each with the constants
    of its enclosing scopes."""
    from rnnx.formats.onnx_read import to_array

    yield graph, dict(outer or {})
    scope = dict(outer or {})
    scope.update({i.name: to_array(i) for i in graph.initializer})
    for node in graph.node:
        for a in node.attribute:
            if a.type == a.GRAPH:
                yield from graphs(a.g, scope)
            for g in a.graphs:
                yield from graphs(g, scope)


def all_graphs(graph: Any) -> Iterator[Any]:
    """The graph and every subgraph, nested, without their constants (cheap: no weight is read)."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == a.GRAPH:
                yield from all_graphs(a.g)
            for g in a.graphs:
                yield from all_graphs(g)


def _names_read_below(graph: Any) -> set[str]:
    """Every tensor name read by a node of a subgraph of ``graph``, however deep."""
    names: set[str] = set()
    for node in graph.node:
        for a in node.attribute:
            for sub in ([a.g] if a.type == a.GRAPH else []) + list(a.graphs):
                names |= {i for n in sub.node for i in n.input} | _names_read_below(sub)
    return names


def remove_dead(graph: Any) -> None:
    live = {o.name for o in graph.output} | _names_read_below(graph)  # subgraphs read outer names
    changed = True
    nodes = list(graph.node)
    while changed:
        used = live | {i for n in nodes for i in n.input}
        keep = [n for n in nodes if any(o in used for o in n.output)]
        changed = len(keep) != len(nodes)
        nodes = keep
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input} | live
    inits = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)


def toposort(graph: Any) -> None:
    """Order nodes so that each comes after its producers, keeping the given order where it
    already is one (Kahn's algorithm, the lowest original position first: linear in the
    graph's size up to the heap's log)."""
    import heapq

    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [0] * len(nodes)
    readers: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        for p in {producer[name] for name in n.input if name in producer and producer[name] != i}:
            waiting[i] += 1
            readers[p].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in readers[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(nodes):  # a cycle: not a valid graph; keep the rest in their order
        placed = set(order)
        order += [i for i in range(len(nodes)) if i not in placed]
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)


def rewrite(graph: Any, removed: set[int], added: Iterable[Any], initializers: Iterable[Any] = ()) -> None:
    """Drop the nodes whose ids are in ``removed``, add ``added``, then drop what became
    dead and restore topological order."""
    kept = [n for n in graph.node if id(n) not in removed]
    del graph.node[:]
    graph.node.extend(kept + list(added))
    graph.initializer.extend(initializers)
    remove_dead(graph)
    toposort(graph)
