"""``rnnx``: canonical weights in a .safetensors file, the spec in its metadata.

This is what rnnx saves by default: every other layout is derived from it on demand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rnnx.errors import RNNXError
from rnnx.fileio import read_safetensors, safetensors_metadata, write_safetensors
from rnnx.formats.registry import register_module, settle_spec
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

MARKER = "rnnx"


def to_native(weights: RNNWeights) -> dict[str, np.ndarray]:
    return dict(weights.tensors)


def from_native(tensors: dict[str, np.ndarray], spec: RNNSpec | None) -> RNNWeights:
    if spec is None:
        raise RNNXError("canonical tensors: expected a spec alongside them, found none; pass spec=SPEC")
    return RNNWeights(spec, tensors)


def sniff(path: Path) -> bool:
    return safetensors_metadata(path).get("format") == MARKER


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    tensors, meta = read_safetensors(path)
    if meta.get("format") != MARKER or "spec" not in meta:
        raise RNNXError(f"{path}: expected rnnx canonical weights (metadata format=rnnx with a spec), found none")
    settled = settle_spec(path, spec, meta["spec"])
    assert settled is not None
    return RNNWeights(settled, tensors)


def write(weights: RNNWeights, path: Path) -> None:
    write_safetensors(path, weights.tensors, {"format": MARKER, "spec": str(weights.spec)})


register_module(globals(), name="rnnx", extensions=(".safetensors",), description="canonical weights, named by layer, direction and gate (.safetensors)")
