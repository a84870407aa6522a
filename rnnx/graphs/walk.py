"""Following a tensor through a graph: back to where it comes from, forward to where it goes,
passing only through the ops a caller names (shape-only ops, casts)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

_MAX_HOPS = 64  # a longer chain of reshapes is not a path worth following


def producers_of(graph: Any) -> dict[str, Any]:
    return {o: n for n in graph.node for o in n.output if o}


def consumers_of(graph: Any) -> dict[str, list[Any]]:
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return consumers


def swaps_first_axes(node: Any) -> bool:
    """A Transpose whose permutation exchanges the first two axes (time-major <-> batch-major)."""
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), [])
    return node.op_type == "Transpose" and perm[:2] == [1, 0]


def back(name: str, producers: dict[str, Any], through: Collection[str]) -> tuple[str | None, int]:
    """Where ``name`` comes from, following the first input of ops in ``through``: the name
    reached (None if an op outside ``through`` computes it) and how many first-axes swaps
    lay on the way."""
    swaps = 0
    for _ in range(_MAX_HOPS):
        node = producers.get(name)
        if node is None:
            return name, swaps
        if node.op_type not in through or not node.input:
            return None, swaps
        swaps += swaps_first_axes(node)
        name = node.input[0]
    return None, swaps


def forward(name: str, consumers: dict[str, list[Any]], through: Collection[str] | None, ends: set[str]) -> list[str]:
    """The names in ``ends`` that ``name`` reaches through ops in ``through`` (any op: None)."""
    found, stack, seen = [], [name], set()
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        if value in ends:
            found.append(value)
        for node in consumers.get(value, []):
            if through is None or node.op_type in through:
                stack.extend(o for o in node.output if o)
    return found
