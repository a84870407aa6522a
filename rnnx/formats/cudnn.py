"""``cudnn``: cuDNN's packed weight space in a file. The blob's layout (offset table, pack,
unpack, refusals) is :mod:`rnnx.layouts.cudnn`.

On disk the blob is either

- a .safetensors file holding one 1-D tensor ``blob``, with the spec and the offset table in
  its metadata: a file written under another table is refused; or
- a headerless ``.bin`` file (:mod:`rnnx.formats.cudnn_raw`): the same blob as raw
  little-endian values, the bytes a C++ program reads with ``fread`` into cuDNN's weight space. It
  says nothing about itself, so ``spec=`` is required and ``dtype=`` says its element type.
"""

from __future__ import annotations

import json
from pathlib import Path

from rnnx.errors import RNNXError
from rnnx.fileio import read_safetensors, safetensors_metadata, write_safetensors
from rnnx.formats import cudnn_raw
from rnnx.formats.registry import register_module, settle_spec
from rnnx.layouts.cudnn import blob_pieces, from_native, refusals, stored_table, to_native
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

MARKER = "rnnx.cudnn"
BLOB_KEY = "blob"


def sniff(path: Path) -> bool:
    return cudnn_raw.is_raw(path) or safetensors_metadata(path).get("format") == MARKER


def read(path: Path, select: str | None, spec: RNNSpec | None, dtype: str | None = None) -> RNNWeights:
    if cudnn_raw.is_raw(path):
        return cudnn_raw.read(path, spec, dtype)
    if dtype is not None:
        raise RNNXError(f"{path}: dtype= applies to headerless {cudnn_raw.SUFFIX} blobs; this .safetensors blob records its own dtype; drop dtype=")
    tensors, meta = read_safetensors(path)
    if meta.get("format") != MARKER or BLOB_KEY not in tensors:
        raise RNNXError(f"{path}: expected a cuDNN blob file (metadata format={MARKER}, tensor {BLOB_KEY!r}), found neither")
    spec = settle_spec(path, spec, meta.get("spec"))
    if spec is None:
        raise RNNXError(f"{path}: the blob carries no spec in its metadata; pass spec=SPEC")
    if "table" in meta:
        try:
            recorded = json.loads(meta["table"])
        except (ValueError, RecursionError):
            raise RNNXError(f"{path}: the blob's offset table in its metadata is not valid JSON; the file is damaged") from None
        if recorded != stored_table(spec):
            raise RNNXError(f"{path}: the blob's offset table differs from rnnx's for spec {spec}; it was written by another layout")
    return from_native(tensors[BLOB_KEY], spec)


def write(weights: RNNWeights, path: Path, dtype: str | None = None) -> None:
    if cudnn_raw.is_raw(path):
        cudnn_raw.write(weights, path, dtype)
        return
    if dtype is not None:
        raise RNNXError(f"{path}: dtype= applies to headerless {cudnn_raw.SUFFIX} blobs; a .safetensors blob keeps the weights' own dtype; drop dtype=")
    write_safetensors(
        path,
        {BLOB_KEY: blob_pieces(weights)},
        {"format": MARKER, "spec": str(weights.spec), "table": json.dumps(stored_table(weights.spec), separators=(",", ":"))},
    )


register_module(globals(), name="cudnn", to_native=to_native, refusals=refusals, extensions=(".safetensors", cudnn_raw.SUFFIX), file_options=("dtype",),
                description="cuDNN's packed weight space, one 1-D blob (.safetensors with spec and offset table, or raw .bin with spec= and dtype=)")
