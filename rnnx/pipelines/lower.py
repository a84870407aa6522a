"""``rnnx lower``: a model's recurrent nodes as hoisted-input Scans (the TensorRT-oriented
form), checked against the input in ONNX Runtime before anything is written, at shapes the
input itself runs (:mod:`rnnx.pipelines.rewrite_check`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.engines.tensorrt_parser import parser_for, parser_verdicts
from rnnx.engines.tensorrt_parser_rules import DIFFERS, REFUSED
from rnnx.errors import RNNXError
from rnnx.formats.onnx_prune import prune
from rnnx.graphs.lower import lower_recurrences
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.pass_result import Declined
from rnnx.pipelines.fuse import read_source, write_checked
from rnnx.pipelines.rewrite_check import RewriteCheck
from rnnx.tolerance import Tolerances


@dataclass
class LowerReport:
    """What ``rnnx lower`` wrote: the nodes lowered, those left alone (with the rule that
    declined each), and the check against the input."""

    output: str
    lowered: list[str] = field(default_factory=list)
    left_alone: list[Declined] = field(default_factory=list)
    check: RewriteCheck | None = None  # the check against the input, case by case
    tolerances: dict[str, Any] = field(default_factory=dict)  # what the caller set (Tolerances.to_json); the rest is by dtype
    tensorrt: str | None = None  # --for tensorrt=VERSION: the parser table's version the nodes were judged by
    why: dict[str, list[str]] = field(default_factory=dict)  # node -> the table's rules that made it lowered
    kept_native: list[str] = field(default_factory=list)  # recurrent nodes this TensorRT parses as ONNX Runtime computes them
    after: list[dict[str, Any]] = field(default_factory=list)  # the written file's nodes the table does not accept (none, when it worked)

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output, "lowered": self.lowered, "left_alone": [d.to_json() for d in self.left_alone],
            "check": None if self.check is None else self.check.to_json(self.tolerances),
            "tensorrt": self.tensorrt, "why": self.why, "kept_native": self.kept_native, "not_accepted_after": self.after,
        }

    def __str__(self) -> str:
        lines = [f"lowered {len(self.lowered)} node(s) to hoisted-input Scans: {', '.join(self.lowered) or '-'}; written to {self.output}"]
        if self.tensorrt is not None:
            lines += [f"  {node}: {'; '.join(rules)}" for node, rules in self.why.items()]
            if self.kept_native:
                lines.append(f"  kept native, as TensorRT {self.tensorrt}'s parser takes them: {', '.join(self.kept_native)}")
            lines.append(f"  every node of the written file is accepted by TensorRT {self.tensorrt}'s parser rules" if not self.after else
                         "  still not accepted: " + "; ".join(f"{a['node']} ({a['op_type']}): {', '.join(a['reasons'])}" for a in self.after))
        lines += [f"left alone: {d} (rule {d.rule})" for d in self.left_alone]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


def lower_file(source: Path, output: Path, select: str | None = None, check: bool = True, seed: int = 0,
               tolerances: Tolerances | None = None, dims: dict[str, int] | None = None,
               input_shapes: dict[str | None, list[int]] | None = None, for_tensorrt: str | None = None) -> LowerReport:
    """Lower ``source``'s recurrent nodes (or ``select``) into ``output``; the result is checked
    against the input in ONNX Runtime, each graph output held to ``tolerances`` (by output
    name; default: its dtype's), and nothing is written if it differs. The check runs where
    the input runs (see :mod:`rnnx.pipelines.rewrite_check`); ``dims`` sets a dynamic
    dimension's size by its label, ``input_shapes`` an input's whole shape.

    ``for_tensorrt`` (a version of :mod:`rnnx.engines.tensorrt_parser`'s table, ``"10.x"``...):
    lower exactly the recurrent nodes that TensorRT's parser would refuse or build into
    something that computes differently, keep the rest native, and judge the written file by
    the same table (a node still not accepted is reported)."""
    original = read_source(Path(source), Path(output), dims, input_shapes, lowering=True)
    model = copy.deepcopy(original)
    progress.step("lowering recurrences into Scans")
    judged = _tensorrt_judgement(original, for_tensorrt) if for_tensorrt is not None else None
    if judged is not None and select is not None:
        raise RNNXError("--node and --for tensorrt: give one (--for tensorrt chooses the nodes by TensorRT's parser rules)")
    result = lower_recurrences(model, select, frozenset(judged[0]) if judged is not None else None)
    if result.rewritten:
        prune(model)  # the native nodes' W, R and B: the Scans hold their own form, and the old would ship twice
    report = write_checked(original, model, Path(source), Path(output), "lowered", check and bool(result), seed, tolerances, dims, input_shapes)
    lowered = LowerReport(str(output), result.rewritten, result.left_alone, report, tolerances.to_json() if tolerances else {})
    if judged is not None:
        lowered.tensorrt = parser_for(for_tensorrt)[0]
        lowered.why = {name: judged[0][name] for name in result.rewritten if name in judged[0]}
        lowered.kept_native = judged[1]
        lowered.after = [v.to_json() for v in parser_verdicts(model, lowered.tensorrt) if v.verdict in (REFUSED, DIFFERS)]
    return lowered


def _tensorrt_judgement(model: Any, version: str) -> tuple[dict[str, list[str]], list[str]]:
    """(main-graph recurrent node -> the rules that make this TensorRT refuse it or compute
    otherwise, the recurrent nodes it takes as they are)."""
    version = parser_for(version)[0]
    lower, keep = {}, []
    for v in parser_verdicts(model, version):
        if v.graph != "main" or v.op_type not in NATIVE_OPS or v.domain not in ("", "ai.onnx"):
            continue
        if v.verdict in (REFUSED, DIFFERS):
            lower[v.node] = [f"{v.verdict}: {r}" for r in v.reasons]
        else:
            keep.append(v.node)
    return lower, keep
