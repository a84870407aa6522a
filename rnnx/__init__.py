"""rnnx: recurrent networks out of their frameworks and into deployment, with proven parity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rnnx._version import __version__
from rnnx.errors import ExportCheckFailed, ParityError, RNNXError
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

if TYPE_CHECKING:
    from rnnx.api import export, from_format, groups, load, save, to_format
    from rnnx.streaming import StreamingSession

__all__ = [
    "ExportCheckFailed",
    "ParityError",
    "RNNSpec",
    "RNNWeights",
    "RNNXError",
    "StreamingSession",
    "__version__",
    "export",
    "from_format",
    "groups",
    "load",
    "save",
    "to_format",
]

_API = ("export", "from_format", "groups", "load", "save", "to_format")


def __getattr__(name: str) -> Any:
    # The entry points load the formats (and through them every layer below the pipelines)
    # on first use, so that `import rnnx` costs numpy and the core types alone.
    if name in _API:
        from rnnx import api

        return getattr(api, name)
    if name == "StreamingSession":  # numpy only; onnxruntime loads when a session is made
        from rnnx.streaming import StreamingSession

        return StreamingSession
    raise AttributeError(f"module 'rnnx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API) | {"StreamingSession"})
