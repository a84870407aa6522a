"""TensorRT's ONNX parser (onnx-tensorrt) applied to a model: the table of what its importers do
with each construct, in which TensorRT versions, with the source file, function and condition
each rule rests on, is :mod:`rnnx.engines.tensorrt_parser_rules` (data); this module holds the
tests that decide whether a node meets a row's condition, and walks a model.

Read from onnx-tensorrt's own source (``git show TAG:FILE`` on a mirror of
github.com/onnx/onnx-tensorrt, and GitHub's stored copy of ``main``), not from its
documentation, where the two disagree (``docs/operators.md`` says an LSTM's ``layout`` must
be 0; no importer reads ``layout``). Where a version's source was not read, the row says so;
TensorRT 11.x had no branch or tag in that source, so every 11.x verdict is "unknown".

Verdicts: ``accepted``; ``refused`` (the parser reports an error and builds nothing);
``builds but computes differently`` (the network builds, and computes something other than
the ONNX node as ONNX Runtime runs it: what differs is in the rule); ``unknown`` (the table
holds none of the conditions that decide, or the version's source was not read).

:func:`parser_verdicts` applies the table to every node of a model (subgraphs included) and
judges a recurrence rnnx lowered into Scans by those Scans (the record in ``rnnx.lowered``),
never by the native node's rule. :class:`ParserTable` is the same table for ``rnnx inspect``
(:mod:`rnnx.engines.acceptance`). A verdict is a prediction: nothing here builds an engine.

Each row key's test (does this node meet the row's condition) is
:mod:`rnnx.engines.tensorrt_conditions`; the table itself is data in
:mod:`rnnx.engines.tensorrt_parser_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rnnx.engines.tensorrt_conditions import _applies, _int, _Node
from rnnx.engines.tensorrt_parser_rules import _RANK, ACCEPTED, ALIASES, DEFAULT_VERSION, DIFFERS, KNOWN_VERSIONS, RULES, UNKNOWN, VERSIONS, ParserRule
from rnnx.engines.tensorrt_version import TensorRTVersion, bracket, read_columns
from rnnx.errors import RNNXError
from rnnx.formats.onnx_read import read_lowered
from rnnx.graphs.inspect import NodeReport


def rules_for(version: str) -> tuple[ParserRule, ...]:
    v = resolve_version(version)
    return tuple(r for r in RULES if v in r.versions)


def resolve_version(version: str | None) -> str:
    """``version`` as the table names it ("10.x" is 10.15, "10.0" reads as 10.1)."""
    v = DEFAULT_VERSION if version is None else str(version).strip()
    v = ALIASES.get(v, v)
    if v not in VERSIONS:
        raise RNNXError(f"TensorRT version: expected one of {', '.join(KNOWN_VERSIONS)}, found {version!r} "
                        "(10.2 to 10.14 were not read; 10.x is the newest read, 10.15)")
    return v


def parser_for(version: str | None) -> tuple[str, str]:
    """The table version that judges the nodes for TensorRT ``version`` (any release, ``8.6.1``,
    ``10.3``), and a note where it is not that version's own: a version between two read ones of
    the same major is judged by the one below it. Refused where neither side was read."""
    text = DEFAULT_VERSION if version is None else str(version).strip()
    if text in KNOWN_VERSIONS:
        table = resolve_version(text)
        alias = text in ALIASES and text != DEFAULT_VERSION and not text.endswith(".x")
        return table, (f"TensorRT {text}'s parser is judged by {table}'s rules (both tags read; they agree on every rule rnnx keeps)"
                       if alias else "")
    wanted = TensorRTVersion.parse(text)
    if wanted is None:
        raise RNNXError(f"tensorrt: expected a TensorRT version like 8.6 or 10.3.0 (or one of {', '.join(KNOWN_VERSIONS)}), found {version!r}")
    read = read_columns(VERSIONS)
    near = bracket(wanted, read)
    if near.own is not None:
        return near.own, ""
    if near.below is None or near.above is None:
        raise RNNXError(f"tensorrt: expected a TensorRT whose ONNX parser rnnx has read ({', '.join(read)}), or a release between two read "
                        f"ones of the same major, found {text}; give one of those")
    return near.below, (f"TensorRT {text}'s parser source was not read: its nodes are judged by {near.below}'s rules (the read version below it; "
                        f"{near.above} is the one above)")


def version_label(version: str | None) -> str:
    v = resolve_version(version)
    return "10.x (10.15)" if v == "10.15" else v


# rules whose detail already says what the node computes instead
_SELF_CONTAINED = {"lstm.activation_params", "rnn.activation_params"}


@dataclass(frozen=True)
class Finding:
    rule: ParserRule
    detail: str
    version: str

    @property
    def verdict(self) -> str:
        return self.rule.verdict

    def text(self) -> str:
        what = self.detail or self.rule.construct
        if self.rule.verdict == DIFFERS and self.rule.differs and not (self.detail and self.rule.key in _SELF_CONTAINED):
            return f"{what}: {self.rule.differs}"
        return what


@dataclass
class NodeVerdict:
    """The table's verdict on one node, with every rule that applied."""

    node: str
    op_type: str
    domain: str
    graph: str
    version: str
    verdict: str
    findings: list[Finding]
    lowered_from: str | None = None  # the recurrence rnnx lowered into the Scans this node belongs to
    member_ops: list[str] = field(default_factory=list)  # a lowered recurrence's verdict: the op types of its Scans

    @property
    def reasons(self) -> list[str]:
        return [f.text() for f in self.findings if f.verdict != ACCEPTED]

    @property
    def citations(self) -> list[str]:
        decisive = [f for f in self.findings if f.verdict == self.verdict] or self.findings
        seen: list[str] = []
        for f in decisive:
            c = f.rule.citation(self.version)
            if c not in seen:
                seen.append(c)
        if self.member_ops and self.verdict == ACCEPTED:
            seen.append(f"and the importer rows of every op in its Scans, each node accepted: {', '.join(self.member_ops)}")
        return seen

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type, "domain": self.domain, "graph": self.graph, "version": self.version,
                "verdict": self.verdict, "reasons": self.reasons, "citations": self.citations, "lowered_from": self.lowered_from}


def worst_verdict(verdicts: list[str]) -> str:
    """The most severe of ``verdicts`` (refused, differs, unknown, accepted, in that order); accepted when there are none."""
    return max(verdicts, key=_RANK.__getitem__) if verdicts else ACCEPTED


_ROWS_CACHE: dict[tuple[int, str, str], dict[str, ParserRule]] = {}


def _rows_for(version: str, op: str) -> dict[str, ParserRule]:
    """key -> the row for ``op`` in ``version`` (cached per table: a model may hold many nodes)."""
    cache_key = (id(RULES), version, op)
    if cache_key not in _ROWS_CACHE:
        _ROWS_CACHE[cache_key] = {r.key: r for r in RULES if version in r.versions and (op in r.ops or "*" in r.ops)}
    return _ROWS_CACHE[cache_key]


def _judge(n: _Node, version: str, constants: dict[str, Any]) -> NodeVerdict:
    rows = _rows_for(version, n.op_type)
    findings = [Finding(rows[k], detail, version) for k, detail in _applies(n, version, constants, rows) if k in rows]
    return NodeVerdict(n.name, n.op_type, n.domain, n.graph, version, worst_verdict([f.verdict for f in findings]), findings)


# --- walking a model ----------------------------------------------------------------------

def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper

    out = {}
    for attr in node.attribute:
        try:
            value = helper.get_attribute_value(attr)
        except Exception:  # an attribute of an unknown type: the rules read none such
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        out[attr.name] = value
    return out


def _walk(graph: Any, path: str, depth: int, types: dict[str, int], constants: dict[str, Any], opset: int) -> Iterator[tuple[_Node, dict[str, Any]]]:
    """Every node of ``graph`` and its subgraphs, with the element types and constants in scope
    (names as rnnx.formats.onnx_read names its subgraphs: main/NODE.ATTR)."""
    from onnx import numpy_helper

    types = dict(types)
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if elem:
            types[vi.name] = elem
    constants = dict(constants)
    for init in graph.initializer:
        types[init.name] = init.data_type
        constants[init.name] = init
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t is not None and node.output:
                    types[node.output[0]] = attr.t.data_type
                    constants[node.output[0]] = attr.t
    for index, node in enumerate(graph.node):
        attrs = _attributes(node)
        if node.op_type == "Cast" and "to" in attrs and node.output:
            types.setdefault(node.output[0], _int(attrs["to"], -1))
        n = _Node(node.op_type, node.domain, node.name or f"{node.op_type}#{index}", path, attrs, list(node.input), list(node.output),
                  opset, depth, types, node)
        arrays = {}
        if node.op_type == "Loop" and node.input and node.input[0] in constants:
            try:
                arrays[node.input[0]] = numpy_helper.to_array(constants[node.input[0]])
            except Exception:
                pass
        yield n, arrays
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                yield from _walk(attr.g, f"{path}/{node.name or node.op_type}.{attr.name}", depth + 1, types, constants, opset)
            for i, g in enumerate(attr.graphs):
                yield from _walk(g, f"{path}/{node.name or node.op_type}.{attr.name}[{i}]", depth + 1, types, constants, opset)


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def parser_verdicts(model_proto: Any, version: str = DEFAULT_VERSION) -> list[NodeVerdict]:
    """The table applied to every node of ``model_proto`` (Scan, Loop and If bodies included),
    in graph order. A node in the Scans of a recurrence rnnx lowered carries ``lowered_from``;
    :func:`lowered_verdicts` gives each such recurrence's verdict from its Scans."""
    v = resolve_version(version)
    prefixes = [(str(r.get("prefix") or f"{r.get('node')}__"), {str(x) for x in r["outputs"].values()}, str(r.get("node")))
                for r in read_lowered(model_proto)]
    out = []
    owner_of_graph: dict[str, str] = {}
    for n, arrays in _walk(model_proto.graph, "main", 0, {}, {}, _opset(model_proto)):
        verdict = _judge(n, v, arrays)
        owner = next((name for prefix, outs, name in prefixes
                      if any(o.startswith(prefix) or o in outs for o in n.outputs if o)), None)
        if owner is None:
            owner = next((name for g, name in owner_of_graph.items() if n.graph == g or n.graph.startswith(g + "/")), None)
        if owner is not None and n.op_type in ("Scan", "Loop", "If"):
            for attr in n.proto.attribute:
                if attr.type == attr.GRAPH:
                    owner_of_graph[f"{n.graph}/{n.proto.name or n.op_type}.{attr.name}"] = owner
        verdict.lowered_from = owner
        out.append(verdict)
    return out


def lowered_verdicts(verdicts: list[NodeVerdict]) -> dict[str, NodeVerdict]:
    """Each lowered recurrence (by its node's name) judged by the nodes of its Scans."""
    groups: dict[str, list[NodeVerdict]] = {}
    for v in verdicts:
        if v.lowered_from is not None:
            groups.setdefault(v.lowered_from, []).append(v)
    out = {}
    for name, members in groups.items():
        worst = worst_verdict([m.verdict for m in members])
        findings = [Finding(f.rule, f"{m.op_type} {m.node} in {m.graph}: {f.detail or f.rule.construct}", f.version)
                    for m in members for f in m.findings if f.verdict != ACCEPTED]
        if not findings:  # accepted: cite the Scans' importer
            scans = [f for m in members for f in m.findings if f.rule.key == "scan.importer"]
            findings = scans[:1] or [f for m in members for f in m.findings][:1]
        out[name] = NodeVerdict(name, "Scan", "", members[0].graph, members[0].version, worst, findings, lowered_from=name,
                                member_ops=sorted({m.op_type for m in members}))
    return out


def model_findings(model_proto: Any, version: str = DEFAULT_VERSION) -> list[Finding]:
    """What the table says of the model as a whole (its opset), apart from any node."""
    v = resolve_version(version)
    opset = _opset(model_proto)
    return [Finding(r, f"opset {opset}", v) for r in RULES if r.key == "model.opset" and v in r.versions]


# --- the table for ``rnnx inspect`` (a BackendRules-compatible object) ---------------------

def _facts(report: NodeReport) -> _Node:
    """A NodeReport as the node the rules read (no graph around it: no element types)."""
    attrs: dict[str, Any] = {"direction": report.direction, "layout": report.layout, "input_forget": report.input_forget}
    attrs.update({k: list(v) for k, v in (("activations", report.activations), ("activation_alpha", report.activation_alpha),
                                          ("activation_beta", report.activation_beta)) if v})
    attrs.update({k: v for k, v in (("clip", report.clip), ("linear_before_reset", report.linear_before_reset)) if v is not None})
    inputs = ["X", "W", "R", "B", "sequence_lens" if report.sequence_lens else "", "", "", "P" if report.peepholes else ""]
    return _Node(report.op_type, "", report.name, report.graph, attrs, inputs, ["Y"])


class ParserTable:
    """The table for one TensorRT version, as :mod:`rnnx.engines.acceptance` applies a backend's
    rules: ``backend``, ``basis`` and ``refusals(node)``; :meth:`judge` gives the whole verdict.
    Bound to a model (:meth:`for_model`), a node is judged as the graph holds it (element types,
    its Scans when rnnx lowered it); unbound, from the report's facts alone."""

    backend = "tensorrt"

    def __init__(self, version: str | None = DEFAULT_VERSION, model: Any = None) -> None:
        self.version = resolve_version(version)
        self.model = model
        self.basis = f"predicted from onnx-tensorrt's parser source for TensorRT {version_label(self.version)}; not built"
        self._verdicts: tuple[dict[tuple[str, str], NodeVerdict], dict[str, NodeVerdict]] | None = None

    @property
    def rules(self) -> tuple[ParserRule, ...]:
        return rules_for(self.version)

    def for_model(self, model: Any) -> ParserTable:
        return ParserTable(self.version, model)

    def _model_verdicts(self) -> tuple[dict[tuple[str, str], NodeVerdict], dict[str, NodeVerdict]]:
        if self._verdicts is None:  # computed on first use: inspect has named the unnamed recurrent nodes by then
            all_ = parser_verdicts(self.model, self.version)
            by_node: dict[tuple[str, str], NodeVerdict] = {}
            for v in all_:
                by_node.setdefault((v.graph, v.node), v)
            self._verdicts = (by_node, lowered_verdicts(all_))
        return self._verdicts

    def judge(self, report: NodeReport) -> NodeVerdict:
        if self.model is not None:
            by_node, lowered = self._model_verdicts()
            if report.lowered and report.name in lowered:
                return lowered[report.name]
            found = by_node.get((report.graph, report.name))
            if not report.lowered and found is not None and found.op_type == report.op_type:
                return found
        if report.lowered:  # its Scans are not in the graph, or there is no graph to find them in
            rule = next(r for r in RULES if r.key in ("op.not_in_table", "version.unavailable") and self.version in r.versions)
            why = ("lowered by rnnx, but its Scans were not found in the graph" if self.model is not None
                   else "lowered by rnnx: judged by its Scans, which only the model holds (ParserTable.for_model)")
            return NodeVerdict(report.name, report.op_type, "", report.graph, self.version, UNKNOWN, [Finding(rule, why, self.version)])
        return _judge(_facts(report), self.version, {})

    def refusals(self, node: NodeReport) -> list[str]:
        """What keeps the node from running in TensorRT as ONNX defines it: a refusal, a
        difference in what it computes, or what the table cannot tell ([] = accepted)."""
        return self.judge(node).reasons


Judge = Callable[[NodeReport], NodeVerdict]
