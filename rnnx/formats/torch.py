"""``torch``: nn.LSTM / nn.GRU / nn.RNN and Cell state_dicts as torch tensors and in files.

Files are .pt/.pth (loaded weights-only: a pickle's code never runs) or .safetensors. The
parameters' names, gate order and shapes are :mod:`rnnx.layouts.torch`; here tensors are
made and read, and files written and loaded.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits
from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.fileio import atomic_output, check_archive, library_write, read_safetensors, require_file, safetensors_metadata, write_safetensors
from rnnx.formats.registry import register_module
from rnnx.layouts import torch as layout
from rnnx.spec import RNNSpec
from rnnx.tensor_pieces import Pieces
from rnnx.weights import RNNWeights


def to_native(weights: RNNWeights, cell: bool = False, prefix: str = "") -> dict[str, Any]:
    """A state_dict of torch tensors, ready for ``module.load_state_dict``."""
    torch = _import_torch("building a torch state_dict")
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in layout.to_native(weights, cell, prefix).items()}


def _as_numpy(value: Any, key: str = "") -> np.ndarray:
    if hasattr(value, "detach"):
        what = f"tensor {key!r}" if key else "a tensor"
        if getattr(value, "is_nested", False):
            raise RNNXError(f"{what} is a nested tensor; rnnx reads dense floating-point weights")
        if getattr(value, "is_meta", False):
            raise RNNXError(f"{what} is a meta tensor, which holds no data; save the checkpoint from a model with real weights")
        if getattr(value, "is_quantized", False) or str(getattr(value, "layout", "torch.strided")) != "torch.strided":
            raise RNNXError(f"{what} is stored {'quantized' if value.is_quantized else 'sparse'}; rnnx reads dense floating-point weights: "
                            "dequantize or densify them first")
        if not value.dtype.is_floating_point or "float8" in str(value.dtype):
            raise RNNXError(f"{what} holds {str(value.dtype).replace('torch.', '')}; rnnx reads float32/16/64 and bfloat16 weights")
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16; widening is exact
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def from_native(state: Mapping[str, Any], spec: RNNSpec | None = None, select: str | None = None) -> RNNWeights:
    """Canonical weights from a state_dict (a module's, a cell's, or a whole model's with ``select``)."""
    return _from_groups(layout.find_groups(state), spec, select, "state_dict")


def _from_groups(groups: Mapping[str, Mapping[str, Any]], spec: RNNSpec | None, select: str | None, where: str) -> RNNWeights:
    name = layout.choose_group(groups, select, where)
    return layout.from_group({k: _as_numpy(v, f"{name}.{k}" if name else k) for k, v in groups[name].items()}, spec, name)


def _import_torch(why: str) -> Any:
    try:
        import torch
    except ImportError:
        raise RNNXError(f"{why} needs PyTorch, which is not installed; pip install 'rnnx[torch]'") from None
    return torch


_MAX_NESTING = 64


def _flatten(obj: Any) -> dict[str, Any]:
    """Nested checkpoints ({"model": {...}, "optimizer": ...}) flattened to dotted keys."""
    flat: dict[str, Any] = {}
    todo: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while todo:  # a loop, not recursion: a hostile file may nest thousands deep
        item, prefix, depth = todo.pop()
        if isinstance(item, Mapping):
            if depth >= _MAX_NESTING:
                raise RNNXError(f"the checkpoint nests dictionaries over {_MAX_NESTING} deep at {prefix[:80]!r}; the file is damaged or not a state_dict")
            todo.extend((value, f"{prefix}{key}.", depth + 1) for key, value in reversed(list(item.items())))
        elif hasattr(item, "detach") or isinstance(item, np.ndarray):
            flat[prefix[:-1]] = item
    return flat


def load_state(path: Path) -> dict[str, Any]:
    """The flattened tensors of a .pt/.pth (weights-only) or .safetensors file."""
    path = require_file(path)
    if path.suffix.lower() == ".safetensors":
        return dict(read_safetensors(path)[0])
    torch = _import_torch(f"reading {path.suffix}")
    check_archive(path)
    try:
        obj = _load_weights_only(torch, path)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        if "TorchScript archive" in str(exc):
            obj = _torchscript_state(torch, path)
            return _checked_flat(path, obj)
        raise weights_only_refusal(path, exc) from None
    return _checked_flat(path, obj)


def weights_only_refusal(path: Path, exc: BaseException) -> RNNXError:
    """The one line for a file torch cannot load as weights only: damaged, a pickled whole
    model, or anything else, in words the user can act on (shared by every verb that reads
    torch checkpoints)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, EOFError) or any(sign in str(exc) for sign in _DAMAGED):
        return RNNXError(f"{path}: the checkpoint is truncated or damaged ({one_line(first, DETAIL_CHARS)}); torch cannot read it: "
                         "copy it again from where it was saved")
    if "Weights only load failed" in first:  # torch's first line says only how to run the pickle anyway
        first = "it pickles Python objects, such as a whole model saved with torch.save(model)"
    return RNNXError(f"{path}: cannot load as weights only ({one_line(first, DETAIL_CHARS)}); rnnx never runs code inside a pickle: "
                     "save a plain state_dict (torch.save(model.state_dict(), ...)) or a .safetensors file")


def _checked_flat(path: Path, obj: Any) -> dict[str, Any]:
    flat = _flatten(obj)
    # A tensor may be a view far larger than its storage (an expanded 0-stride tensor): what the
    # tensors will take once made dense is checked against the budget, not the file's size.
    claimed = sum(_dense_bytes(v) for v in flat.values()) * limits.WORKING_COPIES
    limits.check_claim(f"{path}: converting its tensors (made dense: expanded views take their full size)", claimed, path.stat().st_size)
    return flat


def _torchscript_state(torch: Any, path: Path) -> dict[str, Any]:
    """A TorchScript archive's parameters and buffers. torch.jit.load compiles the archive's
    TorchScript (a restricted language; no Python in it runs, no pickle of arbitrary classes),
    as rnnx export and verify do to run such a file; nothing of the model is called here."""
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # noqa: BLE001  a damaged archive
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise RNNXError(f"{path}: expected a TorchScript archive torch.jit.load reads, found one it refuses ({first}); save it again "
                        "with torch.jit.save, or save a state_dict") from None
    return dict(module.state_dict())


#: What torch says of a checkpoint cut short or corrupted (as opposed to one that is not weights only).
_DAMAGED = ("PytorchStreamReader failed", "unexpected EOF", "Ran out of input", "central directory", "file not found in archive")


def _load_weights_only(torch: Any, path: Path) -> Any:
    """torch.load with weights only, memory-mapped where the file allows it (a zip checkpoint
    with its tensors stored, as torch.save writes them): tensors are then paged in from the
    file as they are used, and a large checkpoint is never held twice. An older (non-zip)
    checkpoint cannot be mapped and is read whole."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc) and "zip" not in str(exc).lower():
            raise
    return torch.load(str(path), map_location="cpu", weights_only=True)


def _dense_bytes(value: Any) -> int:
    try:
        return int(value.numel()) * int(value.element_size()) if hasattr(value, "numel") else int(np.asarray(value).nbytes)
    except (RuntimeError, TypeError, ValueError):  # nested and other tensors without one size: refused later, one by one
        return 0


def groups(path: Path) -> list[str]:
    return list(layout.find_groups(load_state(path)))


def read(path: Path, select: str | None, spec: RNNSpec | None) -> RNNWeights:
    return _from_groups(layout.find_groups(load_state(path)), spec, select, str(path))


def write(weights: RNNWeights, path: Path) -> None:
    pieces = layout.native_pieces(weights)
    if path.suffix.lower() == ".safetensors":  # streamed: nothing assembled
        write_safetensors(path, pieces, {"format": "torch", "spec": str(weights.spec)})
        return
    torch = _import_torch(f"writing {path.suffix}")
    # torch.save takes whole tensors: a parameter whose gates lie back to back in the source
    # (a torch or cuDNN file, mapped) is a view of it; any other is assembled once.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")  # torch.save only reads them
        state = {k: torch.from_numpy(_joined(v)) for k, v in pieces.items()}
    with atomic_output(path) as tmp, library_write(path):
        torch.save(state, str(tmp))


def _joined(pieces: Pieces) -> np.ndarray:
    view = pieces.joined()
    return view if view is not None else pieces.array()


def sniff(path: Path) -> bool:
    if path.suffix.lower() != ".safetensors":
        return True
    # "pt" is what Hugging Face's save_pretrained records (metadata={"format": "pt"}).
    return safetensors_metadata(path).get("format", "torch") in ("torch", "pt")


register_module(globals(), name="torch", extensions=(".pt", ".pth", ".ckpt", ".safetensors"),  # .ckpt: PyTorch Lightning's checkpoints
                refusals=layout.refusals, description="PyTorch nn.LSTM/GRU/RNN and Cell state_dicts (.pt/.pth weights-only, .safetensors)")
