"""What both Keras HDF5 readers (Keras 3's ``.weights.h5`` and the legacy ``.h5``) need from
h5py: importing it on first use, and an h5py error in one line."""

from __future__ import annotations

from typing import Any

from rnnx.errors import RNNXError


def import_h5py(why: str) -> Any:
    try:
        import h5py
    except ImportError:
        raise RNNXError(f"{why} needs h5py, which is not installed; pip install 'rnnx[keras]'") from None
    return h5py


def one_line(exc: BaseException) -> str:
    """An h5py or JSON error as one short line (h5py's span several)."""
    return " ".join(str(exc).split())[:160] or type(exc).__name__
