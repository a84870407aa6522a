"""A TensorRT release number, read one way, and the read table column that stands for it.

Versions reach rnnx as the user writes them (``8.6``, ``10.3.0``), as the cited tables name
their columns (``8.6``, ``10.1``; ``10.x`` and ``11.x`` are names, not numbers), and as
TensorRT reports itself (``tensorrt.__version__``: ``10.13.3.9``, ``9.2.0.post12.dev5``). The
parser rules (:mod:`rnnx.engines.tensorrt_parser`) and trtexec's flags
(:mod:`rnnx.engines.trtexec`) each judge a release between two columns they have read by a
neighbour of the same major; :func:`bracket` finds the neighbours, and each caller says which
it needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_RELEASE = re.compile(r"\s*(\d+)\.(\d+)((?:\.\d+)*)")  # major.minor[.patch...]; a tag after it (.post12) only as reported


@dataclass(frozen=True, order=True)
class TensorRTVersion:
    """``major.minor.patch...``, ordered as releases are."""

    parts: tuple[int, ...]

    @classmethod
    def parse(cls, text: object) -> TensorRTVersion | None:
        """``text`` as a user or a table writes a release (digits and dots, at least major.minor);
        None for anything else (``10.x``, ``ten``)."""
        found = _RELEASE.fullmatch(str(text).strip())
        return cls._of(found) if found else None

    @classmethod
    def reported(cls, text: object) -> TensorRTVersion | None:
        """``tensorrt.__version__``: a release number, then perhaps a tag (``.post12.dev5``)."""
        found = _RELEASE.match(str(text))
        return cls._of(found) if found else None

    @classmethod
    def _of(cls, found: re.Match[str]) -> TensorRTVersion:
        rest = tuple(int(p) for p in found.group(3).split(".") if p)
        return cls((int(found.group(1)), int(found.group(2)), *rest))

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def major_minor(self) -> tuple[int, int]:
        return self.parts[0], self.parts[1]

    def __str__(self) -> str:
        return ".".join(map(str, self.parts))


@dataclass(frozen=True)
class Bracket:
    """The read columns around a release: its own (same major and minor), else the nearest read
    below and above it within its major (None where there is none)."""

    own: str | None
    below: str | None
    above: str | None


def bracket(wanted: TensorRTVersion, read: Mapping[str, TensorRTVersion]) -> Bracket:
    """Where ``wanted`` falls among the ``read`` columns (column name -> the release it read)."""
    key = wanted.major_minor
    own = next((name for name, v in read.items() if v.major_minor == key), None)
    if own is not None:
        return Bracket(own, None, None)
    same_major = {name: v.major_minor for name, v in read.items() if v.major == wanted.major}
    below = [name for name, k in same_major.items() if k < key]
    above = [name for name, k in same_major.items() if k > key]
    return Bracket(None, max(below, key=same_major.__getitem__) if below else None, min(above, key=same_major.__getitem__) if above else None)


def read_columns(names: Iterable[str]) -> dict[str, TensorRTVersion]:
    """The columns of a table whose names are releases (``8.6``), each with its release; named
    columns (``10.x``, ``11.x``) left out."""
    found = {name: TensorRTVersion.parse(name) for name in names}
    return {name: v for name, v in found.items() if v is not None}
