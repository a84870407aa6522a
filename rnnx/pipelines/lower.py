"""``rnnx lower``: a model's recurrent nodes as hoisted-input Scans (the TensorRT-oriented
form), checked against the input in ONNX Runtime before anything is written, at shapes the
input itself runs (:mod:`rnnx.pipelines.rewrite_check`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import ParityError
from rnnx.fileio import refuse_overwriting
from rnnx.formats.onnx_build import save_model
from rnnx.formats.onnx_read import data_files, load_model
from rnnx.graphs.index import all_graphs
from rnnx.graphs.lower import lower_recurrences
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.pass_result import Declined
from rnnx.pipelines.rewrite_check import RewriteCheck, check_rewrite_size, compare_models, plan_shapes
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

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output, "lowered": self.lowered, "left_alone": [d.to_json() for d in self.left_alone],
            "check": None if self.check is None else self.check.to_json(self.tolerances),
        }

    def __str__(self) -> str:
        lines = [f"lowered {len(self.lowered)} node(s) to hoisted-input Scans: {', '.join(self.lowered) or '-'}; written to {self.output}"]
        lines += [f"left alone: {d} (rule {d.rule})" for d in self.left_alone]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


def lower_file(source: Path, output: Path, select: str | None = None, check: bool = True, seed: int = 0,
               tolerances: Tolerances | None = None, dims: dict[str, int] | None = None,
               input_shapes: dict[str | None, list[int]] | None = None) -> LowerReport:
    """Lower ``source``'s recurrent nodes (or ``select``) into ``output``; the result is checked
    against the input in ONNX Runtime, each graph output held to ``tolerances`` (by output
    name; default: its dtype's), and nothing is written if it differs. The check runs where
    the input runs (see :mod:`rnnx.pipelines.rewrite_check`); ``dims`` sets a dynamic
    dimension's size by its label, ``input_shapes`` an input's whole shape."""
    source, output = Path(source), Path(output)
    refuse_overwriting([source, *data_files(source)], {"-o": output, "-o's external data": output.with_name(output.name + ".data")})
    progress.step(f"reading {source.name}")
    original = load_model(source)
    check_rewrite_size(original, source, lowered=sum(n.op_type in NATIVE_OPS for g in all_graphs(original.graph) for n in g.node))
    if dims or input_shapes:  # a size that names nothing in the file is refused before any work
        plan_shapes(original, dims=dims, input_shapes=input_shapes)
    model = copy.deepcopy(original)
    progress.step("lowering recurrences into Scans")
    result = lower_recurrences(model, select)
    report: RewriteCheck | None = None
    if check and result:
        progress.step("checking against the input in ONNX Runtime")
        report = compare_models(original, model, seed, str(source), tolerances, dims, input_shapes)
        if not report:
            raise ParityError(f"the lowered model differs from {source} in ONNX Runtime ({report.failure()}); nothing was written:\n{report}")
    progress.step(f"writing {output.name}")
    save_model(model, output)
    return LowerReport(str(output), result.rewritten, result.left_alone, report, tolerances.to_json() if tolerances else {})
