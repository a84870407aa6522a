"""A case: one set of inputs a check runs, named, with its sizes and shapes, and what happened
there. Every verb's cases are this one type: verify's and a rewrite's (sizes by label, shapes by
input), export's self-check (the rows of its outputs, the shapes ONNX Runtime returned), a
bundle's golden cases (chunks, each state input's carry) and the harness's own (feeds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnx.check.judge import Row
from rnnx.shapes.cases import input_shapes


@dataclass
class Case:
    """``sizes`` each dynamic dimension's label -> its size; ``shapes`` each input's (what reports
    print); ``feeds`` by input name; ``rows`` each output held to its truth; ``chunks`` what a
    streaming case runs in (chunk sizes, or each chunk itself) and ``carry`` each state input ->
    the output that feeds it the next chunk. ``skipped`` says why a case did not run and is no
    failure (the truth itself refused it); ``error`` why it failed; ``output_shapes`` what the run
    returned; ``at_example`` a case at the example's shapes, run where no other case ran."""

    name: str
    sizes: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    feeds: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    chunks: list[Any] = field(default_factory=list)
    carry: dict[str, str] = field(default_factory=dict)
    skipped: str = ""
    error: str = ""
    output_shapes: dict[str, list[int]] = field(default_factory=dict)
    at_example: bool = False

    @classmethod
    def of(cls, name: str, feeds: Mapping[str, Any], chunks: list[Any] | None = None) -> Case:
        """A case whose shapes are its feeds'."""
        return cls(name, shapes={k: [int(n) for n in np.shape(v)] for k, v in feeds.items()}, feeds=dict(feeds), chunks=list(chunks or []))

    @classmethod
    def at(cls, specs: Sequence[Any], name: str, sizes: Mapping[str, int]) -> Case:
        """The case ``name`` with every label at ``sizes``: each input's shape worked out
        (:func:`rnnx.shapes.cases.input_shapes`)."""
        return cls(name, dict(sizes), input_shapes(specs, sizes))

    @property
    def passed(self) -> bool:
        """Decided here for every verb: a skipped case passes (the truth refused it), an error
        fails, and so does a case where nothing was compared."""
        return bool(self.skipped) or (not self.error and bool(self.rows) and all(r.passed for r in self.rows))

    def where(self) -> str:
        """The case's name and every input's shape: ``batch=1 (x: 1x5x3)``."""
        shapes = ", ".join(f"{k}: " + "x".join(map(str, v)) for k, v in self.shapes.items())
        return f"{self.name} ({shapes})" if shapes else self.name

    def to_json(self, fields: Sequence[str], row_fields: Sequence[str] | None = None, absent: str | None = "", **given: Any) -> dict[str, Any]:
        """The fields a report's schema pins, in its order: attributes (``passed`` and ``where``
        too), ``KEY:rows`` for the rows under the report's own key (each :meth:`Row.to_json` of
        ``row_fields``), ``given`` values where the report computes one itself; an empty
        ``skipped`` or ``error`` is written ``absent`` (None where the schema says null)."""
        out: dict[str, Any] = {}
        for name in fields:
            key, _, attr = name.partition(":")
            attr = attr or key
            if key in given:
                out[key] = given[key]
            elif attr == "rows":
                out[key] = [r.to_json(row_fields) for r in self.rows]
            elif attr == "where":
                out[key] = self.where()
            elif attr in ("skipped", "error"):
                out[key] = getattr(self, attr) or absent
            else:
                out[key] = getattr(self, attr)
        return out


def unvaried(cases: Sequence[Case], dynamic: Mapping[str, str], given: set[str]) -> tuple[list[str], list[str]]:
    """Of the dynamic batches and lengths (``dynamic``: label -> role), not the ``given`` ones
    (the user's sizes): those the cases set out to vary but that every case that ran held at one
    size ("seq at 19 (why it was skipped)"), and every one held at one size by the cases that ran
    ("seq (a length, held at 8)"). A check that varied nothing of a dynamic length has not checked
    it: verify and export's self-check refuse the first kind."""
    skipped_all, held = [], []
    for label, role in dynamic.items():
        if label in given:
            continue
        planned = {c.sizes[label] for c in cases if label in c.sizes}
        ran = {c.sizes[label] for c in cases if label in c.sizes and not c.skipped}
        if len(ran) != 1:
            continue
        held.append(f"{label} (a {role}, held at {next(iter(ran))})")
        if len(planned) > 1:
            why = next((c.skipped for c in cases if c.skipped and c.sizes.get(label) not in ran), "")
            skipped_all.append(f"{label} at {', '.join(map(str, sorted(planned - ran)))} ({why})")
    return skipped_all, held
