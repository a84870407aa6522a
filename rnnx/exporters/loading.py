"""What ``rnnx export`` needs from the command line: the model, its weights, example inputs.

A model is named as ``path/to/file.py:NAME`` or ``package.module:NAME``, where NAME is
an nn.Module instance, a class, or a factory, or given as a TorchScript file; calling a class or factory may return the
module or ``(module, example_inputs)``. The module may also define ``example_inputs``
(a tuple, or a callable returning one). That code is the user's own and runs as such;
checkpoints, in contrast, are loaded weights-only.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError

_DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool")


def load_model(target: str) -> tuple[Any, Any]:
    """(module, example_inputs or None) from ``file.py:NAME``, ``package.module:NAME`` or a
    TorchScript file (whose example inputs come from --input)."""
    from torch import nn

    if ":" not in target and Path(target).suffix.lower() in (".pt", ".pth", ".ts", ".torchscript"):
        return _load_torchscript(Path(target)), None
    source, sep, name = target.rpartition(":")
    if not sep or not source or not name:
        raise RNNXError(f"model: expected file.py:NAME or package.module:NAME, found {target!r}")
    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise RNNXError(f"model: {path} does not exist")
        module_name = f"rnnx_user_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        namespace = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = namespace  # packed-sequence patching looks here
        sys.path.insert(0, str(path.parent.resolve()))
        try:
            spec.loader.exec_module(namespace)
        finally:
            sys.path.pop(0)
    else:
        try:
            namespace = importlib.import_module(source)
        except ImportError as exc:
            raise RNNXError(f"model: cannot import {source!r} ({exc}); check PYTHONPATH or give a file.py path") from None
    if not hasattr(namespace, name):
        raise RNNXError(f"model: {source} has no attribute {name!r}")
    obj = getattr(namespace, name)
    example = getattr(namespace, "example_inputs", None)
    if not isinstance(obj, nn.Module):
        obj = obj()
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], nn.Module):
            obj, example = obj
    if not isinstance(obj, nn.Module):
        raise RNNXError(f"model: {target} gave a {type(obj).__name__}, expected a torch.nn.Module")
    if callable(example):
        example = example()
    return obj, example


def _load_torchscript(path: Path) -> Any:
    import torch

    from rnnx.fileio import require_file

    try:
        return torch.jit.load(str(require_file(path)), map_location="cpu")
    except RNNXError:
        raise
    except Exception as exc:  # RuntimeError for a state_dict or a damaged archive
        raise RNNXError(f"{path}: not a TorchScript file ({str(exc).strip().splitlines()[0][:160]}); for a state_dict pass file.py:NAME and --checkpoint") from None


def load_checkpoint(module: Any, path: Path) -> None:
    """Load a state_dict (weights-only .pt/.pth, or .safetensors) into ``module``, strictly."""
    import torch

    from rnnx.fileio import require_file

    path = require_file(Path(path))
    if path.suffix.lower() == ".safetensors":
        from safetensors.torch import load_file

        state: Any = load_file(str(path))
    else:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # UnpicklingError and friends
            raise RNNXError(f"{path}: cannot load as weights only ({str(exc).splitlines()[0][:200]}); save a state_dict") from None
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise RNNXError(f"{path}: does not fit the model ({str(exc).splitlines()[0][:200]}); check the checkpoint or the model") from None


def parse_input(text: str) -> Any:
    """``5x3x6`` (random float32 of that shape), ``5x3x6:float64``, or ``7,5,2:int64`` (values)."""
    import numpy as np
    import torch

    body, _, dtype = text.partition(":")
    dtype = dtype or "float32"
    if dtype not in _DTYPES:
        raise RNNXError(f"--input {text!r}: expected a dtype among {', '.join(_DTYPES)}, found {dtype!r}")
    try:
        if "," in body or dtype in ("int64", "int32", "bool") and "x" not in body:
            values = [int(v) for v in body.split(",")]
            return torch.tensor(values, dtype=getattr(torch, dtype))
        shape = [int(v) for v in body.split("x")]
    except ValueError:
        raise RNNXError(f"--input {text!r}: expected a shape like 5x3x6 or values like 7,5,2:int64") from None
    rng = np.random.default_rng(len(shape))
    return torch.from_numpy(rng.standard_normal(shape).astype(dtype))
