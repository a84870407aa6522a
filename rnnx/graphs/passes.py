"""Graph passes as rules and a runner, the shape of onnxscript's rewriter.

A pass is a rule over a whole graph: its *pattern* finds the candidates (a decomposed cell, a
Loop over one step, a chain of steps), its *check* turns each into a plan (a named dataclass
per pass: what it found and what it will write, with the :class:`Edit` that writes it) or a
:class:`~rnnx.pass_result.Declined` naming the rule that failed, and its *rewrite* applies the
plans. The runner takes the passes' order as data (a tuple of :class:`GraphPass`) and repeats
it to a fixed point, since one pass's rewrite can enable another's: an earlier pass runs again
once a later one has changed the graph after it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rnnx import progress
from rnnx.pass_result import Declined, PassResult

__all__ = ["Edit", "GraphPass", "Pass", "Passes", "run_passes"]


@dataclass
class Edit:
    """What one plan does to its graph: the nodes and initializers it adds, and the ids of the
    nodes it makes dead (removed together with the rest of the pass's plans)."""

    nodes: list[Any] = field(default_factory=list)
    initializers: list[Any] = field(default_factory=list)
    removed: set[int] = field(default_factory=set)


class Pass(Protocol):
    """A rule over a whole model: rewrites every candidate it accepts, in place, and says what
    it rewrote and what it left alone. ``step``: its progress line ("" for none)."""

    @property
    def name(self) -> str: ...

    @property
    def step(self) -> str: ...

    def __call__(self, model: Any) -> PassResult[Any]: ...


@dataclass(frozen=True)
class GraphPass:
    """One named pass: ``name`` files its results (fuse's report and JSON read them by it),
    ``step`` is the progress line shown before its first run ("" for none)."""

    name: str
    run: Callable[[Any], PassResult[Any]]
    step: str = ""

    def __call__(self, model: Any) -> PassResult[Any]:
        return self.run(model)


@dataclass
class Passes:
    """Each pass's results by name, in the order given: ``rewritten`` gathers every run's
    plans, ``left_alone`` is what its last run (on the final graph) declined. ``rounds`` counts
    the sweeps over the order that ran a pass; ``converged`` is False where the bound stopped it."""

    order: tuple[str, ...]
    results: dict[str, PassResult[Any]]
    rounds: int = 0
    converged: bool = True

    def __getitem__(self, name: str) -> PassResult[Any]:
        return self.results[name]

    @property
    def changed(self) -> bool:
        return any(self.results[n] for n in self.order)

    @property
    def left_alone(self) -> list[Declined]:
        found = [d for n in self.order for d in self.results[n].left_alone]
        if not self.converged:
            found.append(Declined("passes.fixed_point", f"the passes still changed the graph after {self.rounds} rounds "
                                  "(a pass undoing another's work); the graph is left as the last round wrote it"))
        return found


def default_rounds(order: Sequence[Pass]) -> int:
    """The most sweeps :func:`run_passes` makes over ``order``. Each productive sweep lifts some
    recurrence one level (decomposed cell -> one-step node -> node over the sequence ->
    bidirectional node: no rewrite goes back down), and a sweep can only be needed again when
    a later pass lifted something an earlier one reads; so a graph takes at most one sweep per
    pass, and one more finds nothing left. Past that, two passes are undoing each other (a
    bug), which would otherwise loop forever: the bound keeps fuse's time finite, and the
    rewrite check still runs what was written against the input."""
    return len(order) + 1


def run_passes(model: Any, order: Sequence[Pass], max_rounds: int | None = None) -> Passes:
    """Run ``order`` over ``model`` (in place) until no pass changes it, at most ``max_rounds``
    sweeps (:func:`default_rounds`). A pass is skipped where the graph has not changed since it
    last ran: it would find what it found then."""
    names = tuple(p.name for p in order)
    if len(set(names)) != len(names):
        raise ValueError(f"pass order: expected distinct names, found {list(names)}")
    done = Passes(names, {p.name: PassResult() for p in order})
    bound = default_rounds(order) if max_rounds is None else max_rounds
    version = 0  # how many runs have changed the graph
    seen: dict[str, int] = {}  # a pass's name -> the version it last ran on
    while any(seen.get(p.name) != version for p in order):
        if done.rounds == bound:
            done.converged = False
            break
        done.rounds += 1
        for p in order:
            if seen.get(p.name) == version:
                continue
            if p.name not in seen and p.step:
                progress.step(p.step)
            seen[p.name] = version  # a pass that changes the graph runs again: its rewrite may enable its own pattern
            result = p(model)
            done.results[p.name].rewritten += result.rewritten
            done.results[p.name].left_alone = list(result.left_alone)
            if result.changed:
                version += 1
    return done
