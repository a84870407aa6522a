"""The registry of weight formats: each one converts to and from :class:`RNNWeights`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights


def holds_any(spec: RNNSpec) -> list[str]:
    """The refusals of a format that holds every spec (the canonical form)."""
    return []


@dataclass(frozen=True)
class Format:
    """One external layout.

    ``to_native(weights, **options)`` returns the format's natural object and
    ``from_native(obj, spec)`` reads it back. ``read``/``write`` handle files, when the
    format has them; ``groups(path)`` lists the recurrent groups a file holds, for
    ``--select``. ``sniff(path)`` says whether a file with one of ``extensions`` is in
    this format (several formats share ``.safetensors``). ``refusals(spec)`` says why the
    format cannot hold a spec, one reason per line of its layout (empty when it can): ask
    it rather than restate what a format can express. ``file_options`` names the keyword
    parameters its ``read`` and ``write`` take beyond those (``dtype`` for cuDNN's raw
    ``.bin`` blobs); the loaders refuse them for every other format.
    """

    name: str
    to_native: Callable[..., Any]
    from_native: Callable[[Any, RNNSpec | None], RNNWeights]
    read: Callable[[Path, str | None, RNNSpec | None], RNNWeights] | None = None
    write: Callable[[RNNWeights, Path], None] | None = None
    groups: Callable[[Path], list[str]] | None = None
    extensions: tuple[str, ...] = ()
    sniff: Callable[[Path], bool] | None = None
    description: str = ""
    options: dict[str, str] = field(default_factory=dict)
    refusals: Callable[[RNNSpec], list[str]] = holds_any
    file_options: tuple[str, ...] = ()


_FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a format; a later registration under the same name replaces the earlier one."""
    _FORMATS[fmt.name] = fmt
    return fmt


def register_module(namespace: dict[str, Any], **fields: Any) -> Format:
    """Register the format a module defines: the functions its ``namespace`` holds under a
    :class:`Format` field's name (``to_native``, ``read``, ``sniff``, ...) are that field;
    ``fields`` give the rest, and win over a name the module holds for another purpose."""
    found = {name: namespace[name] for name in _MODULE_FIELDS if name in namespace}
    return register(Format(**{**found, **fields}))


_MODULE_FIELDS = ("to_native", "from_native", "read", "write", "groups", "sniff", "refusals")


def get(name: str) -> Format:
    try:
        return _FORMATS[name]
    except KeyError:
        raise RNNXError(f"format: expected one of {', '.join(sorted(_FORMATS))}, found {name!r}") from None


def names() -> list[str]:
    return sorted(_FORMATS)


def refusals(spec: RNNSpec) -> dict[str, list[str]]:
    """Every registered format that cannot hold ``spec``, with its reasons."""
    found = {name: fmt.refusals(spec) for name, fmt in sorted(_FORMATS.items())}
    return {name: reasons for name, reasons in found.items() if reasons}


def settle_spec(path: Path, given: RNNSpec | None, stored: str | None) -> RNNSpec | None:
    """The spec a file records, unless the user's --spec says otherwise: then refuse."""
    recorded = RNNSpec.parse(stored) if stored is not None else None
    if given is not None and recorded is not None and given != recorded:
        raise RNNXError(f"{path}: spec={given} disagrees with the file's own spec {recorded}; drop spec=")
    return given or recorded


def detect(path: Path, output: bool = False) -> Format:
    """The one format that claims a file, from its extension and then (an input's) content.
    An output's format comes from its extension alone: a file already there must not decide it."""
    suffix = "".join(path.suffixes[-2:]) if path.name.endswith(".weights.h5") else path.suffix
    suffix = suffix.lower()
    candidates = [f for f in _FORMATS.values() if suffix in f.extensions]
    if len(candidates) > 1:
        if path.exists() and not output:
            candidates = [f for f in candidates if f.sniff is None or f.sniff(path)]
        elif any(f.name == "rnnx" for f in candidates):
            # A new file in a shared extension: the canonical form is what rnnx saves.
            candidates = [get("rnnx")]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise RNNXError(
            f"{path}: no format reads or writes {suffix or 'files without an extension'}; "
            f"pass from_format= or to_format= with one of {', '.join(names())}"
        )
    raise RNNXError(
        f"{path}: {suffix} could be {', '.join(f.name for f in candidates)}; pass from_format= or to_format= to choose"
    )
