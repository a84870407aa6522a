"""What a graph pass did, in one type for every pass: what it rewrote, and each candidate it
left alone with the rule that declined it and why.

It sits in the core so that every layer that rewrites graphs (rnnx.formats' Scan builder as
well as rnnx.graphs' passes) can return it. Like onnxscript's rewriter, a rule's check
returns a :class:`Declined` instead of raising, and the pass collects them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

__all__ = ["Declined", "PassResult"]

T = TypeVar("T")


@dataclass(frozen=True)
class Declined:
    """A candidate a rule turned down: ``rule`` names the check that failed (``"lstm.output"``),
    ``reason`` says in words what was found, ``node`` which candidate it was."""

    rule: str
    reason: str
    node: str = ""

    def at(self, node: str) -> Declined:
        """The same refusal, naming the candidate (a matcher knows the rule; the pass knows the node)."""
        return replace(self, node=node)

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "rule": self.rule, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.node}: {self.reason}" if self.node else self.reason


@dataclass
class PassResult(Generic[T]):
    """What one pass rewrote (its own description of each rewrite: a node name, a record) and
    what it left alone and why. True when the graph changed."""

    rewritten: list[T] = field(default_factory=list)
    left_alone: list[Declined] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.rewritten)

    def __bool__(self) -> bool:
        return self.changed
