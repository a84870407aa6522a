"""Tracing with torch.export: the example as pytree leaves and specs, which of them reach a
recurrence, the dynamic-shape specs offered and refined from torch's own suggestions, and the
translation to ONNX at the opset torch.onnx builds."""

from __future__ import annotations

import re
from typing import Any

from rnnx import progress
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters import ops, shapes, torchscript_route
from rnnx.exporters.bounded import Bounds
from rnnx.exporters.selfcheck import run_eager
from rnnx.exporters.size_runs import model_runs
from rnnx.exporters.torchlib_once import torchlib_listed_once
from rnnx.exporters.user_code import pre_hooks
from rnnx.exporters.writing import first_line, quiet, suggested_fixes
from rnnx.graphs.legalize import convert_down
from rnnx.shapes.roles import OTHER


def runs_on_example(model: Any, leaves: list[Any], structure: Any) -> None:
    """The model on the example as given, before any route: an example it refuses (tokens as
    floats, a wrong rank) is the user's input, and its own error says what is wrong with it."""
    progress.step("running the model on the example")
    try:
        run_eager(model, [leaf.value for leaf in leaves], structure)
    except Exception as exc:  # noqa: BLE001  the user's model may raise anything
        given = ", ".join(f"{leaf.name} {'x'.join(map(str, leaf.value.shape)) or 'scalar'} {str(leaf.value.dtype).removeprefix('torch.')}"
                          for leaf in leaves if leaf.is_tensor)
        raise RNNXError(f"the model raised on the example as given ({given}): {one_line(exc, CAUSE_CHARS, typed=True)}; "
                        "give an example the model runs on (--input shapes and dtypes)") from exc

# torch.onnx builds at 18 or later; rnnx converts down itself with onnx's converter, since
# torch.onnx's own down-conversion fails on reductions and in a process that ran its
# TorchScript exporter before.
TORCH_ONNX_MIN_OPSET = 18


def is_structured(values: list[Any], structure: Any) -> bool:
    """Whether the example holds more than tensors in tuples and lists (namedtuples, dicts,
    values that are not tensors), which the TorchScript exporter does not pass through as given."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    if any(not isinstance(v, torch.Tensor) for v in values):
        return True
    paths, _ = tree_flatten_with_path(unflatten(values, structure))
    return any(not hasattr(k, "idx") or type(k).__name__ != "SequenceKey" for path, _ in paths for k in path)


def module_of_op(program: Any, text: str) -> str:
    """" in <module> (<Class>)" for the first ATen op named in ``text`` that the traced program
    calls, from the node's nn_module_stack; "" where it cannot be told."""
    names = re.findall(r"aten(?:::|\.)_?(\w+)", text)
    for node in program.graph.nodes:
        target = str(getattr(node, "target", ""))
        if node.op == "call_function" and any(re.search(rf"aten\._?{re.escape(n)}\b", target) for n in names):
            stack = node.meta.get("nn_module_stack") or {}
            if stack:
                path, cls = list(stack.values())[-1]
                cls_name = getattr(cls, "__name__", str(cls).rpartition(".")[2].strip("'>"))
                return f" at {path or '(the model)'} ({cls_name})"
    return ""


def cause_of(exc: BaseException) -> str:
    """An error's own words, without the wrapper rnnx and torch put around them."""
    text = first_line(exc)
    for prefix in ("torch.onnx could not translate the model: ", "torch.export could not trace the model: ",
                   f"{torchscript_route.ROUTE} could not translate the model: "):
        text = text.removeprefix(prefix)
    text = re.sub(r"^<class '[\w.]+'>: ", "", text)
    return text.split("; the full trace is its cause")[0]


def unneeded_dimensions(naming: Any, leaves: list[Any], given: dict[tuple[int, int], str]) -> list[tuple[str, int, int]]:
    """(input, dim, size) of every dynamic input dimension that is neither a batch nor a
    length and that the user did not name."""
    out = []
    for leaf in leaves:
        for d, v in enumerate(naming.input_dims.get(leaf.name, [])):
            if isinstance(v, str) and naming.roles.get(v, OTHER) == OTHER and (leaf.index, d) not in given:
                out.append((leaf.name, d, int(leaf.value.shape[d])))
    return out


def asked_static(leaves: list[Any], specs: list[Any]) -> frozenset[tuple[str, int]]:
    """(input, dim) of every dimension the user made static: left out of the offered entry
    (static= / --static), or, with torch.export's own dynamic_shapes, given no Dim there."""
    out = set()
    for leaf, spec in zip(leaves, specs):
        if not leaf.is_tensor:
            continue
        entry = dict(spec) if isinstance(spec, dict) else dict(enumerate(spec)) if isinstance(spec, (list, tuple)) else {}
        out |= {(leaf.name, d) for d in range(leaf.value.dim()) if entry.get(d) is None}
    return frozenset(out)


def without_static(specs: list[Any], static: list[tuple[str, int, int]], leaves: list[Any]) -> list[Any]:
    """``specs`` with the ``static`` dimensions left out (torch.export keeps those at the example's size)."""
    return [_drop(spec, {d for n, d, _ in static if n == leaf.name}) or None for leaf, spec in zip(leaves, specs)]


def in_recurrence(model: Any, param: str) -> bool:
    from rnnx.exporters.modules import swappable

    owner = model.get_submodule(param.rpartition(".")[0]) if "." in param else model
    return swappable(owner)


def leaf_specs(args: tuple[Any, ...], spec: Any) -> list[Any]:
    """torch.export's dynamic_shapes tree, one entry per flattened input."""
    import torch

    out: list[Any] = []

    def walk(arg: Any, entry: Any) -> None:
        if isinstance(arg, torch.Tensor) or not isinstance(arg, (tuple, list, dict)):
            out.append(entry)
        elif isinstance(arg, dict):
            for k in arg:
                walk(arg[k], entry.get(k) if isinstance(entry, dict) else None)
        else:
            for i, a in enumerate(arg):
                walk(a, entry[i] if isinstance(entry, (tuple, list)) and i < len(entry) else None)

    walk(args, tuple(spec) if isinstance(spec, (tuple, list)) else (spec,) if len(args) == 1 else spec)
    return out


def unflatten(values: list[Any], structure: Any) -> Any:
    from torch.utils._pytree import tree_unflatten

    return tree_unflatten(values, structure)


def runs_program(model: Any, structure: Any) -> Any:
    """A probe: does the eager model run on these inputs? Bounded as the audit's probes are
    (:mod:`rnnx.exporters.bounded`): a stop by a budget, or a model that ends the process, stops
    the export rather than answer "no"."""

    return lambda values: not model_runs(model, structure, values, Bounds.of(model, values), "on the example grown")


def accepts_values(program: Any, values: list[Any], structure: Any) -> bool:
    """Whether the traced program's input constraints admit ``values`` (its module checks them)."""
    import torch

    try:
        with quiet(), torch.no_grad():
            program.module()(*unflatten(values, structure))
        return True
    except Exception:  # a violated constraint, or anything the graph raises at that shape
        return False


def _drop(spec: Any, dims: set[int]) -> Any:
    """A leaf's dynamic-shapes entry without ``dims`` (torch.export keeps those at the example's size)."""
    return {d: v for d, v in spec.items() if d not in dims} if isinstance(spec, dict) and dims else spec


def recurrent_arguments(model: Any, leaves: list[Any], structure: Any) -> dict[int, tuple[str, Any]]:
    """leaf index -> ("input" or "state", module) for every example tensor that reaches an
    nn.LSTM / GRU / RNN unchanged, as its input or its initial state. Found by running the
    model once with a hook on each recurrent module, since only the call says which is which."""
    import torch

    from rnnx.exporters.modules import RECURRENT_MODULES

    ids = {id(leaf.value): leaf.index for leaf in leaves if leaf.is_tensor}
    found: dict[int, tuple[str, Any]] = {}

    def hook(name: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else kwargs.get("input")
        if isinstance(x, torch.Tensor) and id(x) in ids:
            found.setdefault(ids[id(x)], ("input", module))
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        for state in (hx if isinstance(hx, (tuple, list)) else (hx,)):
            if isinstance(state, torch.Tensor) and id(state) in ids:
                found.setdefault(ids[id(state)], ("state", module))

    try:
        with pre_hooks(((n, m) for n, m in model.named_modules() if isinstance(m, RECURRENT_MODULES)), hook):
            run_eager(model, [leaf.value for leaf in leaves], structure)
    except Exception:  # noqa: BLE001  the model's own failure is reported by the trace, not here
        pass
    return found


def state_layer_axes(model: Any, leaves: list[Any], structure: Any) -> dict[int, set[int]]:
    """leaf index -> {0} for every example tensor that reaches a recurrent module as its
    initial state: its first axis counts layers times directions, which no size-1 guess may
    grow; its batch axis may grow with the others."""
    return {i: {0} for i, (role, _) in recurrent_arguments(model, leaves, structure).items() if role == "state" and leaves[i].value.dim() == 3}


def trace_export(model: Any, work: Any, leaves: list[Any], structure: Any, specs: list[Any], offered: Any, user_shapes: bool,
           grown: tuple[list[Any], str] | None = None) -> tuple[Any, str]:
    """The ExportedProgram, and how size-1 dimensions were handled (for the report). ``grown``:
    inputs the model ran with where the audit found a batch or length fixed, traced on instead."""
    import torch
    import torch.fx.experimental._config as fx_config

    from rnnx.exporters.modules import data_writes_traced, packed_sequences_as_lengths

    values = [leaf.value for leaf in leaves]
    attempts: list[tuple[list[Any], bool, str]] = []
    has_one = any(leaf.is_tensor and 1 in leaf.value.shape for leaf in leaves)
    if grown is not None:
        attempts.append((grown[0], False, f"on a copy of the example with {grown[1]} at a size the model runs with, so that torch sees them vary"))
        attempts.append((grown[0], True, f"on a copy of the example with {grown[1]} at a size the model runs with, size-oblivious"))
    elif user_shapes:
        attempts.append((values, True, "with the dynamic shapes given, size-oblivious (as torch.onnx does)"))
    elif has_one:
        layer_axes = state_layer_axes(model, leaves, structure)
        larger, which = shapes.grow_size_one(runs_program(model, structure), leaves, [_drop(spec, layer_axes.get(leaf.index, set())) for leaf, spec in zip(leaves, specs)])
        if which:
            attempts.append((larger, False, "on a copy of the example grown to 2 along " + ", ".join(f"{n} dim {d}" for n, d in which)
                             + " (size-1 dimensions the model also runs with), so that torch sees them as dynamic"))
            attempts.append((values, True, "size-oblivious (torch's backed_size_oblivious), so that size-1 dimensions can stay dynamic"))
        # Size-1 dimensions the model does not run with at 2 (an image's channel, one layer's
        # states) are static: torch's own 0/1 rule says so.
        attempts.append((values, False, "on the example as given; its size-1 dimensions are static"))
    else:
        attempts.append((values, False, "on the example as given"))
    errors: list[Exception] = []
    for vals, oblivious, how in attempts:
        shapes_now = offered
        for _ in range(2):  # once more with torch's own suggested fixes, as torch.onnx does
            try:
                with quiet(), packed_sequences_as_lengths(), data_writes_traced(), fx_config.patch(backed_size_oblivious=oblivious):
                    program = torch.export.export(work, unflatten(vals, structure), dynamic_shapes=shapes_now, strict=False)
                if vals is not values and not accepts_values(program, values, structure):
                    # traced on a grown copy, torch may have pinned a grown dimension at 2 or
                    # above: a program that refuses the user's own example is not kept
                    errors.append(RNNXError("the trace on the grown example refuses the example as given"))
                    break
                if shapes_now is not offered:
                    how += "; named dimensions narrowed to the ranges torch suggested (" + "; ".join(suggested_fixes(str(errors[-1]))) + ")"
                return program, how
            except torch._dynamo.exc.UserError as exc:
                errors.append(exc)
                try:
                    shapes_now = refined_shapes(exc.msg, shapes_now)
                except Exception:  # no usable suggestion: this attempt has failed
                    break
            except Exception as exc:  # torch.export raises many types; the first line says what failed
                errors.append(exc)
                break
    raise RNNXError(f"torch.export could not trace the model: {first_line(errors[0])}; the full trace is its cause (the CLI prints it with --debug)") from errors[0]


def refined_shapes(msg: str, dynamic_shapes: Any) -> Any:
    """torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes, for shapes
    that mix named Dims with Dim.AUTO: torch's own reads every entry's ``__name__`` and fails
    on a Dim.AUTO (a _DimHint) with AttributeError. The hints are held out while torch
    applies its fixes to the named Dims, then put back."""
    from torch.export.dynamic_shapes import _DimHint, refine_dynamic_shapes_from_suggested_fixes

    def held_out(tree: Any) -> Any:
        if isinstance(tree, _DimHint):
            return None
        if isinstance(tree, dict):
            return {k: held_out(v) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return type(tree)(held_out(v) for v in tree)
        return tree

    def put_back(given: Any, refined: Any) -> Any:
        if isinstance(given, _DimHint):
            return given
        if isinstance(given, dict) and isinstance(refined, dict):
            return {k: put_back(v, refined.get(k)) for k, v in given.items()}
        if isinstance(given, (list, tuple)) and isinstance(refined, (list, tuple)):
            return type(given)(put_back(a, b) for a, b in zip(given, refined))
        return refined

    return put_back(dynamic_shapes, refine_dynamic_shapes_from_suggested_fixes(msg, held_out(dynamic_shapes)))


def to_onnx(program: Any, opset: int) -> Any:
    import torch


    try:
        with quiet(), torchlib_listed_once():
            onnx_program = torch.onnx.export(program, custom_translation_table=ops.TRANSLATIONS,
                                             opset_version=max(opset, TORCH_ONNX_MIN_OPSET), verbose=False, optimize=True)
    except Exception as exc:  # torch.onnx raises many types; the first line tells what failed
        raise RNNXError(f"torch.onnx could not translate the model: {first_line(exc)}; the full trace is its cause (the CLI prints it with --debug)") from exc
    proto = onnx_program.model_proto
    return convert_down(proto, opset) if opset < TORCH_ONNX_MIN_OPSET else proto
