"""A tensor that is never assembled: :class:`Pieces`, whose bytes are its parts' bytes in order.

Most layouts differ from the canonical form only by the order of whole gates: torch's
``weight_ih_l0`` is its gates' matrices one after another, ONNX's ``W`` is the directions'
stacks one after another, and cuDNN's blob is every tensor in its table's order. Each is
the concatenation of canonical arrays (often views of a memory-mapped file), so a writer can
stream the parts straight to the output file: peak memory stays one part, however large
the model. This module is pure numpy (layouts build Pieces); :func:`rnnx.fileio.stream`
writes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

#: Writers take the elements in chunks of at most this many bytes, so that a conversion to
#: another dtype on the way holds one chunk's copy, not one part's.
CHUNK_BYTES = 16 << 20


@dataclass(frozen=True)
class Pieces:
    """``shape``'s C-order elements are ``parts``' elements, part after part (each part in C order)."""

    shape: tuple[int, ...]
    parts: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("Pieces: at least one part is needed (its dtype is the tensor's)")
        counts = sum(int(p.size) for p in self.parts)
        if counts != int(np.prod(self.shape, dtype=np.int64)):
            raise ValueError(f"Pieces: parts hold {counts} elements, shape {self.shape} needs {int(np.prod(self.shape))}")
        if len({p.dtype for p in self.parts}) != 1:
            raise ValueError(f"Pieces: parts differ in dtype ({sorted({str(p.dtype) for p in self.parts})})")

    @classmethod
    def of(cls, parts: Sequence[np.ndarray], shape: Sequence[int] | None = None) -> Pieces:
        """Parts concatenated along their first axis (``shape`` is then inferred), or into ``shape``."""
        parts = tuple(np.asarray(p) for p in parts)
        if shape is None:
            shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
        return cls(tuple(int(d) for d in shape), parts)

    @property
    def dtype(self) -> np.dtype:
        return self.parts[0].dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def array(self) -> np.ndarray:
        """The tensor assembled in memory, a new writable array (one copy): for consumers that need one array."""
        return np.concatenate([p.reshape(-1) for p in self.parts]).reshape(self.shape)

    def joined(self) -> np.ndarray | None:
        """The tensor as one view of its parts' memory when they lie back to back in one buffer
        (gates already in this layout's order in the source file): no copy. None otherwise."""
        first = self.parts[0]
        if not all(p.flags.c_contiguous for p in self.parts) or len({id(_root(p)) for p in self.parts}) != 1:
            return None
        at = first.__array_interface__["data"][0]
        for part in self.parts:
            if part.__array_interface__["data"][0] != at:
                return None
            at += part.nbytes
        strides = tuple(int(np.prod(self.shape[k + 1:], dtype=np.int64)) * first.itemsize for k in range(len(self.shape)))
        view = np.lib.stride_tricks.as_strided(first, shape=self.shape, strides=strides, writeable=False)
        return view

    def chunks(self, max_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        """The elements in order, as 1-D views of at most ``max_bytes`` each (no copy)."""
        for part in self.parts:
            flat = part.reshape(-1)
            step = max(1, max_bytes // max(part.dtype.itemsize, 1))
            for start in range(0, flat.size, step):
                yield flat[start:start + step]


def as_pieces(value: np.ndarray | Pieces) -> Pieces:
    return value if isinstance(value, Pieces) else Pieces(tuple(np.shape(value)), (np.asarray(value),))


def _root(array: np.ndarray) -> object:
    """The object that owns an array's memory (a view's base, followed to its end)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array
