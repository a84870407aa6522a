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
import math
import sys
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters.model_exit import exit_refused
from rnnx.fileio import check_archive, read_safetensors, require_file
from rnnx.formats.torch import weights_only_refusal

_DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool")


def load_model(target: str) -> tuple[Any, Any]:
    """(module, example_inputs or None) from ``file.py:NAME``, ``package.module:NAME`` or a
    TorchScript file (whose example inputs come from --input). A file that calls exit() while it
    is imported or built (argparse at module level) is refused in one line."""
    with exit_refused():
        return _load_model(target)


def _load_model(target: str) -> tuple[Any, Any]:
    progress.step(f"importing torch and loading {target}")  # torch's import alone takes seconds
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
            raise RNNXError(f"model: importing {path} raised {one_line(exc, CAUSE_CHARS, typed=True)}; fix the model file") from None
        finally:
            sys.path.pop(0)
    else:
        try:
            namespace = importlib.import_module(source)
        except ImportError as exc:
            raise RNNXError(f"model: cannot import {source!r} ({exc}); check PYTHONPATH or give a file.py path") from None
        except Exception as exc:  # the user's package raised while importing
            raise RNNXError(f"model: importing {source} raised {one_line(exc, CAUSE_CHARS, typed=True)}") from None
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
            raise RNNXError(f"model: calling {name}() raised {one_line(exc, CAUSE_CHARS, typed=True)}") from None
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


# Where training code keeps the model's state_dict in a checkpoint dict, in the order tried:
# Lightning and most loops ("state_dict"), the PyTorch tutorials ("model_state_dict"), and
# common hand-written loops.
CONTAINER_KEYS = ("state_dict", "model_state_dict", "model", "net", "network", "module", "model_state", "weights")
_KEYS_SHOWN = 4


def load_checkpoint(module: Any, path: Path) -> str | None:
    """Load a state_dict (weights-only .pt/.pth, or .safetensors) into ``module``, strictly.

    A training checkpoint is accepted too: a dict holding the state_dict under one of
    :data:`CONTAINER_KEYS`, its keys carrying a wrapper's prefix (DataParallel's ``module.``,
    Lightning's ``model.``, torch.compile's ``_orig_mod.``) or lacking one the model has. Returns
    one line saying which container key and prefix were used (None for a plain state_dict).
    """
    import torch

    path = require_file(Path(path))
    if path.suffix.lower() == ".onnx":
        raise RNNXError(f"{path}: an ONNX file, not torch weights; --checkpoint takes the state_dict (.pt, .pth, .safetensors) to load "
                        "into the model code, and the ONNX file is verify's MODEL: rnnx verify FILE.onnx --against code.py:NAME")
    if path.suffix.lower() == ".safetensors":  # rnnx's own bounded reader, then torch tensors
        state: Any = {k: torch.from_numpy(v) for k, v in read_safetensors(path, mapped=False)[0].items()}
    else:
        check_archive(path)
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # UnpicklingError and friends: the same words as convert's
            raise weights_only_refusal(path, exc) from None
    state, container = _state_dict_in(state, path)
    wanted = list(module.state_dict())
    state, prefix, ignored = _matched_prefix(state, wanted)
    where = f"{path}" + (f"[{container!r}]" if container else "") + (f" with {prefix}" if prefix else "")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise RNNXError(f"{where}: does not fit the model ({_load_errors(exc)}); check the checkpoint or the model") from None
    if not container and not prefix:
        return None
    said = f"checkpoint: loaded {where}" + (f"; ignored {len(ignored)} key(s) the model has no place for ({_few(ignored)})" if ignored else "")
    return said


def _is_state_dict(value: Any) -> bool:
    import torch

    return isinstance(value, dict) and bool(value) and all(isinstance(k, str) for k in value) and any(isinstance(v, torch.Tensor) for v in value.values())


def _state_dict_in(state: Any, path: Path) -> tuple[dict[str, Any], str | None]:
    """The state_dict in what torch.load gave, and the container key it was under (or None)."""
    import torch

    if isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values()):
        return state, None
    if isinstance(state, dict):
        for key in CONTAINER_KEYS:
            if _is_state_dict(state.get(key)):
                return {k: v for k, v in state[key].items() if isinstance(v, torch.Tensor)}, key
        if _is_state_dict(state):
            return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, None
        keys = ", ".join(repr(k) for k in list(state)[:8])
        raise RNNXError(f"{path}: expected a state_dict, or a training checkpoint holding one under one of "
                        f"{', '.join(repr(k) for k in CONTAINER_KEYS)}, found a dict of {keys}; save model.state_dict()")
    raise RNNXError(f"{path}: expected a state_dict (a dict of tensors), found a {type(state).__name__}; save model.state_dict()")


def _matched_prefix(state: dict[str, Any], wanted: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """``state`` with the key prefix removed (or added) that makes the most of its keys the
    model's, what was done ("the prefix 'module.' removed"), and the keys outside that prefix
    that were left out (only where every key of the model is found under it). Unchanged where
    no prefix matches more keys than none."""
    model = set(wanted)
    if set(state) == model or not model:
        return state, "", []
    best: tuple[int, str, str] = (sum(k in model for k in state), "", "")
    for kind, keys, targets in (("removed", state, model), ("added", wanted, set(state))):
        counts: dict[str, int] = {}
        for key in keys:
            parts = key.split(".")
            for i in range(1, len(parts)):
                if ".".join(parts[i:]) in targets:
                    prefix = ".".join(parts[:i]) + "."
                    counts[prefix] = counts.get(prefix, 0) + 1
        for prefix, count in counts.items():
            if count > best[0]:
                best = (count, kind, prefix)
    count, kind, prefix = best
    if not kind:
        return state, "", []
    said = f"the prefix {prefix!r} {kind}" + {"module.": " (DataParallel's)", "model.": " (Lightning's)", "_orig_mod.": " (torch.compile's)"}.get(prefix, "")
    if kind == "added":  # only where it makes the whole model found: a partial match says more as it is
        added = {prefix + k: v for k, v in state.items()}
        return (added, said, []) if model <= set(added) else (state, "", [])
    inside = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    outside = [k for k in state if not k.startswith(prefix)]
    if model <= set(inside):
        # Every key of the model is found under the prefix: the rest belongs to the training
        # wrapper (a loss's buffers, a teacher, an EMA copy).
        return inside, said, outside
    return {**{k: state[k] for k in outside}, **inside}, said, []  # torch's lists then name what is missing


def _few(keys: list[str]) -> str:
    shown = ", ".join(keys[:_KEYS_SHOWN])
    return shown + (f", ... ({len(keys) - _KEYS_SHOWN} more)" if len(keys) > _KEYS_SHOWN else "")


def _load_errors(exc: BaseException) -> str:
    """torch's load_state_dict message on one line: its missing and unexpected keys (the first
    few of each, with how many more) and its first size mismatches."""
    import re

    parts = []
    mismatches = []
    for line in str(exc).splitlines():
        line = line.strip()
        found = re.match(r"(Missing key\(s\)|Unexpected key\(s\)) in state_dict: (.*)", line)
        if found:
            keys = re.findall(r'"[^"]*"', found.group(2))  # quoted, as torch writes them
            parts.append(f"{found.group(1)} in state_dict: {_few(keys)}")
        elif line.startswith("size mismatch for"):
            mismatches.append(line.rstrip("."))
    if mismatches:
        parts.append("; ".join(mismatches[:2]) + (f"; ... ({len(mismatches) - 2} more size mismatches)" if len(mismatches) > 2 else ""))
    return "; ".join(parts) if parts else one_line(exc, CAUSE_CHARS)


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


def parse_dim(text: str, flag: str) -> tuple[str, int, Any]:
    """``NAME:DIM[=LABEL]`` or ``NAME:DIM=LABEL:MIN[:MAX]`` -> (name, dim, label), the label
    being None, a string, or (label, min, max) when a range is given (max None: unbounded)."""
    name, sep, rest = text.partition(":")
    dim_text, _, given = rest.partition("=")
    label, *bounds = given.split(":") if given else [""]
    try:
        dim = int(dim_text)
    except ValueError:
        dim = None
    form = "NAME:DIM[=LABEL] or NAME:DIM=LABEL:MIN[:MAX]" if flag == "--dynamic" else "NAME:DIM"
    example = "x:1=frames or x:1=frames:6:4096" if flag == "--dynamic" else "x:2"
    if not sep or not name or dim is None or (label and not label.isidentifier()) or len(bounds) > 2 or (bounds and not label):
        raise RNNXError(f"{flag} {text!r}: expected {form}, e.g. {example}")
    if flag == "--static" and label:
        raise RNNXError(f"--static {text!r}: a static dimension takes no label; expected NAME:DIM")
    if not bounds:
        return name, dim, label or None
    if not all(b.isdigit() for b in bounds):
        raise RNNXError(f"{flag} {text!r}: expected a range of non-negative integers, MIN or MIN:MAX, e.g. {label}:6 or {label}:6:4096")
    lo, hi = int(bounds[0]), int(bounds[1]) if len(bounds) > 1 else None
    if hi is not None and hi <= lo:  # torch's Dim takes no range of one value: that is a static size
        raise RNNXError(f"{flag} {text!r}: expected min < max (a dynamic size takes more than one value), found min={lo}, max={hi}"
                        + ("; to fix its size, use --static NAME:DIM" if hi == lo else ""))
    return name, dim, (label, lo, hi)
