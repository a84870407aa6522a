"""What both Keras HDF5 readers (Keras 3's ``.weights.h5`` and the legacy ``.h5``) need from
h5py: importing it on first use, an h5py error in one line, and the budget the arrays read
from one file share."""

from __future__ import annotations

from typing import Any

from rnnx.errors import RNNXError


def import_h5py(why: str) -> Any:
    try:
        import h5py
    except ImportError:
        raise RNNXError(f"{why} needs h5py, which is not installed; pip install 'rnnx[keras]'") from None
    return h5py


# What HDF5's own small objects (a scalar's fill value, say) may add beyond the file's arrays.
_SLACK = 1 << 16


class Budget:
    """What the arrays read so far may claim together: Keras stores them uncompressed, so all
    of them fit inside the file; a claim beyond it is a damaged or hostile file."""

    def __init__(self, file_size: int) -> None:
        self.left = file_size + _SLACK

    def take(self, nbytes: int, where: str, shape: tuple[int, ...]) -> None:
        if nbytes > self.left:
            raise RNNXError(f"{where}: shape {shape} claims more data than the file holds; the file is damaged")
        self.left -= nbytes
