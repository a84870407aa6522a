"""torch.onnx's list of torchlib's functions, read once per process rather than once per export.

``torch.onnx.export`` builds its registry of ATen-to-ONNX functions at every call
(``ONNXRegistry.from_torchlib``), and for that asks onnxscript for torchlib's functions
(``get_torchlib_ops`` of the ``onnxscript._framework_apis`` module torch names). onnxscript 0.7
answers by parsing the source of each of its ~500 functions again to read its domain
(``OnnxFunction.function_ir`` is a property, not cached): about 0.7 s of CPU per export out of
2.3 s for a 2-layer LSTM, the same list each time while torchlib's registry is unchanged.

:func:`torchlib_listed_once` answers from the first reading for as long as that registry holds
the same functions (its identity and its count of overloads: registering a new torchlib function
reads it again), only inside rnnx's own call of ``torch.onnx.export``; it puts torch's function
back afterwards. Where torch or onnxscript is laid out otherwise, it does nothing and torch reads
the list as it always has: the cache saves time, it never decides what is exported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_LISTED: dict[tuple[int, int], list[Any]] = {}


def _apis_module() -> Any:
    """The onnxscript module torch asks for the list, or None where torch names none."""
    try:
        from torch.onnx._internal import _lazy_import

        named = _lazy_import.onnxscript_apis
        name = getattr(named, "_name", None) or named.__name__  # a _LazyModule, or the module itself
        module = importlib.import_module(name)
    except (ImportError, AttributeError):
        return None
    return module if callable(getattr(module, "get_torchlib_ops", None)) else None


def _registry_key() -> tuple[int, int] | None:
    """What the list depends on: torchlib's registry and how many functions it holds."""
    try:
        from onnxscript.function_libs.torch_lib import ops, registration  # noqa: F401  (importing ops registers them)

        registry = registration.default_registry
        return id(registry), sum(len(f.overloads) + len(f.complex) for _, f in registry.items())
    except (ImportError, AttributeError):
        return None


def _once(read: Callable[[], list[Any]]) -> Callable[[], list[Any]]:
    def listed() -> list[Any]:
        key = _registry_key()
        if key is None:
            return read()
        if key not in _LISTED:
            _LISTED.clear()  # a registry that changed: its old list is not kept
            _LISTED[key] = list(read())
        return list(_LISTED[key])  # a copy: torch may not change ours

    # marked, so that a nested block finds it in place
    listed.rnnx_once = True  # type: ignore[attr-defined]
    return listed


@contextmanager
def torchlib_listed_once() -> Iterator[None]:
    """Within this block, torch's ``get_torchlib_ops`` answers from the first reading."""
    module = _apis_module()
    if module is None or getattr(module.get_torchlib_ops, "rnnx_once", False):
        yield
        return
    original = module.get_torchlib_ops
    module.get_torchlib_ops = _once(original)
    try:
        yield
    finally:
        module.get_torchlib_ops = original
