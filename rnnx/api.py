"""The Python entry points: :func:`export`, and load, save, to_format, from_format and groups
from :mod:`rnnx.formats.files`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnx.formats.files import from_format, groups, load, save, to_format

__all__ = ["export", "from_format", "groups", "load", "save", "to_format"]


def export(model: Any, example_inputs: Any, path: str | Path, **options: Any) -> Any:
    """Export a PyTorch model to ONNX with native LSTM/GRU/RNN nodes, checked in ONNX Runtime.

    Returns an :class:`rnnx.exporters.writing.ExportReport`; see that module for options
    (``tolerances=rnnx.tolerance.Tolerances.parse(["1e-3"])`` sets the self-check's tolerance).
    """
    # Deferred so that `import rnnx` stays light: the exporter and its passes load on first use.
    from rnnx.exporters.torch_export import export as _export

    return _export(model, example_inputs, path, **options)
