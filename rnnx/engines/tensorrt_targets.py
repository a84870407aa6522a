"""Whether each TensorRT release's ONNX parser takes a whole file, as onnx-tensorrt's source says.

:mod:`rnnx.engines.tensorrt_parser` judges one node at a time, Loop, Scan and If bodies
included; a file is taken only where every node is, so its verdict per release is the worst of
its nodes', and the node that decides it is the one to name. This is what ``rnnx inspect``
says of a file whose recurrence is not a native node: a Python loop re-rolled into an ONNX
``Loop`` (whose body may hold ops an older parser has no importer for, LayerNormalization
before 8.6), or a recurrence lowered to Scans. A prediction from the parser's source, never a
claim that an engine was built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rnnx.engines.tensorrt_parser import NodeVerdict, parser_verdicts, worst_verdict
from rnnx.engines.tensorrt_parser_rules import ACCEPTED, VERSIONS
from rnnx.errors import shown

CONTROL_FLOW = ("Loop", "Scan", "If")  # the ops whose bodies the parser imports as TensorRT loops and conditionals


@dataclass(frozen=True)
class TargetVerdict:
    """One release's verdict on the whole file; ``decided_by``: the first node with that verdict
    (None where every node is accepted)."""

    version: str
    verdict: str
    decided_by: NodeVerdict | None
    nodes: int

    def text(self) -> str:
        if self.decided_by is None:
            return f"TensorRT {self.version}: {self.verdict} (all {self.nodes} nodes, bodies included)"
        n = self.decided_by
        where = f"{n.op_type} {shown(n.node)}" + (f" in {shown(n.graph, quoted=False)}" if n.graph != "main" else "")
        reason = n.reasons[0] if n.reasons else n.verdict
        return f"TensorRT {self.version}: {self.verdict}, at {where}: {reason}"

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "verdict": self.verdict, "nodes": self.nodes,
                "decided_by": None if self.decided_by is None else self.decided_by.to_json()}


def target_verdicts(model: Any, versions: tuple[str, ...] = VERSIONS) -> list[TargetVerdict]:
    """The file's verdict at each release the parser table read (oldest first)."""
    out = []
    for version in versions:
        judged = parser_verdicts(model, version)
        worst = worst_verdict([v.verdict for v in judged])
        first = None if worst == ACCEPTED else next(v for v in judged if v.verdict == worst)
        out.append(TargetVerdict(version, worst, first, len(judged)))
    return out


def has_control_flow(model: Any) -> bool:
    """Whether the main graph holds a Loop, Scan or If: the files whose verdict is not read from
    a recurrent node's alone."""
    return any(n.op_type in CONTROL_FLOW for n in model.graph.node)
