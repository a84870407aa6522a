"""``rnnx inspect``: every recurrent node of an ONNX model, what it is, and who can run it.

Who can run it is a prediction: the caller passes a ``judge`` (``rnnx inspect`` passes
:data:`rnnx.engines.acceptance.predict`, which applies each engine's rules, TensorRT's read from
onnx-tensorrt's source), and each backend's verdict is printed with its basis, e.g. "predicted
from onnx-tensorrt's parser source for TensorRT 10.x (10.15); not built", so that "accepts" is
never read as "was built and ran". TensorRT's verdict also names the TensorRT version and cites
the source (file, function, condition) it rests on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError, shown
from rnnx.formats import files, registry
from rnnx.formats.onnx_metadata import describe, read_metadata
from rnnx.formats.onnx_prune import all_graphs
from rnnx.formats.onnx_quantized import QuantizedWeight, is_dequantized, is_quantized, quantization
from rnnx.formats.onnx_read import constants, recurrent_groups
from rnnx.graphs.fuse_passes import run_fuse_passes
from rnnx.graphs.legalize import drop_newer_attributes
from rnnx.layouts.onnx import node_activations


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
    activation_alpha: list[float] = field(default_factory=list)  # as the node lists them (ONNX hands them out in order)
    activation_beta: list[float] = field(default_factory=list)
    activation_text: str = ""  # each function with its alpha and beta, as a spec writes them (HardSigmoid:0.2:0.5/Tanh/Tanh)
    lowered: bool = False  # rnnx lowered it into Scans (a projection, or `rnnx lower`); read back through its record
    quantization: dict[str, Any] | None = None  # a quantized node (com.microsoft.DynamicQuantizeLSTM): what is quantized, and how
    backends: dict[str, list[str]] = field(default_factory=dict)  # backend -> reasons it refuses; [] = accepts
    backend_basis: dict[str, str] = field(default_factory=dict)  # backend -> what its verdict rests on (a prediction unless it ran)
    # backend -> accepted / refused / "builds but computes differently" / unknown, where the judge says more than its reasons
    backend_verdicts: dict[str, str] = field(default_factory=dict)
    backend_citations: dict[str, list[str]] = field(default_factory=dict)  # backend -> the source each verdict cites (TensorRT)


#: backend -> (the reasons it refuses the node, [] if none; what that verdict rests on[, the
#: verdict, the citations]); a judge with ``for_model(model)`` is bound to the model first
Judge = Callable[[NodeReport], dict[str, tuple[Any, ...]]]


def inspect_model(model: Any, judge: Judge | None = None) -> list[NodeReport]:
    """A report per recurrent node (subgraphs too); with ``judge``, its backends' verdicts and their basis."""
    reports = []
    quantized = _quantized_by_output(model)
    if judge is not None and hasattr(judge, "for_model"):
        judge = judge.for_model(model)  # TensorRT's table reads the graph (a lowered node's Scans)
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
                hidden_size=int(a["hidden_size"]) if "hidden_size" in a else (int(R.shape[2]) if (R := rnode.tensors.get("R")) is not None else None),
                direction=direction,
                activations=list(a.get("activations") or []),
                clip=a.get("clip"),
                activation_alpha=[float(v) for v in a.get("activation_alpha") or []],
                activation_beta=[float(v) for v in a.get("activation_beta") or []],
                activation_text=_activation_text(a, rnode.node.op_type, direction),
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
                r.backends = {backend: list(answer[0]) for backend, answer in verdicts.items()}
                r.backend_basis = {backend: answer[1] for backend, answer in verdicts.items()}
                r.backend_verdicts = {backend: answer[2] if len(answer) > 2 else ("refused" if answer[0] else "accepted")
                                      for backend, answer in verdicts.items()}
                r.backend_citations = {backend: list(answer[3]) for backend, answer in verdicts.items() if len(answer) > 3}
            reports.append(r)
    return reports


_SLOTS = {"LSTM": 3, "GRU": 2, "RNN": 1}


def _activation_text(attributes: dict[str, Any], op_type: str, direction: str) -> str:
    """The node's functions with the alpha and beta ONNX Runtime hands each (empty when it names
    none); the names as written where the attributes do not read as one valid list."""
    names = [str(n) for n in attributes.get("activations") or []]
    if not names:
        return ""
    # read as one list, so that directions with different functions are shown too (rnnx's spec holds one)
    slots = _SLOTS.get(op_type, 1) * (2 if direction == "bidirectional" else 1)
    try:
        acts, _, _ = node_activations(attributes, slots, 1, "node")
    except (RNNXError, KeyError):  # a damaged or per-direction list: show what is written
        return "/".join(names)
    return "/".join(map(str, acts))


def _quantized_verdicts(r: NodeReport, judge: Judge) -> dict[str, tuple[Any, ...]]:
    """A com.microsoft op runs in ONNX Runtime only: the other backends get the float LSTM it
    stands for through ``rnnx convert --select``."""
    op = r.quantization["op"] if r.quantization else ""
    verdicts: dict[str, tuple[Any, ...]] = {}
    for backend, answer in judge(r).items():
        if backend == "onnxruntime":
            verdicts[backend] = answer
        else:
            verdicts[backend] = ([f"{op} is ONNX Runtime's own op; `rnnx convert --select {r.name}` gives the float LSTM it stands for"],
                                 f"the op's domain: only ONNX Runtime implements {op.rpartition('.')[0]} ops")
    return verdicts


def _quantized_by_output(model: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """Each quantized recurrent node's parameters, by its outputs (which its stand-in shares)."""
    found = {}
    known: dict[str, Any] = {}
    for graph in all_graphs(model.graph):
        known = constants(graph, known)
        for node in graph.node:
            if is_quantized(node):
                found[tuple(node.output)] = quantization(node, known).to_json()
    return found


def fusable(model: Any) -> dict[str, Any]:
    """What ``rnnx fuse`` would rewrite, found by running its passes on a copy (``model`` is left
    as it is): decomposed cells, Loops and Scans over one step, forward/reverse pairs, chains of
    steps, each candidate a rule left alone and why, and the native nodes the result would hold."""
    work = copy.deepcopy(model)
    drop_newer_attributes(work, strict=False)
    work, passes = run_fuse_passes(work)
    found: dict[str, Any] = {**passes.found(), "left_alone": [d.to_json() for d in passes.left_alone]}
    found["native_after"] = [_brief(r) for r in inspect_model(work)] if passes.changed else []
    return found


def _brief(r: NodeReport) -> dict[str, Any]:
    return {"name": r.name, "op_type": r.op_type, "input_size": r.input_size, "hidden_size": r.hidden_size,
            "direction": r.direction, "attributes": _attribute_text(r)}


def _rewrites(found: dict[str, Any]) -> bool:
    return any(found.get(k) for k in ("cells", "loops", "bidirectional", "chains"))


@dataclass
class GroupReport:
    """One recurrent group of a weight file in a format other than ONNX, as ``rnnx.load`` reads it;
    where it cannot read the group as it is, ``unread`` says why (the fields that follow the name stay None)."""

    name: str  # the name select= takes ("" where the file holds one group only)
    spec: str | None = None
    cell: str | None = None
    input_size: int | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    direction: str | None = None
    activations: str | None = None  # each function with its alpha and beta; "" for the cell's defaults
    clip: float | None = None
    input_forget: bool | None = None
    unread: str | None = None


def file_format(path: str | Path) -> str:
    """The registered format that reads ``path`` (by extension, then content); ``onnx`` where no
    format claims the extension, so that a model with an odd name is still read as ONNX."""
    path = Path(path)
    suffix = "".join(path.suffixes[-2:]) if path.name.endswith(".weights.h5") else path.suffix
    if not any(suffix.lower() in registry.get(n).extensions for n in registry.names()):
        return "onnx"
    return registry.detect(path).name


def inspect_weights(path: str | Path, format: str, spec: str | None = None, dtype: str | None = None,
                    select: str | None = None) -> list[GroupReport]:
    """Each recurrent group of a weight file in ``format`` with the spec ``rnnx.load`` reads for it;
    ``spec``, ``dtype`` and ``select`` (that group only) as ``rnnx.load`` takes them (a headerless
    cuDNN blob needs ``spec``). A group rnnx cannot read as it is (a weights-only Keras file that does not say its activations)
    is listed with the reason; a file whose only group cannot be read is refused with it."""
    path = Path(path)
    names = [select] if select is not None else files.groups(path, format)
    reports = []
    for name in names:
        try:
            weights = files.load(path, format, select=name or None, spec=spec, dtype=dtype)
        except RNNXError as exc:
            if len(names) == 1:
                raise
            reports.append(GroupReport(name, unread=str(exc).removeprefix(f"{path}: ")))
            continue
        s = weights.spec
        reports.append(GroupReport(name, str(s), s.cell, s.input_size, s.hidden_size, s.num_layers, s.direction,
                                   "/".join(map(str, s.activations)), s.clip, s.input_forget))
    return reports


def weights_as_json(path: str | Path, format: str, groups: list[GroupReport]) -> dict[str, Any]:
    return {"file": str(path), "format": format, "groups": [asdict(g) for g in groups]}


def weights_as_text(path: str | Path, format: str, groups: list[GroupReport]) -> str:
    if not groups:
        return f"{path}: a {format} file with no LSTM, GRU or RNN layer"
    lines = [f"{path}: {format} file, {len(groups)} recurrent group(s)"]
    for g in groups:
        extras = [f"layers={g.num_layers}"] if g.num_layers != 1 else []
        extras += [f"activations={g.activations}"] if g.activations else []
        extras += [f"clip={g.clip}"] if g.clip else []
        extras += ["input_forget=1"] if g.input_forget else []
        label = shown(g.name, quoted=False) if g.name else "(the only group)"
        if g.unread is not None:
            lines.append(f"{label}: not read: {g.unread}")
            continue
        lines.append(f"{label} [{g.cell}]: input {g.input_size}, hidden {g.hidden_size}, {g.direction}"
                     + "".join(f", {e}" for e in extras))
        lines.append(f"  spec: {g.spec}" + (f"  (--select {shown(g.name, quoted=False)})" if g.name and len(groups) > 1 else ""))
    return "\n".join(lines)


def fuse_command(source: str | Path) -> str:
    """The command that rewrites ``source``'s decomposed recurrences (the output beside it)."""
    source = Path(source)
    return f"rnnx fuse {source} -o {source.with_name(source.stem + '.fused.onnx')}"


def as_json(reports: list[NodeReport], found: dict[str, Any], model: Any = None, source: str | Path | None = None) -> dict[str, Any]:
    """``found`` is :func:`fusable`'s; ``fusable_chains`` keeps its earlier meaning, ``fusable`` holds every rewrite."""
    # "quantization" only where a node is quantized: a float node's JSON is as it was
    nodes = [{k: v for k, v in asdict(r).items() if k != "quantization" or v is not None} for r in reports]
    out: dict[str, Any] = {"nodes": nodes, "fusable_chains": found.get("chains", []), "fusable": dict(found)}
    if _rewrites(found) and source is not None:
        out["fusable"]["command"] = fuse_command(source)
    if model is not None:
        export, recurrences = read_metadata(model)
        if export is not None:
            out["export"], out["recurrences"] = export, recurrences
    return out


def _fusable_lines(found: dict[str, Any], source: str | Path | None) -> list[str]:
    if "not_analysed" in found:
        return [f"fusable: not analysed: {found['not_analysed']}"]
    lines = [f"fusable: cell {c} (decomposed) would become a one-step native node" for c in found.get("cells", [])]
    lines += [f"fusable: {c['loop']} {c['replaced']} over {c['source']} would become one native {c['op']} node ({c.get('direction', 'forward')})"
              for c in found.get("loops", [])]
    lines += [f"fusable: {c['forward']} and {c['reverse']} (over the reversed sequence) would join into one bidirectional node"
              for c in found.get("bidirectional", [])]
    lines += [f"fusable: {c['steps']} one-step {c['op']} nodes over {c['source']} would join into one node" for c in found.get("chains", [])]
    if not _rewrites(found):
        return lines
    for n in found.get("native_after", []):
        lines.append(f"  after fusing: {n['name']} [{n['op_type']}]: input {n['input_size']}, hidden {n['hidden_size']}, {n['direction']}"
                     + "".join(f", {a}" for a in n["attributes"]))
    lines.append(f"  run: {fuse_command(source)}" if source is not None else "  run: rnnx fuse MODEL -o FUSED.onnx")
    return lines


def _attribute_text(r: NodeReport) -> list[str]:
    extras = [f"{k}={v}" for k, v in (("linear_before_reset", r.linear_before_reset), ("clip", r.clip)) if v is not None]
    extras += [f"input_forget={r.input_forget}"] if r.input_forget else []
    extras += [flag for flag in ("peepholes", "sequence_lens") if getattr(r, flag)]
    if r.activations:
        extras.append("activations=" + (r.activation_text or "/".join(r.activations)))
        if ":" not in r.activation_text:  # not paired with the functions (rnnx cannot read them): as the node lists them
            extras += [f"{key}=" + "/".join(f"{v:g}" for v in values)
                       for key, values in (("activation_alpha", r.activation_alpha), ("activation_beta", r.activation_beta)) if values]
    return extras


def as_text(reports: list[NodeReport], found: dict[str, Any], model: Any = None, source: str | Path | None = None) -> str:
    """``found`` is :func:`fusable`'s; ``source`` the file, named in the ``rnnx fuse`` command offered."""
    recorded = describe(*read_metadata(model)) if model is not None else []
    fuse_lines = _fusable_lines(found, source)
    if not reports and not fuse_lines:
        left = [f"  left alone by rnnx fuse: {shown(d['node'], quoted=False)}: {d['reason']} (rule {d['rule']})" for d in found.get("left_alone", [])]
        return "\n".join(recorded + ["no LSTM, GRU or RNN node found, and no decomposed cell, Loop, Scan or chain of steps that rnnx fuse would rewrite"] + left)
    lines = list(recorded)
    for r in reports:
        extras = [f"layout={r.layout}", *_attribute_text(r)]
        kind = f"{r.op_type}, lowered to Scans by rnnx" if r.lowered else r.op_type
        if r.quantization is not None:
            kind = f"{r.quantization['op']}, an LSTM with 8-bit weights"
        lines.append(f"{shown(r.name, quoted=False)} [{kind}] in {shown(r.graph, quoted=False)} (stack {r.stack}): "
                     f"input {r.input_size}, hidden {r.hidden_size}, {r.direction}, {', '.join(extras)}")
        lines.append("  weights from: " + ", ".join(f"{k} {shown(v, quoted=False)}" for k, v in r.weight_sources.items()))
        if r.quantization is not None:
            q = r.quantization
            lines.append("  quantized: " + "; ".join(QuantizedWeight(**w).summary() for w in q["weights"]))
            lines.append(f"  at run time: {', '.join(q['dynamic'])} quantized to uint8 per call (dynamic); float: {', '.join(q['float']) or 'none'}")
        for backend, reasons in r.backends.items():
            said = r.backend_verdicts.get(backend, "refused" if reasons else "accepted")
            verdict = {"accepted": "accepts", "refused": "refuses", "unknown": "not known"}.get(said, said)
            verdict += (": " + "; ".join(reasons)) if reasons else ""
            basis = r.backend_basis.get(backend)
            lines.append(f"  {backend:<12} {verdict}" + (f" ({basis})" if basis else ""))
            lines += [f"  {'':<12} cites {c}" for c in r.backend_citations.get(backend, [])]
    return "\n".join(lines + fuse_lines)
