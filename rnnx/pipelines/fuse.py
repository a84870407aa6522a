"""``rnnx fuse``: decomposed cells to native one-step nodes, step chains to one node, checked.

The passes: :func:`~rnnx.graphs.legalize.drop_newer_attributes` (so that the
input runs at all), :func:`~rnnx.graphs.fuse_cells.fuse_cells`, then
:func:`~rnnx.graphs.fuse_steps.fuse_steps`. The result is run in ONNX Runtime against
the input on the same seeded inputs at the input's own shapes; a mismatch is a parity
failure and nothing is written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import parity, progress
from rnnx.errors import ParityError
from rnnx.fileio import refuse_overwriting
from rnnx.formats.onnx_build import save_model
from rnnx.formats.onnx_read import data_files, load_model
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.graphs.legalize import drop_newer_attributes
from rnnx.graphs.linear_terms import products_over_concat
from rnnx.pass_result import Declined
from rnnx.pipelines.rewrite_check import check_rewrite_size, compare_models
from rnnx.tolerance import Tolerances


@dataclass
class FuseReport:
    output: str
    nodes_before: int
    nodes_after: int
    cells: list[str] = field(default_factory=list)
    chains: list[dict[str, Any]] = field(default_factory=list)
    left_alone: list[Declined] = field(default_factory=list)
    check: parity.ParityReport | None = None
    tolerances: dict[str, Any] = field(default_factory=dict)  # what the caller set (Tolerances.to_json); the rest is by dtype

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output, "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
            "cells": self.cells, "chains": self.chains, "left_alone": [d.to_json() for d in self.left_alone],
            "check": None if self.check is None else {"passed": bool(self.check), "tolerances": self.tolerances, "rows": self.check.to_json()},
        }

    def __str__(self) -> str:
        lines = [f"{self.nodes_before} nodes -> {self.nodes_after} nodes, written to {self.output}"]
        lines += [f"cell: {c} became a one-step native node" for c in self.cells]
        lines += [f"chain: {c['steps']} {c['op']} steps over {c['source']} fused into {c['node']}" + (" (sequence length now dynamic)" if c.get("dynamic_seq") else "") for c in self.chains]
        lines += [f"left alone: {d} (rule {d.rule})" for d in self.left_alone]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


def fuse_file(source: Path, output: Path, check: bool = True, seed: int = 0, tolerances: Tolerances | None = None) -> FuseReport:
    """Fuse ``source`` into ``output``; the result is checked against the input in ONNX Runtime,
    each graph output held to ``tolerances`` (by output name; default: its dtype's), and
    nothing is written if it differs (:class:`~rnnx.errors.ParityError`)."""
    import onnx

    source, output = Path(source), Path(output)
    refuse_overwriting([source, *data_files(source)], {"-o": output, "-o's external data": output.with_name(output.name + ".data")})
    progress.step(f"reading {source.name}")
    original = load_model(source)
    check_rewrite_size(original, source)
    drop_newer_attributes(original, strict=False)  # a graph from another tool: repair what the converter left, refuse nothing
    model = copy.deepcopy(original)
    before = len(model.graph.node)
    if products_over_concat(model):  # the passes split such products' weights by the parts' inferred sizes
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001  shape inference is a help, not a requirement
            pass
    progress.step("fusing decomposed cells")
    cells = fuse_cells(model)
    progress.step("fusing chains of steps")
    chains = fuse_steps(model)
    report = FuseReport(str(output), before, len(model.graph.node), cells.rewritten, chains.rewritten, cells.left_alone + chains.left_alone,
                        tolerances=tolerances.to_json() if tolerances else {})
    if check and (cells or chains):
        progress.step("checking against the input in ONNX Runtime")
        report.check = compare_models(original, model, seed, str(source), tolerances)
        if not report.check:
            raise ParityError(f"the fused model differs from {source} in ONNX Runtime ({report.check.failure()}); nothing was written:\n{report.check}")
    progress.step(f"writing {output.name}")
    save_model(model, output)
    return report
