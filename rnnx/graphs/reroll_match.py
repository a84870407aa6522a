"""The steps of a loop a trace unrolled, told apart and matched node for node.

An unrolled loop over a sequence S reads step t of S (:mod:`rnnx.graphs.time_slice`) once per
step. Every node gets the step of the latest slice it depends on (-1: the *prelude*, which
depends on none). Step k's *region* is every node of step k. Step 1's region is the
*template*; every other step must be the template again, node for node:

- the same op type, domain and attributes;
- each input wired the same way: to the step's own slice of S, to the step's own result
  (*local*), to the last step's result (a *carried* value: what step 1 reads of step 0, step
  k reads of step k-1, the same template value each time), or to the prelude (an
  *invariant*: a weight, the encoder's outputs), the same value each time: the same tensor,
  a constant of the same values or the same computation on them.

Step 0 reads the carried values' initial values from the prelude (a zero state the
exporter made a constant). The last step's region holds the step and what follows the loop
(the *epilogue*: the stack of per-step outputs, heads on the final state): what matches the
template is the step, the rest is epilogue. A template node the last step lacks is allowed
when it only feeds the next step (a projection of h that the next step's code computes
first): the loop computes it once more and nothing reads it.

A step that differs is refused (``reroll.same_step``) with what differs: another op (a
branch on the step), another weight (a weight chosen by the step), other attributes.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.graphs.index import GraphIndex
from rnnx.graphs.time_slice import time_slice
from rnnx.pass_result import Declined

PRELUDE = -1


@dataclass
class Unrolled:
    """Which step each node belongs to, for one group of sequences sliced T times."""

    T: int
    sources: set[tuple[str, int]]  # (S, axis) of each sequence the steps slice
    step_of: dict[int, int]  # id(node) -> step, PRELUDE when it depends on no slice
    regions: list[list[Any]]  # each step's nodes, graph order
    slices: dict[int, tuple[str, int, int]]  # id(slice node) -> (S, step, axis)
    reverse: bool = False  # step k reads t = T-1-k (``for t in reversed(range(T))``)


def partition(g: GraphIndex, T: int, sources: set[tuple[str, int]],
              find: Callable[[GraphIndex, str], tuple[str, int, int] | None] = time_slice, reverse: bool = False) -> Unrolled:
    """Each node's step: its own step for a slice of a source, else the latest of its inputs'.
    ``find`` reads a slice as (S, t, axis): one step (``x[:, t]``), or one segment; the step
    is t, or T-1-t where the loop runs backwards (``reverse``)."""
    step_of: dict[int, int] = {}
    slices: dict[int, tuple[str, int, int]] = {}
    regions: list[list[Any]] = [[] for _ in range(T)]
    for node in g.nodes:
        found = find(g, node.output[0]) if node.output else None
        if found is not None and (found[0], found[2]) in sources:
            step = T - 1 - found[1] if reverse else found[1]
            slices[id(node)] = (found[0], step, found[2])
        else:
            step = max((step_of.get(id(g.producer[i]), PRELUDE) for i in node.input if i in g.producer), default=PRELUDE)
        step_of[id(node)] = step
        if step >= 0:
            regions[step].append(node)
    return Unrolled(T, sources, step_of, regions, slices, reverse)


def oriented(g: GraphIndex, T: int, sources: set[tuple[str, int]]) -> Unrolled:
    """The steps in the order the loop ran them. Numbered by t, a loop that runs backwards has
    every step's work at step T-1 (each reads the state of the slice after it) and step 1 holds
    its slice alone; numbered from the end, a forward loop does. The order whose step 1 holds
    more of the step is the loop's (forward on a tie)."""
    forward, backward = partition(g, T, sources), partition(g, T, sources, reverse=True)
    return backward if len(backward.regions[1]) > len(forward.regions[1]) else forward


def by_dependency(g: GraphIndex, sources: set[tuple[str, int]]) -> list[set[tuple[str, int]]]:
    """``sources`` (sliced the same number of times) split into loops: those whose values
    depend on the same sources' slices read by one loop. Where one loop's stacked output is the
    next loop's sequence (two recurrent layers, each a Python loop), the second's sequence
    depends on the first's slices: two loops, the first first."""
    deps: dict[str, frozenset[tuple[str, int]]] = {}
    for node in g.nodes:
        found = time_slice(g, node.output[0]) if node.output else None
        mine = frozenset().union(*(deps.get(i, frozenset()) for i in node.input if i))
        if found is not None and (found[0], found[2]) in sources:
            mine |= {(found[0], found[2])}
        for o in node.output:
            deps[o] = mine
    loops: dict[frozenset[tuple[str, int]], set[tuple[str, int]]] = {}
    for S, axis in sources:
        loops.setdefault(deps.get(S, frozenset()), set()).add((S, axis))
    return [loops[key] for key in sorted(loops, key=len)]  # a loop depends on more sources than any loop it reads


def _attrs(node: Any) -> tuple[Any, ...]:
    return tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute))


class Keys:
    """A digest of what each prelude tensor holds: a constant's values, a graph input's name,
    or an op on such digests. Steps that each compute ``W.t()`` or ``Shape(enc)`` read the
    same value under different names; computed on demand, without recursion (a prelude may
    hold a whole unrolled encoder)."""

    def __init__(self, g: GraphIndex) -> None:
        self.g = g
        self._keys: dict[str, bytes] = {}

    def __call__(self, name: str) -> bytes:
        pending = [name]
        while pending:
            t = pending[-1]
            if t in self._keys:
                pending.pop()
                continue
            node = self.g.producer.get(t)
            if t in self.g.constants:
                self._keys[t] = b"c" + self.g.digest(t)
            elif node is None:
                self._keys[t] = hashlib.blake2b(b"i" + t.encode(), digest_size=16).digest()
            else:
                todo = [i for i in node.input if i and i not in self._keys]
                if todo:
                    pending.extend(todo)
                    continue
                if node.op_type == "Identity":  # TorchScript reads a weight through an Identity in every call but the first
                    self._keys[t] = self._keys[node.input[0]]
                    pending.pop()
                    continue
                h = hashlib.blake2b(repr((node.op_type, node.domain, _attrs(node), list(node.output).index(t))).encode(), digest_size=16)
                for i in node.input:
                    h.update(self._keys[i] if i else b"-")
                self._keys[t] = h.digest()
            pending.pop()
        return self._keys[name]


@dataclass
class Steps:
    """The template (step 1's nodes) and, for every step, where each template tensor is."""

    template: list[Any]
    maps: list[dict[str, str]]  # step k: template tensor -> step k's tensor
    matched: list[set[int]]  # step k: ids of its nodes that are the step (the rest of the last step is epilogue)
    carried: dict[str, str] = field(default_factory=dict)  # value step 1 reads of step 0 -> the template value step 2 reads there
    initial: dict[str, str] = field(default_factory=dict)  # value step 1 reads of step 0 -> the prelude value step 0 reads there
    missing: set[int] = field(default_factory=set)  # ids of template nodes the last step lacks
    before: set[int] = field(default_factory=set)  # ids of step 0's nodes that compute initial values (kept ahead of the Loop)


def _same_outputs(tnode: Any, cand: Any, last: bool) -> bool:
    """Whether ``cand`` has the template node's outputs; the last step's may lack some (an
    exporter drops the last cell's c, which only the next step would read)."""
    if len(cand.output) > len(tnode.output):
        return False
    if last:
        return all(t for t, c in zip(tnode.output, cand.output) if c)
    return [bool(o) for o in cand.output] == [bool(o) for o in tnode.output]


def _describe(g: GraphIndex, name: str) -> str:
    if name in g.constants and g.producer.get(name) is None:
        return f"initializer {name!r}"
    return f"{name!r}"


class Matcher:
    """Matches every step's region against the template (step 1's region)."""

    def __init__(self, g: GraphIndex, u: Unrolled, peeled: bool = False) -> None:
        self.g, self.u, self.keys = g, u, Keys(g)
        self.peeled = peeled  # step 0 stays in the graph as traced (a loop over segments): its initial values are its own affair
        self.template = u.regions[1]
        self.local = {o for n in self.template for o in n.output if o}

    def _kind(self, name: str) -> tuple[str, Any]:
        if not name:
            return "none", None
        if name in self.local:
            return "local", name
        node = self.g.producer.get(name)
        step = self.u.step_of.get(id(node), PRELUDE) if node is not None else PRELUDE
        if step == 0:
            return "prev", name
        return "pre", self.keys(name)

    def _sig(self, node: Any) -> tuple[Any, ...]:
        found = self.u.slices.get(id(node))
        if found is not None:
            return ("slice", found[0], found[2])
        return (node.op_type, node.domain, _attrs(node), len(node.input))

    def _fits(self, tnode: Any, cand: Any, k: int, steps: Steps, binds: dict[str, str]) -> bool:
        """Whether step k's ``cand`` is template node ``tnode`` there; free carried values it
        reads the first time are bound in ``binds``."""
        if id(tnode) in self.u.slices:
            return self.u.slices[id(cand)][1] == k
        if not _same_outputs(tnode, cand, last=k == self.u.T - 1):
            return False
        maps = steps.maps
        for ti, ci in zip(tnode.input, cand.input):
            kind, what = self._kind(ti)
            if kind == "none":
                if ci:
                    return False
            elif kind == "local":
                if maps[k].get(what) != ci:
                    return False
            elif kind == "pre":
                cnode = self.g.producer.get(ci)
                if (cnode is not None and self.u.step_of.get(id(cnode), PRELUDE) != PRELUDE) or self.keys(ci) != what:
                    return False
            elif k >= 3 or (k == 2 and what in steps.carried):
                if maps[k - 1].get(steps.carried.get(what, "")) != ci:
                    return False
            elif k == 2:  # step 2 says which template value each carried one is next
                if ci not in self.local or binds.setdefault(what, ci) != ci:
                    return False
            else:  # step 0: the initial value, from the prelude or step 0's own slices (``m = x[:, 0]``)
                cnode = self.g.producer.get(ci)
                if self.peeled:
                    continue
                if cnode is not None and self.u.step_of.get(id(cnode), PRELUDE) != PRELUDE and not self._before_step(cnode, steps):
                    return False
                bound = steps.initial.get(what) or binds.get(what)
                if bound is None:
                    binds[what] = ci
                elif self.keys(bound) != self.keys(ci):
                    return False
        return True

    def _before_step(self, node: Any, steps: Steps) -> bool:
        """Whether step 0's ``node`` can be an initial value: computed from step 0's slices and
        the prelude alone, through no node step 0 matched to the template (else the state
        would depend on its own step). Its nodes join ``steps.before``, kept ahead of the Loop."""
        seen: set[int] = set()
        pending = [node]
        while pending:
            n = pending.pop()
            if id(n) in seen or id(n) in steps.before:
                continue
            if id(n) in steps.matched[0] and id(n) not in self.u.slices:
                return False
            seen.add(id(n))
            for i in n.input:
                p = self.g.producer.get(i)
                if p is not None and self.u.step_of.get(id(p), PRELUDE) == 0:
                    pending.append(p)
        steps.before |= seen
        return True

    def match(self, k: int, steps: Steps) -> Declined | None:
        """Fill ``steps.maps[k]`` and ``steps.matched[k]``, or say where step k differs."""
        last = k == self.u.T - 1
        by_sig: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
        for node in self.u.regions[k]:
            by_sig[self._sig(node)].append(node)
        mapping, used = steps.maps[k], steps.matched[k]
        for tnode in self.template:
            kinds = [self._kind(i) for i in tnode.input]
            if last and any(kind == "local" and what not in mapping for kind, what in kinds):
                steps.missing.add(id(tnode))  # it reads what the last step lacks
                continue
            found = None
            # an unused node first; else one already matched: where two template nodes compute
            # the same value at step k (h and c both start as one zero tensor, so ``h * keep``
            # and ``c * keep`` are one node after the exporter's CSE), one node is both
            cands = by_sig.get(self._sig(tnode), [])
            for cand in sorted(cands, key=lambda n: id(n) in used):
                binds: dict[str, str] = {}
                if self._fits(tnode, cand, k, steps, binds):
                    found = cand
                    (steps.carried if k == 2 else steps.initial).update(binds)
                    break
            if found is None:
                if last:
                    steps.missing.add(id(tnode))
                    continue
                return Declined("reroll.same_step", self._difference(tnode, k, steps))
            used.add(id(found))
            mapping.update((t, c) for t, c in zip(tnode.output, found.output) if t and c)
        looped = [n for n in self.u.regions[k] if k == 0 and id(n) in steps.before and id(n) in used and id(n) not in self.u.slices]
        if looped:
            n = looped[0]
            return Declined("reroll.same_step", f"step 0's {n.op_type} {n.name or n.output[0]!r} is both part of the step and its initial state")
        extra = [n for n in self.u.regions[k] if id(n) not in used and not (k == 0 and (self.peeled or id(n) in steps.before))]
        if extra and not last:
            n = extra[0]
            return Declined("reroll.same_step", f"step {k} computes {n.op_type} {n.name or n.output[0]!r}, which step 1 does not "
                            "(a value used after the loop from one step only, or a branch on the step)")
        return None

    def _difference(self, tnode: Any, k: int, steps: Steps) -> str:
        """What step k has where the template has ``tnode``: the node reading the same inputs there."""
        where = f"step {k} differs from step 1"
        own = f"{tnode.op_type} {tnode.name or tnode.output[0]!r}"
        expected = set()
        for i in tnode.input:
            kind, what = self._kind(i)
            if kind == "local" and what in steps.maps[k]:
                expected.add(steps.maps[k][what])
            elif kind == "prev" and k >= 2 and what in steps.carried:
                expected.add(steps.maps[k - 1].get(steps.carried[what], ""))
        if id(tnode) in self.u.slices:
            return f"{where}: it reads no step {k} of {self.u.slices[id(tnode)][0]!r}"
        readers = [n for n in self.u.regions[k] if id(n) not in steps.matched[k] and expected & set(n.input)]
        if not readers:
            return f"{where}: it has no {own} (a loop whose steps read other values or other steps)"
        other = next((n for n in readers if n.op_type == tnode.op_type), readers[0])
        if other.op_type != tnode.op_type:
            return (f"{where}: it computes {other.op_type} {other.name or other.output[0]!r} where step 1 computes {own} "
                    "(a branch that depends on the step)")
        if _attrs(other) != _attrs(tnode):
            return f"{where}: its {other.op_type} {other.name!r} has other attributes than step 1's {own}"
        for ti, ci in zip(tnode.input, other.input):
            kind, what = self._kind(ti)
            if kind == "pre" and (not ci or self.keys(ci) != what):
                weights = ti in self.g.constants and ci in self.g.constants and np.asarray(self.g.constants[ti]).dtype.kind == "f"
                chosen = " (a weight chosen by the step)" if weights else ""
                return f"{where}: its {other.op_type} {other.name!r} reads {_describe(self.g, ci)} where step 1's {own} reads {_describe(self.g, ti)}, a different value{chosen}"
        return f"{where}: its {other.op_type} {other.name!r} is wired otherwise than step 1's {own} (it reads other steps' values)"


def difference(g: GraphIndex, u: Unrolled, steps: Steps, tnode: Any, k: int) -> str:
    """What step k has where the template has ``tnode``, in words (for a refusal)."""
    return Matcher(g, u)._difference(tnode, k, steps)


def match_steps(g: GraphIndex, u: Unrolled, peeled: bool = False) -> Steps | Declined:
    """Every step matched against step 1 (step 2 first: it says which values are carried,
    then steps 3.., then step 0, which binds their initial values). ``peeled``: step 0 stays
    in the graph, so what it reads as its initial state and what else it computes are free."""
    steps = Steps(template=u.regions[1], maps=[{} for _ in range(u.T)], matched=[set() for _ in range(u.T)])
    matcher = Matcher(g, u, peeled)
    for n in matcher.template:
        steps.matched[1].add(id(n))
        steps.maps[1].update((o, o) for o in n.output if o)
    for k in [*range(2, u.T), 0]:
        why = matcher.match(k, steps)
        if why is not None:
            return why
    return steps


def prev_reads(g: GraphIndex, u: Unrolled, template: list[Any]) -> list[str]:
    """The step-0 values step 1 reads (the carried values, named as step 0 has them), in order of first use."""
    found: dict[str, None] = {}
    for n in template:
        for i in n.input:
            p = g.producer.get(i)
            if p is not None and u.step_of.get(id(p)) == 0:
                found.setdefault(i)
    return list(found)
