"""What a file rnnx exported says about itself, in its ``metadata_props``.

Two JSON entries (written by :mod:`rnnx.exporters.record`):

- ``rnnx.export``: each graph input's dimensions (a size, or the label of a dynamic
  dimension), what each label is (``batch``, ``length`` or ``other``), and which inputs
  hold per-sequence lengths;
- ``rnnx.recurrences``: per recurrent module, its spec, layout and ONNX nodes, and which
  graph inputs feed its X, initial states and sequence lengths and which graph outputs its
  Y and final states reach.

Files are untrusted: a damaged or foreign entry reads as absent, and so does an export record
beyond what rnnx writes (more labels or inputs than a model has, sizes no tensor has, an
example no machine can make), so that no reader sizes its work by it.
"""

from __future__ import annotations

import json
from typing import Any

from rnnx.errors import shown

EXPORT_KEY, RECURRENCES_KEY = "rnnx.export", "rnnx.recurrences"
_MAX_ENTRY = 16 * 1024 * 1024


def set_metadata(proto: Any, entries: dict[str, str]) -> None:
    keep = [p for p in proto.metadata_props if p.key not in entries]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    for k, v in entries.items():
        p = proto.metadata_props.add()
        p.key, p.value = k, v


def read_metadata(proto: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the export record, the recurrences) of a file rnnx wrote; (None, []) otherwise or when damaged."""
    props = {p.key: p.value for p in proto.metadata_props if p.key in (EXPORT_KEY, RECURRENCES_KEY)}
    if any(len(v) > _MAX_ENTRY for v in props.values()):
        return None, []
    try:
        export = json.loads(props[EXPORT_KEY]) if EXPORT_KEY in props else None
        recurrences = json.loads(props.get(RECURRENCES_KEY, "[]"))
    except (ValueError, RecursionError):
        return None, []
    if not isinstance(export, dict) or not isinstance(recurrences, list) or not _bounded(export):
        return None, []
    return export, [r for r in recurrences if isinstance(r, dict)][:_MAX_NAMES]


_MAX_NAMES = 4096  # inputs, labels or recurrences in one record
_MAX_RANK = 16
_MAX_SIZE = 1 << 31
_MAX_EXAMPLE = 1 << 28  # elements of one recorded example input: the sizes verify starts from


def _bounded(export: dict[str, Any]) -> bool:
    """Whether the export record keeps to what rnnx writes: a few inputs of a few dimensions,
    sizes a tensor can have, short role names, examples a machine can make (which role names
    rnnx knows is :mod:`rnnx.shapes`'s to say: it reads the roles and drops any other). One that does not
    (a tampered file claiming 10**5 labels or a 10**6 x 10**6 example) reads as absent, so
    no reader sizes its work by it."""

    def names(entry: Any) -> bool:
        return isinstance(entry, dict) and len(entry) <= _MAX_NAMES and all(isinstance(k, str) and len(k) <= 256 for k in entry)

    def dims(value: Any, labels: bool) -> bool:
        return isinstance(value, list) and len(value) <= _MAX_RANK and all(
            (isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _MAX_SIZE) or (labels and isinstance(d, str) and len(d) <= 256) for d in value)

    inputs, roles, example = export.get("inputs", {}), export.get("roles", {}), export.get("example", {})
    if not (names(inputs) and all(dims(v, True) for v in inputs.values())):
        return False
    if not (names(roles) and all(isinstance(r, str) and len(r) <= 32 for r in roles.values())):
        return False
    if not (names(example) and all(dims(v, False) and _elements(v) <= _MAX_EXAMPLE for v in example.values())):
        return False
    return all(names(export.get(key, {})) for key in ("lengths_inputs", "values"))


def _elements(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def describe(export: dict[str, Any] | None, recurrences: list[dict[str, Any]]) -> list[str]:
    """Lines for ``rnnx inspect``."""
    if export is None:
        return []
    lines = [f"exported by rnnx {shown(str(export.get('rnnx_version', '?')), quoted=False)}; inputs:"]
    for name, dims in (export.get("inputs") or {}).items():
        text = ", ".join(shown(str(d), quoted=False) for d in dims) if isinstance(dims, list) else shown(str(dims))
        lines.append(f"  {shown(name, quoted=False)}: ({text})")
    roles = export.get("roles") or {}
    if roles:
        lines.append("  dynamic: " + ", ".join(f"{shown(label, quoted=False)} ({shown(str(role), quoted=False)})" for label, role in roles.items()))
    for r in recurrences:
        ins = "; ".join(f"{shown(str(k), quoted=False)} <- {', '.join(shown(str(n), quoted=False) for n in v)}" for k, v in _pairs(r.get("inputs")))
        outs = "; ".join(f"{shown(str(k), quoted=False)} -> {', '.join(shown(str(n), quoted=False) for n in v)}" for k, v in _pairs(r.get("outputs")))
        nodes = ", ".join(shown(str(n), quoted=False) for n in r["nodes"]) if isinstance(r.get("nodes"), list) else ""
        module = shown(str(r["module"]), quoted=False) if r.get("module") else "(the model)"
        lines.append(f"recurrence {module}: {shown(str(r.get('spec')), quoted=False)} ({shown(str(r.get('layout')), quoted=False)}), nodes {nodes or '-'}")
        lines.append(f"  {ins or 'no graph input feeds it'}; {outs or 'reaches no graph output'}")
    return lines


def _pairs(entry: Any) -> list[tuple[Any, list[Any]]]:
    """A recurrence's inputs or outputs (role -> graph names), as far as the entry is one."""
    if not isinstance(entry, dict):
        return []
    return [(k, v if isinstance(v, list) else [v]) for k, v in entry.items()]
