"""``rnnx inspect``: every recurrent node of an ONNX model, what it is, and who can run it.

Who can run it is a prediction: the caller passes a ``judge`` (``rnnx inspect`` passes
:func:`rnnx.engines.acceptance.predict`, which applies each engine's documented rules), and
each backend's verdict is printed with its basis, e.g. "predicted from TensorRT's documented
rules; not built", so that "accepts" is never read as "was built and ran".
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from rnnx.formats.onnx_read import constants, recurrent_groups
from rnnx.formats.onnx_quantized import QuantizedWeight, is_dequantized, is_quantized, quantization
from rnnx.formats.onnx_metadata import describe, read_metadata
from rnnx.graphs.fuse_steps import fuse_steps


@dataclass
class NodeReport:
    name: str
    graph: str
    op_type: str
    stack: str
    input_size: int | None
    hidden_size: int | None
    direction: str
    activations: list[str]
    clip: float | None
    layout: int
    linear_before_reset: int | None
    input_forget: int
    peepholes: bool
    sequence_lens: bool
    weight_sources: dict[str, str]
    lowered: bool = False  # rnnx lowered it into Scans (a projection, or `rnnx lower`); read back through its record
    quantization: dict[str, Any] | None = None  # a quantized node (com.microsoft.DynamicQuantizeLSTM): what is quantized, and how
    backends: dict[str, list[str]] = field(default_factory=dict)  # backend -> reasons it refuses; [] = accepts
    backend_basis: dict[str, str] = field(default_factory=dict)  # backend -> what its verdict rests on (a prediction unless it ran)


#: backend -> (the reasons it refuses the node, [] if none; what that verdict rests on)
Judge = Callable[[NodeReport], dict[str, tuple[list[str], str]]]


def inspect_model(model: Any, judge: Judge | None = None) -> list[NodeReport]:
    """A report per recurrent node (subgraphs too); with ``judge``, its backends' verdicts and their basis."""
    reports = []
    quantized = _quantized_by_output(model)
    for group in recurrent_groups(model):
        for rnode in group.nodes:
            a = rnode.attributes
            W = rnode.tensors.get("W")
            direction = a.get("direction", "forward")
            r = NodeReport(
                name=rnode.name,
                graph=rnode.graph,
                op_type=rnode.node.op_type,
                stack=group.name,
                input_size=int(W.shape[2]) if W is not None else None,
                hidden_size=int(a["hidden_size"]) if "hidden_size" in a else (int(rnode.tensors["R"].shape[2]) if rnode.tensors.get("R") is not None else None),
                direction=direction,
                activations=list(a.get("activations") or []),
                clip=a.get("clip"),
                layout=int(a.get("layout", 0)),
                linear_before_reset=int(a.get("linear_before_reset", 0)) if rnode.node.op_type == "GRU" else None,
                input_forget=int(a.get("input_forget", 0)),
                peepholes=rnode.tensors.get("P") is not None or rnode.sources.get("P") == "graph input",
                sequence_lens=len(rnode.node.input) > 4 and bool(rnode.node.input[4]),
                weight_sources=dict(rnode.sources),
                lowered=rnode.lowered,
                quantization=quantized.get(tuple(rnode.node.output)) if is_dequantized(rnode.node) else None,
            )
            if judge is not None:
                verdicts = _quantized_verdicts(r, judge) if r.quantization is not None else judge(r)
                r.backends = {backend: reasons for backend, (reasons, _) in verdicts.items()}
                r.backend_basis = {backend: basis for backend, (_, basis) in verdicts.items()}
            reports.append(r)
    return reports


def _quantized_verdicts(r: NodeReport, judge: Judge) -> dict[str, tuple[list[str], str]]:
    """A com.microsoft op runs in ONNX Runtime only: the other backends get the float LSTM it
    stands for through ``rnnx convert --select``."""
    op = r.quantization["op"] if r.quantization else ""
    verdicts = {}
    for backend, (reasons, basis) in judge(r).items():
        if backend == "onnxruntime":
            verdicts[backend] = (reasons, basis)
        else:
            verdicts[backend] = ([f"{op} is ONNX Runtime's own op; `rnnx convert --select {r.name}` gives the float LSTM it stands for"],
                                 f"the op's domain: only ONNX Runtime implements {op.rpartition('.')[0]} ops")
    return verdicts


def _quantized_by_output(model: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """Each quantized recurrent node's parameters, by its outputs (which its stand-in shares)."""
    found = {}
    known: dict[str, Any] = {}
    for graph in _graphs(model.graph):
        known = constants(graph, known)
        for node in graph.node:
            if is_quantized(node):
                found[tuple(node.output)] = quantization(node, known).to_json()
    return found


def _graphs(graph: Any) -> Any:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                yield from _graphs(attr.g)
            for g in attr.graphs:
                yield from _graphs(g)


def fusable_chains(model: Any) -> list[dict[str, Any]]:
    """The chains of one-step nodes that ``rnnx fuse`` would join into one recurrence; ``model``
    is left as it is."""
    return fuse_steps(copy.deepcopy(model)).rewritten


def as_json(reports: list[NodeReport], fusable: list[dict[str, Any]], model: Any = None) -> dict[str, Any]:
    # "quantization" only where a node is quantized: a float node's JSON is as it was
    nodes = [{k: v for k, v in asdict(r).items() if k != "quantization" or v is not None} for r in reports]
    out: dict[str, Any] = {"nodes": nodes, "fusable_chains": fusable}
    if model is not None:
        export, recurrences = read_metadata(model)
        if export is not None:
            out["export"], out["recurrences"] = export, recurrences
    return out


def as_text(reports: list[NodeReport], fusable: list[dict[str, Any]], model: Any = None) -> str:
    recorded = describe(*read_metadata(model)) if model is not None else []
    if not reports and not fusable:
        return "\n".join(recorded + ["no LSTM, GRU or RNN node found"])
    lines = list(recorded)
    for r in reports:
        extras = [f"layout={r.layout}"]
        if r.linear_before_reset is not None:
            extras.append(f"linear_before_reset={r.linear_before_reset}")
        if r.clip is not None:
            extras.append(f"clip={r.clip}")
        if r.peepholes:
            extras.append("peepholes")
        if r.sequence_lens:
            extras.append("sequence_lens")
        if r.activations:
            extras.append("activations=" + "/".join(r.activations))
        kind = f"{r.op_type}, lowered to Scans by rnnx" if r.lowered else r.op_type
        if r.quantization is not None:
            kind = f"{r.quantization['op']}, an LSTM with 8-bit weights"
        lines.append(f"{r.name} [{kind}] in {r.graph} (stack {r.stack}): input {r.input_size}, hidden {r.hidden_size}, {r.direction}, {', '.join(extras)}")
        lines.append("  weights from: " + ", ".join(f"{k} {v}" for k, v in r.weight_sources.items()))
        if r.quantization is not None:
            q = r.quantization
            lines.append("  quantized: " + "; ".join(QuantizedWeight(**w).summary() for w in q["weights"]))
            lines.append(f"  at run time: {', '.join(q['dynamic'])} quantized to uint8 per call (dynamic); float: {', '.join(q['float']) or 'none'}")
        for backend, reasons in r.backends.items():
            verdict = "accepts" if not reasons else "refuses: " + "; ".join(reasons)
            basis = r.backend_basis.get(backend)
            lines.append(f"  {backend:<12} {verdict}" + (f" ({basis})" if basis else ""))
    for chain in fusable:
        lines.append(f"fusable: {chain['steps']} one-step {chain['op']} nodes over {chain['source']} (rnnx fuse)")
    return "\n".join(lines)
