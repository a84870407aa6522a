"""``rnnx fuse``: decomposed cells to native one-step nodes, step chains to one node, checked.

The passes, in the order :func:`~rnnx.graphs.fuse_passes.run_fuse_passes` holds (``rnnx
inspect`` runs the same on a copy): :func:`~rnnx.graphs.legalize.drop_newer_attributes` (so that the
input runs at all), :func:`~rnnx.graphs.fuse_cells.fuse_cells`,
:func:`~rnnx.graphs.fuse_loops.fuse_loops` (Loops and Scans over the steps just made),
:func:`~rnnx.graphs.fuse_directions.fuse_directions` (a forward node and one over the reversed
sequence become one bidirectional node), then
:func:`~rnnx.graphs.fuse_steps.fuse_steps`. The result is run in ONNX Runtime against
the input on the same seeded inputs, at shapes the input itself runs
(:mod:`rnnx.pipelines.rewrite_check`: the recorded example, batch 1, larger; or the sizes
given); a mismatch is a parity failure and nothing is written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.fileio import refuse_overwriting
from rnnx.formats.onnx_build import save_model
from rnnx.formats.onnx_prune import prune
from rnnx.formats.onnx_read import data_files, load_model
from rnnx.graphs.fuse_passes import run_fuse_passes
from rnnx.graphs.index import all_graphs
from rnnx.graphs.legalize import drop_newer_attributes
from rnnx.layouts.onnx import NATIVE_OPS
from rnnx.pass_result import Declined
from rnnx.pipelines.rewrite_check import RewriteCheck, RewriteDiffers, check_rewrite_size, compare_models
from rnnx.shapes.rewrite_plan import plan_shapes
from rnnx.tolerance import Tolerances


@dataclass
class FuseReport:
    output: str
    nodes_before: int
    nodes_after: int
    cells: list[str] = field(default_factory=list)
    chains: list[dict[str, Any]] = field(default_factory=list)
    loops: list[dict[str, Any]] = field(default_factory=list)
    bidirectional: list[dict[str, Any]] = field(default_factory=list)
    native: int = 0  # native recurrent nodes in the result
    left_alone: list[Declined] = field(default_factory=list)
    check: RewriteCheck | None = None  # the check against the input, case by case
    tolerances: dict[str, Any] = field(default_factory=dict)  # what the caller set (Tolerances.to_json); the rest is by dtype

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output, "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
            "cells": self.cells, "chains": self.chains, "loops": self.loops, "bidirectional": self.bidirectional, "native": self.native,
            "left_alone": [d.to_json() for d in self.left_alone],
            "check": None if self.check is None else self.check.to_json(self.tolerances),
        }

    def __str__(self) -> str:
        lines = [f"{self.nodes_before} nodes -> {self.nodes_after} nodes, written to {self.output}"]
        lines += [f"cell: {c} became a one-step native node" for c in self.cells]
        lines += [f"chain: {c['steps']} {c['op']} steps over {c['source']} fused into {c['node']}" + (" (sequence length now dynamic)" if c.get("dynamic_seq") else "")
                  for c in self.chains]
        lines += [f"loop: {c['loop']} {c['replaced']} over {c['source']} became the native {c['op']} node {c['node']}" for c in self.loops]
        lines += [f"bidirectional: {c['forward']} and {c['reverse']} (over the reversed sequence) joined into {c['node']}" for c in self.bidirectional]
        lines += [f"left alone: {d} (rule {d.rule})" for d in self.left_alone]
        if not (self.cells or self.chains or self.loops or self.left_alone):
            lines.append("nothing to fuse: no decomposed LSTM, GRU or RNN cell, chain of steps, or Loop or Scan over one step was found"
                         + (f" (its {self.native} LSTM/GRU/RNN node(s) are native already)" if self.native else ""))
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


def _count_nodes(model: Any) -> int:
    """Nodes in the graph and every Loop, Scan and If body: a Loop over a cell is one node
    outside and the whole cell inside."""
    return sum(len(g.node) for g in all_graphs(model.graph))


def fuse_file(source: Path, output: Path, check: bool = True, seed: int = 0, tolerances: Tolerances | None = None,
              dims: dict[str, int] | None = None, input_shapes: dict[str | None, list[int]] | None = None) -> FuseReport:
    """Fuse ``source`` into ``output``; the result is checked against the input in ONNX Runtime,
    each graph output held to ``tolerances`` (by output name; default: its dtype's), and
    nothing is written if it differs (:class:`~rnnx.pipelines.rewrite_check.RewriteDiffers`, a ParityError). The check runs where
    the input runs (see :mod:`rnnx.pipelines.rewrite_check`); ``dims`` sets a dynamic
    dimension's size by its label, ``input_shapes`` an input's whole shape (a shape under the
    key None: the one input of a model that has one)."""
    original = read_source(Path(source), Path(output), dims, input_shapes)
    drop_newer_attributes(original, strict=False)  # a graph from another tool: repair what the converter left, refuse nothing
    before = _count_nodes(original)
    model, passes = run_fuse_passes(copy.deepcopy(original))
    if passes.changed:
        prune(model)  # the replaced cells' weights and nodes: nothing reads them now
    found = passes.found()
    report = FuseReport(str(output), before, _count_nodes(model), found["cells"], found["chains"], found["loops"], found["bidirectional"],
                        left_alone=passes.left_alone, tolerances=tolerances.to_json() if tolerances else {},
                        native=sum(n.op_type in NATIVE_OPS for g in all_graphs(model.graph) for n in g.node))
    report.check = write_checked(original, model, Path(source), Path(output), "fused", check and passes.changed, seed, tolerances, dims, input_shapes)
    return report


def read_source(source: Path, output: Path, dims: dict[str, int] | None, input_shapes: dict[str | None, list[int]] | None, lowering: bool = False) -> Any:
    """The model at ``source`` to rewrite into ``output`` (refused before any work where ``output``
    would overwrite it, it is too large to check, or a size names nothing in it): fuse's and lower's."""
    refuse_overwriting([source, *data_files(source)], {"-o": output, "-o's external data": output.with_name(output.name + ".data")})
    progress.step(f"reading {source.name}")
    original = load_model(source)
    check_rewrite_size(original, source, lowered=sum(n.op_type in NATIVE_OPS for g in all_graphs(original.graph) for n in g.node) if lowering else 0)
    if dims or input_shapes:
        plan_shapes(original, dims=dims, input_shapes=input_shapes)
    return original


def write_checked(original: Any, model: Any, source: Path, output: Path, done: str, check: bool, seed: int, tolerances: Tolerances | None,
                  dims: dict[str, int] | None, input_shapes: dict[str | None, list[int]] | None) -> RewriteCheck | None:
    """Write ``model`` to ``output`` where, with ``check``, it holds against ``original`` in ONNX
    Runtime; else raise :class:`~rnnx.pipelines.rewrite_check.RewriteDiffers` (``done``: what was done to it) and write nothing."""
    report = None
    if check:
        progress.step("checking against the input in ONNX Runtime")
        report = compare_models(original, model, seed, str(source), tolerances, dims, input_shapes)
        if not report:
            raise RewriteDiffers(f"the {done} model differs from {source} in ONNX Runtime ({report.failure()}); nothing was written", report)
    progress.step(f"writing {output.name}")
    save_model(model, output)
    return report
