"""ONNX files whose weights are streamed from their parts, never held as a second copy.

A :class:`PlannedModel` is a complete ModelProto in which the large initializers hold no
data yet, beside the :class:`~rnnx.tensor_pieces.Pieces` each one's bytes come from. It is
checked by onnx's checker as it will be written (:func:`check_planned`), then written
(:func:`write_planned`) in one of two ways:

- one file, as protobuf's wire format allows: the graph is serialised without those
  initializers, then each is appended as its header and a ``raw_data`` record whose bytes
  are streamed from its parts; every length is known from the shapes beforehand. Readers
  (onnx, ONNX Runtime, TensorRT's parser) see an ordinary model;
- past protobuf's 2 GiB limit, as external data: every large tensor's bytes go to
  ``<name>.data`` beside the model, each at an offset aligned to 4096 bytes (so that ONNX
  Runtime can map it), and the model records where.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rnnx import progress
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.fileio import stream
from rnnx.formats.onnx_lazy import stored_tensors
from rnnx.formats.onnx_prune import prune
from rnnx.formats.protobuf_wire import len_header
from rnnx.tensor_pieces import Pieces

ALIGN = 4096  # external data offsets: a page, so that ONNX Runtime may map each tensor
INLINE_BYTES = 1024  # external mode: tensors smaller than this stay in the model, as onnx's own size_threshold does
# Field numbers of onnx.proto that the stream writes by hand.
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9


@dataclass
class PlannedModel:
    """``model``'s initializers named in ``pieces`` hold no data: their bytes are the pieces'."""

    model: Any
    pieces: dict[str, Pieces] = field(default_factory=dict)

    @property
    def planned_bytes(self) -> int:
        return sum(p.nbytes for p in self.pieces.values())


def planned_tensor(name: str, pieces: Pieces) -> Any:
    """An initializer's header (name, dtype, dims), its data to come from ``pieces``."""
    from onnx import TensorProto, helper

    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = helper.np_dtype_to_tensor_dtype(pieces.dtype)
    tensor.dims.extend(pieces.shape)
    return tensor


def materialise(plan: PlannedModel) -> Any:
    """The model with every planned tensor's data in it (for models used in memory)."""
    for tensor in plan.model.graph.initializer:
        if tensor.name in plan.pieces:
            tensor.raw_data = np.ascontiguousarray(plan.pieces[tensor.name].array(), dtype=plan.pieces[tensor.name].dtype.newbyteorder("<")).tobytes()
    plan.pieces = {}
    return plan.model


def check_planned(plan: PlannedModel) -> None:
    """onnx's checker (full check, shape inference included) on the model as it will be
    written: the planned tensors point into a sparse placeholder file of the right size,
    which takes no disk space and is never read."""
    import onnx
    from onnx import TensorProto

    copy = onnx.ModelProto()
    copy.CopyFrom(plan.model)
    offset = 0
    for tensor in copy.graph.initializer:
        if tensor.name in plan.pieces:
            offset = _point_external(tensor, "weights.data", offset, plan.pieces[tensor.name].nbytes)
            tensor.data_location = TensorProto.EXTERNAL
    with tempfile.TemporaryDirectory(prefix="rnnx-check-") as folder:
        with open(Path(folder) / "weights.data", "wb") as f:
            f.truncate(offset)
        onnx.save(copy, str(Path(folder) / "model.onnx"))
        try:
            onnx.checker.check_model(str(Path(folder) / "model.onnx"), full_check=True)
        except Exception as exc:  # the checker's ValidationError: a bug in rnnx, but say what failed
            raise RNNXError(f"the ONNX model rnnx built does not pass onnx.checker ({one_line(exc, CAUSE_CHARS)}); please report this") from exc


def _point_external(tensor: Any, location: str, offset: int, length: int) -> int:
    """Record ``tensor``'s data at the next aligned offset from ``offset``; returns its end."""
    start = -(-offset // ALIGN) * ALIGN
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(start)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return start + length


def write_planned(plan: PlannedModel, tmp: Path, final_name: str, external: bool) -> None:
    """Write the model to ``tmp`` (renamed later to ``final_name`` in the same folder): one
    file, or with external data in ``<final_name>.data`` (see the module's docstring). What
    nothing reads is pruned first, as every writer of rnnx's does (rnnx.formats.onnx_prune)."""
    for name in prune(plan.model).initializers:
        plan.pieces.pop(name, None)
    shown = progress.Bytes(f"writing {final_name}", plan.planned_bytes)

    def stream_tensor(f: BinaryIO, name: str) -> None:
        stream(f, plan.pieces[name], shown=shown)

    if external:
        _write_external(plan, tmp, final_name, stream_tensor)
    else:
        _write_one_file(plan, tmp, stream_tensor)


def _write_one_file(plan: PlannedModel, tmp: Path, stream_tensor: Any) -> None:
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(plan.model)
    graph = model.graph
    kept = [t for t in graph.initializer if t.name not in plan.pieces]
    headers = [t.SerializeToString() for t in graph.initializer if t.name in plan.pieces]
    names = [t.name for t in graph.initializer if t.name in plan.pieces]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph_bytes = graph.SerializeToString()
    model.ClearField("graph")
    records = []
    for name, header in zip(names, headers):
        n = plan.pieces[name].nbytes
        inner = header + len_header(_TENSOR_RAW_DATA, n)
        records.append((len_header(_GRAPH_INITIALIZER, len(inner) + n) + inner, name))
    graph_length = len(graph_bytes) + sum(len(head) + plan.pieces[name].nbytes for head, name in records)
    with open(tmp, "wb") as f:
        f.write(model.SerializeToString())
        f.write(len_header(_MODEL_GRAPH, graph_length))
        f.write(graph_bytes)
        for head, name in records:
            f.write(head)
            stream_tensor(f, name)


def _write_external(plan: PlannedModel, tmp: Path, final_name: str, stream_tensor: Any) -> None:
    import onnx
    from onnx import TensorProto

    location = final_name + ".data"
    model = plan.model
    offset = 0
    planned = [t for t in model.graph.initializer if t.name in plan.pieces]
    # The planned initializers hold no raw_data yet: every tensor that does is one built inline (a lowered layer's Constants).
    inline = [t for t in stored_tensors(model.graph) if t.HasField("raw_data") and len(t.raw_data) >= INLINE_BYTES]
    with open(tmp.with_name(location), "wb") as f:
        for k, tensor in enumerate(planned + inline):
            start = -(-offset // ALIGN) * ALIGN
            f.write(b"\0" * (start - offset))
            if k < len(planned):
                stream_tensor(f, tensor.name)
                length = plan.pieces[tensor.name].nbytes
            else:
                f.write(tensor.raw_data)
                length = len(tensor.raw_data)
            offset = _point_external(tensor, location, offset, length)
            tensor.data_location = TensorProto.EXTERNAL
            tensor.ClearField("raw_data")
        os.fsync(f.fileno())
    onnx.save(model, str(tmp))
