"""``jax``: the flat weight vector of ``jax.experimental.rnn`` (LSTM only, double bias) in
an .npz file beside its spec. The vector's layout, cuDNN's weight space, is
:mod:`rnnx.layouts.jax`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, check_archive, library_write, require_file
from rnnx.formats.registry import register_module, settle_spec
from rnnx.layouts.jax import from_native, refusals, to_native
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

NPZ_KEY = "weights"


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    path = require_file(path)
    check_archive(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001  only numpy/zipfile parsing runs here: any failure means a damaged file
        raise RNNXError(f"{path}: cannot read as .npz ({exc}); the file is damaged or not numpy's format") from None
    if NPZ_KEY not in arrays:
        raise RNNXError(f"{path}: expected an array named {NPZ_KEY!r} (the flat vector), found {sorted(arrays) or 'none'}")
    spec = settle_spec(path, spec, str(arrays["spec"]) if "spec" in arrays else None)
    return from_native(arrays[NPZ_KEY], spec)


def write(weights: RNNWeights, path: Path) -> None:
    vector = to_native(weights)
    with atomic_output(path) as tmp, library_write(path):
        with open(tmp, "wb") as f:
            arrays: dict[str, Any] = {NPZ_KEY: vector, "spec": np.array(str(weights.spec))}  # Any: as a dict of arrays, mypy also matches savez's allow_pickle
            np.savez(f, **arrays)


register_module(globals(), name="jax", refusals=refusals, extensions=(".npz",),
                description="jax.experimental.rnn's flat LSTM vector (.npz holding 'weights' and 'spec')")
