"""What a rewrite leaves behind and nothing reads: initializers, nodes and value_info.

A lowered or fused recurrence's old weights would otherwise ship in the file a second time
(twice the flash and the load time on a device), and ONNX Runtime logs each one it removes.
A name is read when any node of any graph (subgraphs included: a body may read an outer
tensor by name) takes it as an input, or a graph returns it.

Every ONNX file rnnx writes goes through :func:`rnnx.formats.onnx_build.write_model`, which
prunes first: no pass (export, convert, fuse, lower, legalize) can leave dead weights behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


def all_graphs(graph: Any) -> Iterator[Any]:
    """The graph and every subgraph of its nodes' attributes, however deep."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from all_graphs(attr.g)
            for sub in attr.graphs:
                yield from all_graphs(sub)


@dataclass
class Pruned:
    initializers: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    value_info: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.initializers or self.nodes or self.value_info)


def _read_names(graphs: list[Any]) -> set[str]:
    read = {o.name for g in graphs for o in g.output}
    for g in graphs:
        for node in g.node:
            read.update(i for i in node.input if i)
    return read


def prune(proto: Any) -> Pruned:
    """Remove, in place, every node whose outputs nothing reads (until none is left), then every
    initializer and value_info entry nothing reads or produces; returns what went."""
    graphs = list(all_graphs(proto.graph))
    pruned = Pruned()
    while True:  # a dead node can leave its producers dead: repeat until nothing changes
        read = _read_names(graphs)
        removed = False
        for g in graphs:
            keep = [n for n in g.node if any(o in read for o in n.output if o)]
            if len(keep) != len(g.node):
                pruned.nodes += [n.name or n.op_type for n in g.node if not any(o in read for o in n.output if o)]
                del g.node[:]
                g.node.extend(keep)
                removed = True
        if not removed:
            break
    read = _read_names(graphs)
    produced = {o for g in graphs for n in g.node for o in n.output} | {i.name for g in graphs for i in g.input}
    for g in graphs:
        inputs = {i.name for i in g.input}
        keep = [t for t in g.initializer if t.name in read or t.name in inputs]
        if len(keep) != len(g.initializer):
            pruned.initializers += [t.name for t in g.initializer if t not in keep]
            del g.initializer[:]
            g.initializer.extend(keep)
        alive = read | produced | {t.name for t in g.initializer}
        info = [v for v in g.value_info if v.name in alive]
        if len(info) != len(g.value_info):
            pruned.value_info += [v.name for v in g.value_info if v.name not in alive]
            del g.value_info[:]
            g.value_info.extend(info)
    return pruned
