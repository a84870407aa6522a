"""The order in which ``rnnx fuse`` runs its passes, written once: the fuse pipeline runs it
for real, and ``rnnx inspect`` runs it on a copy to say what fuse would do.

Cells first (decomposed cells become native one-step nodes), then Loops and Scans over the
steps just made, then forward and reversed nodes joined into bidirectional ones, then chains
of steps joined into one node over the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rnnx import progress
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_directions import fuse_directions
from rnnx.graphs.fuse_loops import fuse_loops
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.graphs.linear_terms import products_over_concat
from rnnx.pass_result import Declined, PassResult


@dataclass
class FusePasses:
    """Each pass's result, in the order they ran."""

    cells: PassResult
    loops: PassResult
    directions: PassResult
    chains: PassResult

    @property
    def changed(self) -> bool:
        return bool(self.cells or self.loops or self.directions or self.chains)

    @property
    def left_alone(self) -> list[Declined]:
        return [d for r in (self.cells, self.loops, self.directions, self.chains) for d in r.left_alone]


def run_fuse_passes(model: Any) -> tuple[Any, FusePasses]:
    """``model`` with every pass applied (in place where shape inference was not needed; use
    the returned model either way), and what each pass did."""
    import onnx

    if products_over_concat(model):  # the passes split such products' weights by the parts' inferred sizes
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001  shape inference is a help, not a requirement
            pass
    progress.step("fusing decomposed cells")
    cells = fuse_cells(model)
    progress.step("fusing loops over one step")
    loops = fuse_loops(model)
    directions = fuse_directions(model)
    progress.step("fusing chains of steps")
    chains = fuse_steps(model)
    return model, FusePasses(cells, loops, directions, chains)
