"""A read-only index over an ONNX graph, and the one way passes rewrite it.

The passes work on the protobuf through this index: tensors by name, nodes by ``id``, never
by comparing messages, so that building it, every lookup and each rewrite cost time in
proportion to the graph's size (a 1,000-step unrolled cell is 18,000 nodes).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnx.formats.onnx_read import to_array, value_dims


class _Constants(Mapping[str, np.ndarray]):
    """A graph's constants by name (its scope's, its initializers, its Constant nodes' values,
    each shadowing the last), each read from its TensorProto on first use: a pass looks at few
    of them, and an unrolled graph holds thousands."""

    def __init__(self, outer: Mapping[str, np.ndarray] | None) -> None:
        self._arrays: dict[str, np.ndarray] = dict(outer or {})
        self._protos: dict[str, Any] = {}

    def add(self, name: str, tensor: Any) -> None:
        self._arrays.pop(name, None)
        self._protos[name] = tensor

    def put(self, name: str, value: np.ndarray) -> None:
        """``name`` holds ``value`` in this scope (a Loop body's input that carries an outer constant unchanged)."""
        self._protos.pop(name, None)
        self._arrays[name] = value

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._arrays.get(name)
        if found is None:
            found = self._arrays[name] = to_array(self._protos.pop(name))
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._arrays or name in self._protos

    def __iter__(self) -> Iterator[str]:
        yield from self._arrays
        yield from list(self._protos)

    def __len__(self) -> int:
        return len(self._arrays) + len(self._protos)

    def last_dims(self) -> dict[str, int]:
        """The last-axis size of every constant that has axes, read without its values."""
        found = {k: int(v.shape[-1]) for k, v in self._arrays.items() if v.ndim}
        found.update({k: int(t.dims[-1]) for k, t in self._protos.items() if len(t.dims)})
        return found


class GraphIndex:
    """Producers, consumers and constants of one graph, looked up by tensor name."""

    def __init__(self, graph: Any, outer_constants: dict[str, np.ndarray] | None = None) -> None:
        self.graph = graph
        # One list of the node objects, held for the index's life: protobuf hands out one Python
        # object per node while some reference to it lives, so ids identify nodes in O(1).
        self.nodes: list[Any] = list(graph.node)
        self.position = {id(n): k for k, n in enumerate(self.nodes)}  # graph order, for sorting found nodes
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.consumers[i].append(n)
        self.constants = _Constants(outer_constants)  # a subgraph reads its outer scope's weights
        for i in graph.initializer:
            self.constants.add(i.name, i)
        for n in self.nodes:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.constants.add(n.output[0], n.attribute[0].t)
        self.outputs = {o.name for o in graph.output}
        self.output_order = [o.name for o in graph.output]
        self.input_order = [i.name for i in graph.input if i.name not in self.constants]
        # A Loop or Scan body's state: each carried input's name -> the output that carries its
        # next value (set by the pass that knows which node holds the body).
        self.carried: dict[str, str] = {}
        self._digests: dict[str, bytes] = {}

    @functools.cached_property
    def last_dim(self) -> dict[str, int]:
        """Static last-axis sizes where shape inference recorded them (to split the weights of a
        product over a Concat); read on first use, as few graphs need it."""
        found = {}
        for vi in list(self.graph.input) + list(self.graph.value_info) + list(self.graph.output):
            last = value_dims(vi, unnamed=None)[-1:]
            if last and isinstance(last[0], int):
                found[vi.name] = last[0]
        found.update(self.constants.last_dims())
        return found

    def digest(self, name: str) -> bytes:
        """A digest of constant ``name``'s dtype, shape and values, computed once per name: steps
        of one cell read the same weights, and comparing them each time would cost a step's
        weights per step."""
        found = self._digests.get(name)
        if found is None:
            value = np.ascontiguousarray(self.constants[name])
            found = hashlib.blake2b(f"{value.dtype.str}{value.shape}".encode() + value.tobytes(), digest_size=16).digest()
            self._digests[name] = found
        return found

    def prod(self, name: str, op_type: str) -> Any:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def through(self, name: str, ops: tuple[str, ...] = ("Identity",)) -> str:
        """Back from ``name`` through the first inputs of ``ops`` (at most 16 of them)."""
        for _ in range(16):
            node = self.producer.get(name)
            if node is None or node.op_type not in ops:
                break
            name = node.input[0]
        return name

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


# The default domain's ops that hold graphs; other domains' ops may hold them too. Looking at
# these nodes' attributes only, not every node's, keeps a walk of an 18k-node graph cheap.
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def _subgraphs(graph: Any) -> Iterator[Any]:
    """The graphs held directly by ``graph``'s nodes (If branches, Loop and Scan bodies)."""
    for node in graph.node:
        if node.op_type not in _CONTROL_FLOW and node.domain in ("", "ai.onnx"):
            continue
        for a in node.attribute:
            if a.type == a.GRAPH:
                yield a.g
            yield from a.graphs


def graphs(graph: Any, outer: dict[str, np.ndarray] | None = None) -> Iterator[tuple[Any, dict[str, np.ndarray]]]:
    """The graph and every subgraph (If/Loop/Scan bodies, nested), each with the constants
    of its enclosing scopes."""
    yield graph, dict(outer or {})
    scope: dict[str, np.ndarray] | None = None
    for sub in _subgraphs(graph):
        if scope is None:  # read the weights only for a graph that has subgraphs
            scope = dict(outer or {})
            scope.update({i.name: to_array(i) for i in graph.initializer})
        yield from graphs(sub, scope)


@dataclass
class Carried:
    """A Loop's or Scan's body as its node binds it: each carried input -> the output that
    carries its next value, and each body input -> the outer tensor that starts it."""

    body: Any
    pairs: dict[str, str]
    outer_of: dict[str, str]

    def invariants(self) -> dict[str, str]:
        """Carried inputs passed on unchanged (tf2onnx carries a cell's weights so): body input -> outer tensor."""
        identity = {n.output[0]: n.input[0] for n in self.body.node if n.op_type == "Identity"}
        return {i: self.outer_of[i] for i, o in self.pairs.items() if identity.get(o, o) == i and self.outer_of.get(i)}


def carried_state(node: Any) -> Carried | None:
    """A Loop's or Scan's body and its loop-carried pairs (body input -> body output), or None."""
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None or node.domain not in ("", "ai.onnx"):
        return None
    ins, outs = [i.name for i in body.input], [o.name for o in body.output]
    if node.op_type == "Loop":  # inputs: iteration, condition, state...; outputs: condition, state..., scans
        return Carried(body, dict(zip(ins[2:], outs[1:])), dict(zip(ins[2:], node.input[2:])))
    if node.op_type == "Scan":  # inputs: state..., scan inputs; outputs: state..., scan outputs
        n_state = len(node.input) - next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
        return Carried(body, dict(zip(ins[:n_state], outs[:n_state])), dict(zip(ins, node.input)))
    return None


def name_dynamic_axes(graph: Any, axes: dict[tuple[str, int], str]) -> None:
    """Give graph inputs' dynamic axes a name that says what they are, ``(input, axis) -> name``
    (``batch``, ``seq``: tf2onnx writes ``unk__N``), wherever the graph uses the old name. A
    fused node reads its input and its states with one batch, so their batch axes are one."""
    inputs = {vi.name: vi for vi in graph.input}
    rename: dict[str, str] = {}
    for (name, axis), label in axes.items():
        dims = value_dims(inputs[name], unnamed=None) if name in inputs else []
        named = dims[axis] if axis < len(dims) else None
        if isinstance(named, str):
            rename.setdefault(named, label)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in rename:
                d.dim_param = rename[d.dim_param]


def all_graphs(graph: Any) -> Iterator[Any]:
    """The graph and every subgraph, nested, without their constants (cheap: no weight is read)."""
    yield graph
    for sub in _subgraphs(graph):
        yield from all_graphs(sub)


def _names_read_below(graph: Any) -> set[str]:
    """Every tensor name read by a node of a subgraph of ``graph``, however deep."""
    names: set[str] = set()
    for sub in _subgraphs(graph):
        names |= {i for n in sub.node for i in n.input} | _names_read_below(sub)
    return names


def _implicit_inputs(node: Any) -> set[str]:
    """The names the graphs ``node`` holds read (a Loop body reads weights from outside): the
    node depends on their producers as on its inputs."""
    if node.op_type not in _CONTROL_FLOW and node.domain in ("", "ai.onnx"):
        return set()
    names: set[str] = set()
    for a in node.attribute:
        for sub in ([a.g] if a.type == a.GRAPH else []) + list(a.graphs):
            names |= {i for n in sub.node for i in n.input} | _names_read_below(sub)
    return names


def _live(nodes: list[Any], live: set[str]) -> list[Any]:
    """The nodes that ``live`` names depend on, in their given order: a walk back from those
    names, each node visited once."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    keep = [False] * len(nodes)
    pending = [producer[name] for name in live if name in producer]
    while pending:
        k = pending.pop()
        if keep[k]:
            continue
        keep[k] = True
        pending.extend(producer[i] for i in [*nodes[k].input, *_implicit_inputs(nodes[k])] if i in producer)
    return [n for n, kept in zip(nodes, keep) if kept]


def _ordered(nodes: list[Any]) -> list[Any]:
    """``nodes`` so that each comes after its producers, keeping the given order where it
    already is one (Kahn's algorithm, the lowest original position first: linear in the
    graph's size up to the heap's log). A cycle (not a valid graph) keeps its given order."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [0] * len(nodes)
    readers: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        for p in {producer[name] for name in [*n.input, *_implicit_inputs(n)] if name in producer and producer[name] != i}:
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
    if len(order) < len(nodes):
        placed = set(order)
        order += [i for i in range(len(nodes)) if i not in placed]
    return [nodes[i] for i in order]


def _write(graph: Any, nodes: list[Any], live: set[str]) -> None:
    """Replace ``graph``'s nodes by ``nodes`` and drop the initializers nothing reads. Writing
    a repeated field copies every message, so each rewrite writes the nodes once."""
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input} | live
    if any(i.name not in used for i in graph.initializer):
        inits = [i for i in graph.initializer if i.name in used]
        del graph.initializer[:]
        graph.initializer.extend(inits)


def _live_names(graph: Any) -> set[str]:
    return {o.name for o in graph.output} | _names_read_below(graph)  # subgraphs read outer names


def rewrite(graph: Any, removed: set[int], added: Iterable[Any], initializers: Iterable[Any] = ()) -> None:
    """Drop the nodes whose ids are in ``removed``, add ``added``, then drop what became
    dead and restore topological order."""
    graph.initializer.extend(initializers)
    added = list(added)
    live = _live_names(graph).union(*(_implicit_inputs(n) for n in added))  # what the added nodes' bodies read lives too
    nodes = [n for n in graph.node if id(n) not in removed] + added
    _write(graph, _ordered(_live(nodes, live)), live)
