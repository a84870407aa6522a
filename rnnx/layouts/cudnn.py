"""cuDNN's packed RNN weight space, as PyTorch and cuDNN 9 lay it out: the offset table,
pack, unpack and what cuDNN cannot hold (pure numpy).

Pseudo-layer ``p = layer * directions + direction``. The space holds every pseudo-layer's
matrices first, then every bias (double-bias mode, or none with ``no_bias``)::

    [ W(p=0) R(p=0) Proj(p=0) | W(p=1) ... | bW(p=0) bR(p=0) | bW(p=1) bR(p=1) | ... ]

Inside each block gates follow cuDNN's linLayerID (:data:`LIN_LAYER_IDS`); each matrix is
(hidden, in) row-major, as PyTorch's rows already are. The offset table is the single
description of the blob; packing and unpacking both walk it, and so does jax's vector
(:mod:`rnnx.layouts.jax`), which is this space. With ``no_bias`` the blob is cuDNN's
CUDNN_RNN_NO_BIAS weight space (matrices only); PyTorch instead keeps double-bias mode
with zero biases, so its buffer for a bias=False module is this blob followed by a zero
block (both checked on a GPU by :mod:`rnnx.engines.cudnn_check`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rnnx.errors import RNNXError, refuse_spec
from rnnx.spec import RNNSpec
from rnnx.tensor_pieces import Pieces
from rnnx.weights import RNNWeights, tensor_name

#: linLayerID of each gate, for the input matrices (W) and the recurrent ones (R);
#: the LSTM projection is linLayerID 8. Biases share their matrix's id.
LIN_LAYER_IDS: dict[str, dict[str, dict[str, int]]] = {
    "lstm": {"W": {"i": 0, "f": 1, "g": 2, "o": 3}, "R": {"i": 4, "f": 5, "g": 6, "o": 7}},
    "gru": {"W": {"r": 0, "z": 1, "n": 2}, "R": {"r": 3, "z": 4, "n": 5}},
    "rnn_tanh": {"W": {"h": 0}, "R": {"h": 1}},
    "rnn_relu": {"W": {"h": 0}, "R": {"h": 1}},
}
PROJ_LIN_LAYER_ID = 8


@dataclass(frozen=True)
class BlobEntry:
    """One tensor inside the blob. ``kind`` is W, R, proj (matrices) or bW, bR (biases)."""

    pseudo_layer: int
    layer: int
    direction: str
    lin_layer_id: int
    gate: str | None
    kind: str
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def canonical_name(self) -> str:
        return tensor_name(self.layer, self.direction, self.kind, self.gate)

    @property
    def is_bias(self) -> bool:
        return self.kind in ("bW", "bR")


def refusals(spec: RNNSpec) -> list[str]:
    """Why cuDNN's RNN modes cannot hold ``spec`` (empty when they can)."""
    reasons = []
    if spec.peepholes:
        reasons.append("cuDNN LSTMs have no peepholes (the output gate would need c(t), which cuDNN returns only after the call)")
    if not spec.reset_after:
        reasons.append(
            "cuDNN GRUs apply the reset gate after the recurrent product (ONNX linear_before_reset=1); a reset_before GRU has no cuDNN form"
        )
    if spec.direction == "reverse":
        reasons.append("cuDNN has no reverse-only mode (only unidirectional and bidirectional)")
    if not spec.uses_default_activations:
        reasons.append(f"cuDNN's RNN modes compute with fixed sigmoid/tanh (or an RNN's tanh/relu); {spec.activation_text} has no cuDNN form")
    return reasons


def check_expressible(spec: RNNSpec) -> None:
    refuse_spec(spec, refusals(spec), "keep these weights in onnx or rnnx form")


def offset_table(spec: RNNSpec) -> list[BlobEntry]:
    """Every tensor of the blob, in blob order, with its element offset and shape."""
    check_expressible(spec)
    ids = LIN_LAYER_IDS[spec.cell]
    hidden, out = spec.hidden_size, spec.output_size
    entries: list[BlobEntry] = []
    offset = 0

    def add(p: int, layer: int, direction: str, lin_id: int, gate: str | None, kind: str, shape: tuple[int, ...]) -> None:
        nonlocal offset
        entries.append(BlobEntry(p, layer, direction, lin_id, gate, kind, offset, shape))
        offset += int(np.prod(shape))

    cells = [(layer, d) for layer in range(spec.num_layers) for d in spec.directions]
    for p, (layer, direction) in enumerate(cells):
        for gate, lin_id in ids["W"].items():
            add(p, layer, direction, lin_id, gate, "W", (hidden, spec.layer_input_size(layer)))
        for gate, lin_id in ids["R"].items():
            add(p, layer, direction, lin_id, gate, "R", (hidden, out))
        if spec.proj_size:
            add(p, layer, direction, PROJ_LIN_LAYER_ID, None, "proj", (spec.proj_size, hidden))
    if spec.bias:
        for p, (layer, direction) in enumerate(cells):
            for kind, matrix_kind in (("bW", "W"), ("bR", "R")):
                for gate, lin_id in ids[matrix_kind].items():
                    add(p, layer, direction, lin_id, gate, kind, (hidden,))
    return entries


def blob_size(spec: RNNSpec) -> int:
    table = offset_table(spec)
    return table[-1].offset + table[-1].size


def to_native(weights: RNNWeights) -> np.ndarray:
    """Pack into one 1-D array of the weights' dtype: one allocation, one copy per tensor."""
    table = offset_table(weights.spec)
    blob = np.empty(table[-1].offset + table[-1].size, dtype=weights.dtype)
    for entry in table:
        blob[entry.offset : entry.offset + entry.size] = weights[entry.canonical_name].reshape(-1)
    return blob


def blob_pieces(weights: RNNWeights) -> Pieces:
    """The blob as :class:`Pieces`, the canonical tensors in the table's order: what a writer
    streams into a file without packing it in memory."""
    table = offset_table(weights.spec)
    return Pieces((table[-1].offset + table[-1].size,), tuple(weights[e.canonical_name] for e in table))


def from_native(blob: np.ndarray, spec: RNNSpec | None) -> RNNWeights:
    """Unpack a blob. The canonical tensors are views into ``blob``: nothing is copied."""
    if spec is None:
        raise RNNXError("cuDNN blob: the blob does not describe itself; pass its spec (spec=SPEC)")
    blob = np.asarray(blob)
    if blob.ndim != 1:
        blob = blob.reshape(-1)
    table = offset_table(spec)
    expected = table[-1].offset + table[-1].size
    if blob.size != expected:
        raise RNNXError(
            f"cuDNN blob: expected {expected} elements for spec {spec}, found {blob.size}; "
            "check spec= (sizes, layers, bidirectional, proj, no_bias)"
        )
    return RNNWeights(spec, {e.canonical_name: blob[e.offset : e.offset + e.size].reshape(e.shape) for e in table})


def table_as_dicts(spec: RNNSpec, itemsize: int = 4) -> list[dict[str, Any]]:
    """The offset table as plain rows (JSON-ready), each with its byte offset at ``itemsize``."""
    rows = []
    for e in offset_table(spec):
        row = asdict(e)
        row["shape"] = list(e.shape)
        row["byte_offset"] = e.offset * itemsize
        rows.append(row)
    return rows


def stored_table(spec: RNNSpec) -> list[list[object]]:
    """The compact table a blob file records beside the blob: [offset, shape] per entry."""
    return [[e.offset, list(e.shape)] for e in offset_table(spec)]
