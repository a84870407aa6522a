"""The Python entry points: :func:`export`, and load, save, to_format, from_format and groups
from :mod:`rnnx.formats.files`."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rnnx.errors import ExportCheckFailed, RNNXError
from rnnx.exporters import shapes
from rnnx.exporters.model_exit import exit_refused
from rnnx.exporters.precision import at_precision
from rnnx.formats.files import from_format, groups, load, save, to_format

__all__ = ["export", "from_format", "groups", "load", "save", "to_format"]

# rnnx's own options, passed to rnnx.exporters.torch_export.export as they are.
_OWN = ("opset", "dynamic_shapes", "dynamic", "static", "input_names", "output_names", "check", "seed", "tolerances", "nondeterministic_atol",
        "precision", "keep_io_types")

# torch.onnx.export's keywords that change nothing rnnx does, whatever their value: rnnx
# always folds constants, optimizes, inlines, picks its own translation route (and falls back
# to the other one itself), and does not log.
_NO_OPS = ("verbose", "do_constant_folding", "dynamo", "optimize", "fallback", "autograd_inlining", "artifacts_dir")

# torch.onnx.export's keywords rnnx honours only at one value (or an empty one): name ->
# (whether a value is honoured, the value expected, why). Any other value is refused by name.
_ONLY_AT: dict[str, tuple[Any, str, str]] = {
    "export_params": (lambda v: v is True or v is None, "export_params=True", "rnnx always writes the weights into the file"),
    "keep_initializers_as_inputs": (lambda v: not v, "keep_initializers_as_inputs=False", "rnnx never makes the weights graph inputs"),
    "training": (lambda v: _enum_name(v) in ("EVAL", "PRESERVE"), "training=TrainingMode.EVAL", "rnnx exports and checks in eval mode"),
    "operator_export_type": (lambda v: _enum_name(v) == "ONNX", "operator_export_type=OperatorExportTypes.ONNX", "rnnx writes standard ONNX operators only"),
    "custom_opsets": (lambda v: not v, "no custom_opsets", "rnnx writes the ai.onnx domain at the opset given, and its own"),
    "export_modules_as_functions": (lambda v: not v, "export_modules_as_functions=False", "rnnx writes flat graphs, no ONNX functions"),
    "custom_translation_table": (lambda v: not v, "no custom_translation_table", "rnnx translates with its own table and torch.onnx's"),
    "report": (lambda v: not v, "report=False", "rnnx returns its own report: the return value, the CLI's --json"),
    "profile": (lambda v: not v, "profile=False", "rnnx does not profile the export"),
    "dump_exported_program": (lambda v: not v, "dump_exported_program=False", "rnnx does not keep the ExportedProgram"),
}

_MISSING: Any = object()


def export(model: Any, example_inputs: Any = _MISSING, path: str | Path | None = None, **options: Any) -> Any:
    """Export a PyTorch model to ONNX with native LSTM/GRU/RNN nodes, checked in ONNX Runtime.

    Returns an :class:`rnnx.exporters.writing.ExportReport`. If the file's outputs differ from
    the model's at any shape of the self-check, nothing is written and
    :class:`rnnx.ExportCheckFailed` is raised (a :class:`rnnx.ParityError`; its ``report`` says
    which case failed). rnnx's own options are those of
    :func:`rnnx.exporters.torch_export.export`: ``opset``, ``dynamic_shapes`` (torch.export's
    format), ``dynamic`` / ``static`` (``{"x": {1: "frames"}}``, ``{"x": [2]}``; a label may be
    ``("frames", min, max)`` or a ``torch.export.Dim``), ``input_names``, ``output_names``,
    ``check``, ``seed``, ``tolerances`` (``rnnx.tolerance.Tolerances.parse(["1e-3"])``) and
    ``nondeterministic_atol`` (the max abs error for outputs the model itself moves between two
    runs on the same inputs; without it such a model is refused). A model whose code calls
    ``exit()`` while rnnx runs it is refused too.
    ``streaming=True`` makes every nn.LSTM/GRU/RNN's initial states graph inputs
    (``<module>.h_in``, ``.c_in``; zeros to start) and its final states graph outputs
    (``.h_out``, ``.c_out``), records the pairs in the file (``rnnx.streaming``, read by
    :class:`rnnx.StreamingSession`) and checks the file chunk by chunk against the whole
    sequence; a bidirectional recurrence is refused.

    It also takes torch.onnx.export's keywords, with torch.onnx's meaning, so that a call to
    ``torch.onnx.export(model, args, f, ...)`` runs as it is with ``rnnx.export``:

    - ``args`` and ``f`` (the example inputs and the path), ``kwargs`` (keyword inputs, taken
      where they fill forward's next positional parameters), ``input_names`` (the first
      inputs' names; the others keep forward's), ``output_names`` (one per output),
      ``opset_version`` (= ``opset``) and ``dynamic_shapes``;
    - ``dynamic_axes``: ``{name: {dim: label}}`` or ``{name: [dims]}``, names among the inputs
      and ``output_names``. As in torch.onnx, the input dimensions it lists are dynamic and
      all others static; output entries are accepted and left to rnnx, which finds each
      output's axes from the inputs';
    - harmless ones whatever their value (``verbose``, ``do_constant_folding``, ``dynamo``,
      ``optimize``, ``fallback``, ``autograd_inlining``, ``artifacts_dir``) and ``verify``
      (rnnx checks the file always) and ``external_data`` (rnnx writes the weights beside the
      file when it passes 2 GB, as torch.onnx does with ``external_data=False``);
    - and at their default values only: ``export_params=True``,
      ``keep_initializers_as_inputs=False``, ``training=TrainingMode.EVAL`` (or ``PRESERVE`` of a
      model in eval mode), ``operator_export_type=OperatorExportTypes.ONNX``, no
      ``custom_opsets``, ``custom_translation_table`` or ``export_modules_as_functions``,
      ``report``, ``profile`` and ``dump_exported_program`` off.

    Any other keyword, or a value rnnx cannot honour, is refused by name with an
    :class:`rnnx.RNNXError`.
    """
    with exit_refused():  # a model whose code calls exit() has failed the export (rnnx.exporters.model_exit)
        return _export_model(model, example_inputs, path, options)


def _export_model(model: Any, example_inputs: Any, path: str | Path | None, options: dict[str, Any]) -> Any:
    # Deferred so that `import rnnx` stays light: the exporter and its passes load on first use.
    from rnnx.exporters.torch_export import export as _export

    example_inputs = _one_of("example inputs", ("example_inputs", example_inputs), ("args", options.pop("args", _MISSING)))
    path = _one_of("path", ("path", _MISSING if path is None else path), ("f", options.pop("f", _MISSING)))
    if example_inputs is _MISSING:
        raise RNNXError("example inputs: expected a tuple of example inputs (torch.onnx's args), found none; pass rnnx.export(model, (x,), 'model.onnx')")
    if path is _MISSING or path is None:
        raise RNNXError("path: expected the ONNX file to write (torch.onnx's f), found none; rnnx writes a file and returns its report")
    if not isinstance(path, (str, Path)):
        raise RNNXError(f"path: expected a file path, found a {type(path).__name__}; rnnx writes and checks a file on disk, so give its path")
    internal, notes = _torch_onnx_options(model, options)
    example_inputs = _with_keyword_inputs(model, example_inputs, options.pop("kwargs", None))
    dynamic_axes = options.pop("dynamic_axes", None)
    streaming = options.pop("streaming", False)
    if not isinstance(streaming, bool):
        raise RNNXError(f"streaming: expected True or False, found {streaming!r}")
    unknown = sorted(set(options) - set(_OWN))
    if unknown:
        raise RNNXError(f"export: expected a keyword of rnnx's ({', '.join(_OWN + ('streaming',))}) or of torch.onnx.export's (dynamic_axes, "
                        f"opset_version, input_names, output_names, ...), found {unknown[0]!r}; see help(rnnx.export)")
    model, example_inputs = at_precision(model, example_inputs, options.pop("precision", "fp32"), options.pop("keep_io_types", False))
    stream = None
    if streaming:  # the model's recurrent states as graph inputs and outputs (rnnx.exporters.streaming)
        from rnnx.exporters.streaming import prepare_streaming

        model, example_inputs, dynamic_axes, stream = prepare_streaming(model, example_inputs, options, dynamic_axes)
    internal.update(options)
    if internal.get("input_names") is not None:
        internal["input_names"] = _all_input_names(model, example_inputs, internal["input_names"])
    if dynamic_axes is not None:
        internal.update(_from_dynamic_axes(model, example_inputs, dynamic_axes, internal))
    with stream.active() if stream is not None else contextlib.nullcontext():
        report = _layer_checked(model, internal, lambda: _export(model, example_inputs, path, **internal))
    report.notes += notes
    if not report.passed:
        raise ExportCheckFailed(f"{report.check.failure()}; nothing was written to {path}", report)
    return report


def _layer_checked(model: Any, options: dict[str, Any], run: Any) -> Any:
    """``run()`` with verify's layer-by-layer check set for the export's self-check (a layer
    that is wrong fails the export even where the outputs hide it), unless the check is off."""
    from rnnx.exporters.selfcheck import LAYER_CHECK
    from rnnx.verify.models import export_layer_check

    if not options.get("check", True):
        return run()
    token = LAYER_CHECK.set(export_layer_check(model, options.get("seed", 0), options.get("tolerances")))
    try:
        return run()
    finally:
        LAYER_CHECK.reset(token)


def _one_of(what: str, *given: tuple[str, Any]) -> Any:
    named = [(name, value) for name, value in given if value is not _MISSING]
    if len(named) > 1:
        raise RNNXError(f"{what}: given twice (as {named[0][0]} and as {named[1][0]}); give one")
    return named[0][1] if named else _MISSING


def _shown(value: Any) -> str:
    """TrainingMode.TRAINING rather than <TrainingMode.TRAINING: 2>."""
    name = getattr(value, "name", None)
    return f"{type(value).__name__}.{name}" if isinstance(name, str) and not isinstance(value, (str, bytes)) else repr(value)


def _enum_name(value: Any) -> str:
    """TrainingMode.EVAL -> "EVAL" (torch's pybind11 enums, without importing torch.onnx)."""
    return str(getattr(value, "name", value)).rpartition(".")[2].upper()


def _torch_onnx_options(model: Any, options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """torch.onnx.export's keywords taken out of ``options``: rnnx's options they map to, and
    notes for the report. A keyword rnnx cannot honour is refused by name."""
    internal: dict[str, Any] = {}
    notes: list[str] = []
    for name in _NO_OPS:
        options.pop(name, None)
    for name, (honoured, expected, why) in _ONLY_AT.items():
        if name in options:
            value = options.pop(name)
            if not honoured(value):
                raise RNNXError(f"export: expected {expected} ({why}), found {name}={_shown(value)}; drop {name}")
            if name == "training" and _enum_name(value) == "PRESERVE" and getattr(model, "training", False):
                raise RNNXError("export: expected training=TrainingMode.EVAL, or PRESERVE of a model in eval mode (rnnx exports and "
                                "checks in eval mode), found training=TrainingMode.PRESERVE of a model in training mode; call "
                                "model.eval() or drop training")
    if "opset_version" in options:
        version = options.pop("opset_version")
        if "opset" in options and version is not None and options["opset"] != version:
            raise RNNXError(f"export: expected one opset, found opset={options['opset']} and opset_version={version}; give one of them")
        if version is not None:
            internal["opset"] = version
    if "verify" in options:
        if options.pop("verify") and options.get("check") is False:
            raise RNNXError("export: expected check=True with verify=True (rnnx's self-check is the verification), found check=False; drop one")
    if "external_data" in options:
        if options.pop("external_data"):
            notes.append("external_data=True: rnnx keeps the weights in the file unless it passes 2 GB (as torch.onnx does with external_data=False)")
    return internal, notes


def _with_keyword_inputs(model: Any, example: Any, kwargs: Mapping[str, Any] | None) -> Any:
    """torch.onnx's ``kwargs`` (forward's keyword inputs) appended to the positional example,
    where they fill forward's next parameters in order."""
    if not kwargs:
        return example
    args = list(example) if isinstance(example, (tuple, list)) else [example]
    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (AttributeError, TypeError, ValueError):
        params = []
    left = dict(kwargs)
    for name in params[len(args):]:
        if name not in left:
            break
        args.append(left.pop(name))
    if left:
        name = next(iter(left))
        after = params[len(args)] if len(args) < len(params) else "none"
        raise RNNXError(f"export: expected kwargs that fill forward's next parameters in order (rnnx passes example inputs "
                        f"positionally; next after {len(args)} inputs: {after}), found kwargs {name!r}; pass it in args in forward's order")
    return tuple(args)


def _all_input_names(model: Any, example: Any, names: Sequence[str]) -> list[str]:
    """As in torch.onnx, ``input_names`` may name the first inputs only: the others keep the
    names rnnx gives them (forward's parameter names)."""
    import torch

    names = list(names)
    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return names
    leaves, _ = shapes.leaves_of(model, tuple(example) if isinstance(example, (tuple, list)) else (example,))
    tensors = [leaf.name for leaf in leaves if leaf.is_tensor]
    return names + tensors[len(names):] if len(names) < len(tensors) else names


def _from_dynamic_axes(model: Any, example: Any, dynamic_axes: Any, internal: Mapping[str, Any]) -> dict[str, Any]:
    """torch.onnx's ``dynamic_axes`` as rnnx's ``dynamic`` and ``static``: the input dimensions
    it lists are dynamic (named, or named by rnnx for a list), every other input dimension is
    static, as in torch.onnx; output entries are checked and left to rnnx."""
    import torch

    if not isinstance(dynamic_axes, Mapping):
        raise RNNXError(f"dynamic_axes: expected a dict {{name: {{dim: label}}}} or {{name: [dims]}}, found a {type(dynamic_axes).__name__}")
    for other in ("dynamic_shapes", "dynamic", "static"):
        if internal.get(other) is not None:
            raise RNNXError(f"export: give either dynamic_axes (torch.onnx's) or {other}, not both")
    output_names = list(internal.get("output_names") or [])
    axes: dict[str, dict[int, str | None]] = {}
    for name, dims in dynamic_axes.items():
        if isinstance(dims, Mapping):
            entry = dict(dims)
        elif isinstance(dims, (list, tuple)):
            entry = dict.fromkeys(dims)
        else:
            raise RNNXError(f"dynamic_axes {name!r}: expected {{dim: label}} or [dims], found a {type(dims).__name__}")
        bad = [d for d in entry if isinstance(d, bool) or not isinstance(d, int)]
        if bad:
            raise RNNXError(f"dynamic_axes {name!r}: expected integer dimensions, found {bad[0]!r}")
        wrong = [label for label in entry.values() if label is not None and not isinstance(label, str)]
        if wrong:
            raise RNNXError(f"dynamic_axes {name!r}: expected a label (a string) per dimension, found {wrong[0]!r}")
        axes[name] = entry
    if isinstance(model, torch.jit.ScriptModule):
        inputs = [n for n in axes if n not in output_names]
        if inputs:
            raise RNNXError(f"dynamic_axes {inputs[0]!r}: a TorchScript model takes none for its inputs: rnnx places their sequence "
                            "and batch axes from its recurrent modules; drop dynamic_axes")
        return {}
    if not isinstance(model, torch.nn.Module):
        return {}  # refused as it is by the exporter
    leaves, _ = shapes.leaves_of(model, tuple(example) if isinstance(example, (tuple, list)) else (example,))
    tensors = [leaf for leaf in leaves if leaf.is_tensor]
    given = internal.get("input_names")
    if given is not None:
        shapes.rename_leaves([shapes.Leaf(leaf.index, leaf.name, leaf.value) for leaf in leaves], given)  # refuses a wrong count
    # Keyed as the exporter reads them: by the graph names given, else by forward's names.
    graph = list(given) if given is not None else [t.name for t in tensors]
    by_name = {t.name: k for k, t in enumerate(tensors)} | {name: k for k, name in enumerate(graph)}
    dynamic: dict[str, dict[int, str | None]] = {}
    for name, entry in axes.items():
        if name in by_name:
            dynamic[graph[by_name[name]]] = entry
        elif name not in output_names:
            known = ", ".join(dict.fromkeys(list(given or []) + [t.name for t in tensors]))
            raise RNNXError(f"dynamic_axes: expected an input name ({known}) or an output name "
                            f"({', '.join(output_names) if output_names else 'none given; pass output_names=[...] as torch.onnx requires'}), "
                            f"found {name!r}")
    static = {}
    for leaf, name in zip(tensors, graph):
        rank = leaf.value.dim()
        listed = {d % rank for d in dynamic.get(name, {}) if -rank <= d < rank}
        rest = [d for d in range(rank) if d not in listed]
        if rest:
            static[name] = rest
    return {"dynamic": dynamic or None, "static": static or None}
