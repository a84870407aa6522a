"""``rnnx inspect``: every recurrent node of an ONNX model, what it is, and who can run it.

Backend rules, each with its source:
- ONNX Runtime (CPU): ``layout`` must be 0 (its LSTM/GRU/RNN kernels reject 1; pinned by a test
  that runs it);
- TensorRT's ONNX parser (onnx-tensorrt's documented operator limits): ``layout`` 0, the reverse
  direction's activations equal to the forward's, ``input_forget`` 0;
- cuDNN (its RNN modes): no peepholes, GRU only with ``linear_before_reset=1``, no ``clip``,
  default activations only, no reverse-only layer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rnnx.layouts.onnx import DEFAULT_ACTIVATIONS
from rnnx.formats.onnx_read import RecurrentNode, recurrent_groups
from rnnx.formats.onnx_metadata import describe, read_metadata


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
    backends: dict[str, list[str]] = field(default_factory=dict)  # backend -> reasons it refuses; [] = accepts


def _cell(rnode: RecurrentNode) -> str:
    if rnode.node.op_type != "RNN":
        return rnode.node.op_type.lower()
    acts = rnode.attributes.get("activations") or ["Tanh"]
    return {"tanh": "rnn_tanh", "relu": "rnn_relu"}.get(str(acts[0]).lower(), "rnn_other")


def backend_refusals(r: NodeReport, cell: str) -> dict[str, list[str]]:
    dirs = 2 if r.direction == "bidirectional" else 1
    ort, trt, cudnn = [], [], []
    if r.layout != 0:
        ort.append("layout=1 (batch-major) is not supported; re-export with layout 0")
        trt.append("layout=1 is not supported by the parser")
    if dirs == 2 and r.activations:
        half = len(r.activations) // 2
        if [a.lower() for a in r.activations[:half]] != [a.lower() for a in r.activations[half:]]:
            trt.append(f"reverse activations {r.activations[half:]} differ from forward {r.activations[:half]}")
    if r.input_forget:
        trt.append("input_forget=1 is not supported by the parser")
    if r.peepholes:
        cudnn.append("peepholes: cuDNN LSTMs have none")
    if r.op_type == "GRU" and r.linear_before_reset != 1:
        cudnn.append("linear_before_reset=0: cuDNN GRUs reset after the recurrent product")
    if r.clip is not None:
        cudnn.append(f"clip={r.clip}: cuDNN has no cell clipping")
    default = DEFAULT_ACTIVATIONS.get(cell)
    if r.activations and (default is None or [a.lower() for a in r.activations] != [a.lower() for a in default * dirs]):
        cudnn.append(f"activations {r.activations}: cuDNN has only the defaults")
    if r.direction == "reverse":
        cudnn.append("reverse-only: cuDNN has unidirectional and bidirectional modes only")
    if r.input_forget:
        cudnn.append("input_forget=1: cuDNN has no coupled gates")
    return {"onnxruntime": ort, "tensorrt": trt, "cudnn": cudnn}


def inspect_model(model: Any) -> list[NodeReport]:
    reports = []
    for group in recurrent_groups(model):
        for rnode in group.nodes:
            a = rnode.attributes
            W = rnode.tensors.get("W")
            direction = a.get("direction", "forward")
            cell = _cell(rnode)
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
            )
            r.backends = backend_refusals(r, cell)
            reports.append(r)
    return reports


def as_json(reports: list[NodeReport], fusable: list[dict[str, Any]], model: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": [asdict(r) for r in reports], "fusable_chains": fusable}
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
        lines.append(f"{r.name} [{r.op_type}] in {r.graph} (stack {r.stack}): input {r.input_size}, hidden {r.hidden_size}, {r.direction}, {', '.join(extras)}")
        lines.append("  weights from: " + ", ".join(f"{k} {v}" for k, v in r.weight_sources.items()))
        for backend, reasons in r.backends.items():
            lines.append(f"  {backend:<12} " + ("accepts" if not reasons else "refuses: " + "; ".join(reasons)))
    for chain in fusable:
        lines.append(f"fusable: {chain['steps']} one-step {chain['op']} nodes over {chain['source']} (rnnx fuse)")
    return "\n".join(lines)
