"""What ``rnnx export`` needs from the command line: the model, its weights, example inputs.

A model is named as ``path/to/file.py:NAME`` or ``package.module:NAME``, where NAME is
an nn.Module instance, a class, or a factory, or given as a TorchScript file; calling a class or factory may return the
module or ``(module, example_inputs)``. The module may also define ``example_inputs``
(a tuple, or a callable returning one). That code is the user's own and runs as such;
checkpoints, in contrast, are loaded weights-only.
"""

from __future__ import annotations

import math

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.fileio import check_archive, read_safetensors, require_file

_DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool")


def load_model(target: str) -> tuple[Any, Any]:
    """(module, example_inputs or None) from ``file.py:NAME``, ``package.module:NAME`` or a
    TorchScript file (whose example inputs come from --input)."""
    try:
        from torch import nn
    except ImportError:
        raise RNNXError("rnnx export needs PyTorch, which is not installed here: pip install 'rnnx[torch]'") from None

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
        except Exception as exc:  # the user's module raised while importing: their code, not rnnx
            raise RNNXError(f"model: importing {path} raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}; fix the model file") from None
        finally:
            sys.path.pop(0)
    else:
        try:
            namespace = importlib.import_module(source)
        except ImportError as exc:
            raise RNNXError(f"model: cannot import {source!r} ({exc}); check PYTHONPATH or give a file.py path") from None
        except Exception as exc:  # the user's package raised while importing
            raise RNNXError(f"model: importing {source} raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    if not hasattr(namespace, name):
        raise RNNXError(f"model: {source} has no attribute {name!r}")
    obj = getattr(namespace, name)
    example = getattr(namespace, "example_inputs", None)
    if not isinstance(obj, nn.Module):
        if not callable(obj):
            raise RNNXError(f"model: {target} is a {type(obj).__name__}, expected an nn.Module, a class or a factory")
        try:
            obj = obj()
        except Exception as exc:  # building the user's model raised: their code
            raise RNNXError(f"model: calling {name}() raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], nn.Module):
            obj, example = obj
    if not isinstance(obj, nn.Module):
        raise RNNXError(f"model: {target} gave a {type(obj).__name__}, expected a torch.nn.Module")
    if callable(example):
        example = example()
    return obj, example


def _load_torchscript(path: Path) -> Any:
    import torch


    try:
        return torch.jit.load(str(require_file(path)), map_location="cpu")
    except RNNXError:
        raise
    except Exception as exc:  # RuntimeError for a state_dict or a damaged archive
        raise RNNXError(f"{path}: not a TorchScript file ({str(exc).strip().splitlines()[0][:160]}); for a state_dict pass file.py:NAME and --checkpoint") from None


def load_checkpoint(module: Any, path: Path) -> None:
    """Load a state_dict (weights-only .pt/.pth, or .safetensors) into ``module``, strictly."""
    import torch


    path = require_file(Path(path))
    if path.suffix.lower() == ".safetensors":  # rnnx's own bounded reader, then torch tensors
        state: Any = {k: torch.from_numpy(v) for k, v in read_safetensors(path, mapped=False)[0].items()}
    else:
        check_archive(path)
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
        # torch's message: a header line, then the missing and unexpected keys, which say what is wrong.
        raise RNNXError(f"{path}: does not fit the model ({' '.join(str(exc).split())[:400]}); check the checkpoint or the model") from None


def parse_input(text: str) -> tuple[str | None, Any]:
    """``[NAME:]SHAPE[:DTYPE]``: a seeded random tensor of that shape (``5x3x6`` or
    ``[5,3,6]``, as trtexec and Polygraphy write shapes; ``[]`` for a scalar), float32
    unless DTYPE says otherwise (integers are ones, valid token ids and lengths); or
    ``[NAME:]values=7,5,2[:DTYPE]``, a 1-D tensor of those values. Returns (name, tensor)."""
    import numpy as np
    import torch

    parts = text.split(":")
    name = parts.pop(0) if len(parts) > 1 and parts[0].isidentifier() and parts[0] not in _DTYPES and not parts[0].startswith("values") else None
    if not parts or len(parts) > 2 or not parts[0]:
        raise RNNXError(f"--input {text!r}: expected [NAME:]SHAPE[:DTYPE], e.g. x:5x3x8 or lengths:values=7,5,2:int64")
    body, dtype = parts[0], parts[1] if len(parts) > 1 else None
    if dtype is not None and dtype not in _DTYPES:
        raise RNNXError(f"--input {text!r}: expected a dtype among {', '.join(_DTYPES)}, found {dtype!r}")
    if body.startswith("values="):
        try:
            values = [float(v) if dtype in (None, "float32", "float64", "float16") else int(v) for v in body[len("values="):].split(",")]
        except ValueError:
            raise RNNXError(f"--input {text!r}: expected values like values=7,5,2") from None
        if len(values) > 1 << 20:
            raise RNNXError(f"--input {text[:60]!r}...: expected at most {1 << 20} values, found {len(values)}")
        try:
            return name, torch.tensor(values, dtype=getattr(torch, dtype or ("int64" if all(float(v).is_integer() for v in values) else "float32")))
        except (OverflowError, RuntimeError, ValueError):
            raise RNNXError(f"--input {text[:80]!r}: a value does not fit {dtype or 'int64'}") from None
    shape_text = body[1:-1] if body.startswith("[") and body.endswith("]") else body
    separator = "," if body.startswith("[") else "x"
    try:
        shape = [int(v) for v in shape_text.split(separator)] if shape_text else []
    except ValueError:
        raise RNNXError(f"--input {text!r}: expected a shape like 5x3x8 or [5,3,8] (for values write values=7,5,2)") from None
    if any(d < 0 for d in shape) or math.prod(shape) > 1 << 28:
        raise RNNXError(f"--input {text!r}: expected non-negative sizes totalling at most 2**28 elements, found {shape}")
    dtype = dtype or "float32"
    if dtype in ("int64", "int32"):
        return name, torch.ones(shape, dtype=getattr(torch, dtype))
    rng = np.random.default_rng(len(shape))
    if dtype == "bool":
        return name, torch.from_numpy(rng.random(shape) < 0.5)
    return name, torch.from_numpy(rng.standard_normal(shape).astype(dtype))


def order_inputs(model: Any, given: list[tuple[str | None, Any]]) -> tuple[Any, ...]:
    """Example inputs in the order forward takes them: named ones at their parameter's
    position, unnamed ones in the order given."""
    import inspect

    if all(name is None for name, _ in given):
        return tuple(t for _, t in given)
    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    slots: dict[int, Any] = {}
    unnamed = [t for name, t in given if name is None]
    for name, tensor in given:
        if name is None:
            continue
        if name not in params:
            raise RNNXError(f"--input {name}: expected a parameter of {type(model).__name__}.forward ({', '.join(params) or 'none found'}), found {name!r}")
        slots[params.index(name)] = tensor
    out = []
    for i in range(len(slots) + len(unnamed)):
        if i in slots:
            out.append(slots[i])
        elif unnamed:
            out.append(unnamed.pop(0))
        else:
            missing = params[i] if i < len(params) else f"#{i}"
            raise RNNXError(f"--input: forward's parameter {missing} has no example; give --input {missing}:SHAPE")
    return tuple(out)


def parse_dim(text: str, flag: str) -> tuple[str, int, str | None]:
    """``NAME:DIM[=LABEL]`` -> (name, dim, label)."""
    name, sep, rest = text.partition(":")
    dim_text, _, label = rest.partition("=")
    try:
        dim = int(dim_text)
    except ValueError:
        dim = None
    if not sep or not name or dim is None or (label and not label.isidentifier()):
        form = "NAME:DIM[=LABEL]" if flag == "--dynamic" else "NAME:DIM"
        raise RNNXError(f"{flag} {text!r}: expected {form}, e.g. {'x:1=frames' if flag == '--dynamic' else 'x:2'}")
    if flag == "--static" and label:
        raise RNNXError(f"--static {text!r}: a static dimension takes no label; expected NAME:DIM")
    return name, dim, label or None
