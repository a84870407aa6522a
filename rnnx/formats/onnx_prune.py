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


def _drop(field: Any, dead: list[int]) -> None:
    """Delete entries of a repeated field by index, in place: the others (a Scan node and its
    body among them) stay the same objects, so graphs collected before remain the model's."""
    for i in reversed(dead):
        del field[i]


def prune(proto: Any) -> Pruned:
    """Remove, in place, every node whose outputs nothing reads (until none is left), then every
    initializer and value_info entry nothing reads or produces; returns what went."""
    pruned = Pruned()
    while True:  # a dead node can leave its producers dead: repeat until nothing changes
        graphs = list(all_graphs(proto.graph))
        read = _read_names(graphs)
        removed = False
        for g in graphs:
            dead = [k for k, n in enumerate(g.node) if not any(o in read for o in n.output if o)]
            if dead:
                pruned.nodes += [g.node[k].name or g.node[k].op_type for k in dead]
                _drop(g.node, dead)
                removed = True
        if not removed:
            break
    graphs = list(all_graphs(proto.graph))
    read = _read_names(graphs)
    produced = {o for g in graphs for n in g.node for o in n.output} | {i.name for g in graphs for i in g.input}
    for g in graphs:
        inputs = {i.name for i in g.input}
        dead = [k for k, t in enumerate(g.initializer) if t.name not in read and t.name not in inputs]
        pruned.initializers += [g.initializer[k].name for k in dead]
        _drop(g.initializer, dead)
        alive = read | produced | {t.name for t in g.initializer}
        dead = [k for k, v in enumerate(g.value_info) if v.name not in alive]
        pruned.value_info += [g.value_info[k].name for k in dead]
        _drop(g.value_info, dead)
    return pruned
