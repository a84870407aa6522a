"""A model at the precision a file computes in: ``--precision fp16`` and ``--keep-io-types``.

fp16 is a float16 copy of the model; with ``keep_io_types`` that copy sits between Casts, so
the file takes and returns float32 while every operator inside computes in float16, and a
float64 copy of it (the self-check's and verify's reference) computes in float64 throughout.
"""

from __future__ import annotations

from typing import Any

from rnnx.errors import RNNXError


def at_precision(model: Any, example: Any, precision: str, keep_io_types: bool) -> tuple[Any, Any]:
    """The model (and example) that computes in ``precision``: for fp16, a float16 copy of the
    model and float16 example tensors; with ``keep_io_types``, the float16 copy inside a module
    that casts floating inputs to the model's dtype and floating outputs back to the inputs'
    (so the file takes and returns float32 with Casts at its edges, and a float64 copy of it,
    the self-check's reference, computes in float64)."""
    import copy

    import torch
    from torch.utils._pytree import tree_map

    if precision not in ("fp32", "fp16"):
        raise RNNXError(f"precision: expected fp32 or fp16, found {precision!r}")
    if precision == "fp32":
        if keep_io_types:
            raise RNNXError("keep_io_types: a float32 file's inputs and outputs are float32 already; give precision='fp16' with it, or drop it")
        return model, example
    half = copy.deepcopy(model).half()
    if keep_io_types:
        return cast_edges(half), example
    to_half = lambda v: v.half() if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
    return half, tree_map(to_half, example)


def _cast_edges_class(signature: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    class CastEdges(torch.nn.Module):
        """``module`` between Casts: floating inputs to its parameters' dtype, floating outputs
        back to the dtype the inputs came in."""

        def __init__(self, module: Any) -> None:
            super().__init__()
            self.module = module

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            inner = next((p.dtype for p in self.module.parameters() if p.is_floating_point()), torch.float32)
            outer = next((a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()), torch.float32)
            cast = lambda to: lambda v: v.to(to) if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
            out = self.module(*tree_map(cast(inner), args), **tree_map(cast(inner), kwargs))
            return tree_map(cast(outer), out)

    # the model's own parameter names, so that inputs are named and bound as the model's are
    CastEdges.forward.__signature__ = signature  # type: ignore[attr-defined]
    return CastEdges


def cast_edges(module: Any) -> Any:
    """``module`` inside a module that casts its floating inputs to ``module``'s parameters' dtype
    and its floating outputs back to the inputs' (a class made per model: torch is imported
    late, and each keeps its model's signature)."""
    import inspect

    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        signature = None
    wrapper = _cast_edges_class(signature.replace(parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                                              *signature.parameters.values()]) if signature else None)
    return wrapper(module)
