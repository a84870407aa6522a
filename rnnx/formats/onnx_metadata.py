"""What a file rnnx exported says about itself, in its ``metadata_props``.

Two JSON entries (written by :mod:`rnnx.exporters.record`):

- ``rnnx.export``: each graph input's dimensions (a size, or the label of a dynamic
  dimension), what each label is (``batch``, ``length`` or ``other``), and which inputs
  hold per-sequence lengths;
- ``rnnx.recurrences``: per recurrent module, its spec, layout and ONNX nodes, and which
  graph inputs feed its X, initial states and sequence lengths and which graph outputs its
  Y and final states reach.

Files are untrusted: a damaged or foreign entry reads as absent.
"""

from __future__ import annotations

import json
from typing import Any

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
    if not isinstance(export, dict) or not isinstance(recurrences, list):
        return None, []
    return export, [r for r in recurrences if isinstance(r, dict)]


def describe(export: dict[str, Any] | None, recurrences: list[dict[str, Any]]) -> list[str]:
    """Lines for ``rnnx inspect``."""
    if export is None:
        return []
    lines = [f"exported by rnnx {export.get('rnnx_version', '?')}; inputs:"]
    for name, dims in (export.get("inputs") or {}).items():
        lines.append(f"  {name}: ({', '.join(str(d) for d in dims) if isinstance(dims, list) else dims})")
    roles = export.get("roles") or {}
    if roles:
        lines.append("  dynamic: " + ", ".join(f"{label} ({role})" for label, role in roles.items()))
    for r in recurrences:
        ins = "; ".join(f"{k} <- {', '.join(map(str, v))}" for k, v in (r.get("inputs") or {}).items())
        outs = "; ".join(f"{k} -> {', '.join(map(str, v))}" for k, v in (r.get("outputs") or {}).items())
        lines.append(f"recurrence {r.get('module') or '(the model)'}: {r.get('spec')} ({r.get('layout')}), nodes {', '.join(map(str, r.get('nodes') or [])) or '-'}")
        lines.append(f"  {ins or 'no graph input feeds it'}; {outs or 'reaches no graph output'}")
    return lines
