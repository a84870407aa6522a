"""The order in which ``rnnx fuse`` runs its passes, written once as data (:data:`FUSE_ORDER`):
the fuse pipeline runs it for real, and ``rnnx inspect`` runs it on a copy to say what fuse
would do; :func:`rnnx.graphs.passes.run_passes` repeats it to a fixed point.

Cells first (decomposed cells become native one-step nodes), then Loops and Scans over the
steps just made, then forward and reversed nodes joined into bidirectional ones, then chains
of steps joined into one node over the sequence. Chains can enable directions (a forward and a
reversed chain of steps become two nodes over the sequence only once chained): the runner's
second sweep joins them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_directions import fuse_directions
from rnnx.graphs.fuse_loops import fuse_loops
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.graphs.linear_terms import products_over_concat
from rnnx.graphs.passes import GraphPass, Pass, Passes, run_passes
from rnnx.pass_result import Declined, PassResult

CELLS = GraphPass("cells", fuse_cells, "fusing decomposed cells")
LOOPS = GraphPass("loops", fuse_loops, "fusing loops over one step")
DIRECTIONS = GraphPass("directions", fuse_directions)
CHAINS = GraphPass("chains", fuse_steps, "fusing chains of steps")
FUSE_ORDER: tuple[GraphPass, ...] = (CELLS, LOOPS, DIRECTIONS, CHAINS)


class FusePasses:
    """Each fuse pass's result by name (a pass not in the order ran nothing), in the order they ran."""

    def __init__(self, passes: Passes) -> None:
        self.passes = passes

    def _get(self, name: str) -> PassResult[Any]:
        return self.passes.results.get(name) or PassResult()

    @property
    def cells(self) -> PassResult[str]:
        return self._get(CELLS.name)

    @property
    def loops(self) -> PassResult[Any]:
        return self._get(LOOPS.name)

    @property
    def directions(self) -> PassResult[Any]:
        return self._get(DIRECTIONS.name)

    @property
    def chains(self) -> PassResult[Any]:
        return self._get(CHAINS.name)

    @property
    def changed(self) -> bool:
        return self.passes.changed

    @property
    def left_alone(self) -> list[Declined]:
        return self.passes.left_alone

    def found(self) -> dict[str, list[Any]]:
        """What each pass rewrote, as fuse's report and inspect's JSON write it."""
        return {"cells": list(self.cells.rewritten), "loops": [p.to_json() for p in self.loops.rewritten],
                "bidirectional": [p.to_json() for p in self.directions.rewritten],
                "chains": [p.to_json() for p in self.chains.rewritten]}


def run_fuse_passes(model: Any, order: Sequence[Pass] = FUSE_ORDER, max_rounds: int | None = None) -> tuple[Any, FusePasses]:
    """``model`` with every pass of ``order`` applied to a fixed point (in place where shape
    inference was not needed; use the returned model either way), and what each pass did."""
    import onnx

    if products_over_concat(model):  # the passes split such products' weights by the parts' inferred sizes
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001  shape inference is a help, not a requirement
            pass
    return model, FusePasses(run_passes(model, order, max_rounds))
