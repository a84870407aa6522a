"""Weight files and objects in any registered format: load, save, to_format, from_format, groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.fileio import require_file
from rnnx.formats import registry as formats
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

#: The first bytes of every HDF5 file (at offset 0 when the file has no user block, as Keras writes it).
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _refuse_hdf5_elsewhere(path: Path, fmt: formats.Format) -> None:
    """An HDF5 file handed to a format that reads no HDF5 (``from_format='torch'`` on a Keras
    .h5) is refused as what it is, not with that format's puzzled message about its bytes."""
    readers = [n for n in formats.names() if any(e.endswith((".h5", ".hdf5")) for e in formats.get(n).extensions)]
    if fmt.name in readers:
        return
    with open(path, "rb") as f:
        if f.read(len(_HDF5_SIGNATURE)) != _HDF5_SIGNATURE:
            return
    raise RNNXError(f"{path}: an HDF5 file, which format {fmt.name} does not read (HDF5 weights are Keras's: {', '.join(readers)}); "
                    "pass from_format=keras or leave from_format= out")


def _spec(spec: RNNSpec | str | None) -> RNNSpec | None:
    return RNNSpec.parse(spec) if isinstance(spec, str) else spec


def _file_options(fmt: formats.Format, **given: Any) -> dict[str, Any]:
    """The options given (not None), refused where the format takes none of that name."""
    given = {k: v for k, v in given.items() if v is not None}
    for name in given:
        if name not in fmt.file_options:
            takers = [n for n in formats.names() if name in formats.get(n).file_options]
            raise RNNXError(f"{name}= applies to format {', '.join(takers) or 'none'} only, not {fmt.name}; drop {name}=")
    return given


def load(path: str | Path, format: str | None = None, select: str | None = None, spec: RNNSpec | str | None = None,
         dtype: str | None = None) -> RNNWeights:
    """Read weights from a file in any registered format into canonical form.

    ``format`` is inferred from the extension and content when omitted; ``select`` names
    one recurrent group where a file holds several; ``spec`` completes formats that do not
    describe themselves (a cuDNN blob) or settles what a file cannot say (tanh or relu).
    ``dtype`` (float32, float16, bfloat16, float64) is the element type of a headerless
    cuDNN ``.bin`` blob, which cannot say it (default float32).
    """
    path = require_file(Path(path))
    fmt = formats.get(format) if format else formats.detect(path)
    if fmt.read is None:
        raise RNNXError(f"format {fmt.name}: has no file reader; load the object yourself and call rnnx.from_format")
    options = _file_options(fmt, dtype=dtype)
    _refuse_hdf5_elsewhere(path, fmt)
    try:
        return fmt.read(path, select, _spec(spec), **options)
    except RNNXError as exc:  # every refusal names the file it is about
        if str(path) in str(exc) or path.name in str(exc):
            raise
        raise type(exc)(f"{path}: {exc}") from None


def save(weights: RNNWeights, path: str | Path, format: str | None = None, dtype: str | None = None) -> None:
    """Write weights atomically; the canonical ``rnnx`` form unless ``format`` or the extension says otherwise.
    ``dtype`` is the element type of a headerless cuDNN ``.bin`` blob (default float32)."""
    path = Path(path)
    fmt = formats.get(format) if format else formats.detect(path, output=True)
    if fmt.write is None:
        raise RNNXError(f"format {fmt.name}: has no file writer; use rnnx.to_format and save the object yourself")
    fmt.write(weights, path, **_file_options(fmt, dtype=dtype))


def to_format(weights: RNNWeights, name: str, **options: Any) -> Any:
    """The format's natural object: a state_dict for torch, a 1-D array for cudnn and jax,
    a list of arrays for keras, per-layer W/R/B/P for onnx."""
    return formats.get(name).to_native(weights, **options)


def from_format(obj: Any, name: str, spec: RNNSpec | str | None = None) -> RNNWeights:
    """Canonical weights from a format's natural object."""
    return formats.get(name).from_native(obj, _spec(spec))


def groups(path: str | Path, format: str | None = None) -> list[str]:
    """The recurrent groups a file holds (names for ``select``)."""
    path = require_file(Path(path))
    fmt = formats.get(format) if format else formats.detect(path)
    return fmt.groups(path) if fmt.groups else [""]
