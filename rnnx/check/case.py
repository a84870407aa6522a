"""A case: one set of inputs a check runs, named, with the shapes it has and, for a streaming
check, the chunk sizes it is cut into."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Case:
    """``feeds`` by input name; ``shapes`` each input's (what reports print); ``chunks`` the
    chunk sizes a streaming case runs in (empty: the whole sequence at once). ``skipped`` says why
    a case did not run and is no failure (the truth itself refused it); ``error`` why it failed."""

    name: str
    feeds: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    chunks: list[int] = field(default_factory=list)
    skipped: str = ""
    error: str = ""

    @classmethod
    def of(cls, name: str, feeds: Mapping[str, Any], chunks: list[int] | None = None) -> Case:
        """A case whose shapes are its feeds'."""
        return cls(name, dict(feeds), {k: [int(n) for n in np.shape(v)] for k, v in feeds.items()}, list(chunks or []))

    def where(self) -> str:
        """The case's name and every input's shape: ``batch=1 (x: 1x5x3)``."""
        shapes = ", ".join(f"{k}: " + "x".join(map(str, v)) for k, v in self.shapes.items())
        return f"{self.name} ({shapes})" if shapes else self.name
