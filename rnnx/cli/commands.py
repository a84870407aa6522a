"""Each verb of ``rnnx``: options in, one call into the library, its result printed.

Nothing is computed here that the Python API does not offer; a verb only chooses what to
print and turns a failed check into exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rnnx import api, formats
from rnnx.cli.flags import flagged
from rnnx.cli.groups import BackendToleranceArgs, ShapeArgs, ToleranceArgs
from rnnx.engines import doctor
from rnnx.engines.acceptance import predict
from rnnx.engines.tensorrt import BuildOptions, build_engine, build_from_weights
from rnnx.engines.tensorrt_parser import parser_for
from rnnx.engines.tensorrt_targets import TargetVerdict, has_control_flow, target_verdicts
from rnnx.errors import ExportCheckFailed, ParityError, RNNXError
from rnnx.exporters.loading import load_checkpoint, load_model, order_inputs, parse_input
from rnnx.fileio import refuse_overwriting
from rnnx.formats import cudnn_raw
from rnnx.formats.onnx_read import data_files, load_model as load_onnx
from rnnx.graphs.inspect import as_json, as_text, file_format, fusable, inspect_model, inspect_weights, weights_as_json, weights_as_text
from rnnx.graphs.precision import computes_in_float16
from rnnx.layouts import cudnn
from rnnx.pipelines.bundle import make_bundle
from rnnx.pipelines.convert import convert as convert_file
from rnnx.pipelines.fuse import fuse_file
from rnnx.pipelines.lower import lower_file
from rnnx.pipelines.rewrite_check import RewriteDiffers, check_rewrite_size
from rnnx.shapes.file_dims import read_file_dims
from rnnx.shapes.profiles import describe_dimensions, merge_shapes
from rnnx.shapes.rewrite_plan import parse_input_shapes
from rnnx.spec import RNNSpec
from rnnx.streaming import STREAMING_KEY, graph_ranks, read_streaming
from rnnx.verify import verify as verify_stack
from rnnx.verify.drive import parse_map
from rnnx.verify.models import is_model_code, is_whole_model, verify_file, verify_model
from rnnx.verify.plots import require_plots, write_html
from rnnx.verify.run import DTYPES


def json_report(args: argparse.Namespace, report: dict[str, Any], passed: bool | None = None, default: Any = None) -> str:
    """What --json prints on stdout, one object as rnnx/cli/schema/<verb>.json describes it: the
    verb's report with ``verb`` and a top-level ``passed`` put first (true; false where its check
    failed and it exits 1; null where it checks nothing). A report that says ``passed`` itself
    keeps its own value."""
    return json.dumps({"verb": args.command, "passed": passed, **report}, indent=2, default=default)


def convert(args: argparse.Namespace) -> int:
    result = convert_file(
        args.input,
        args.output,
        from_format=args.from_format,
        to_format=args.to_format,
        select=args.select,
        spec=args.spec,
        opset=args.opset,
        batch_first=args.batch_first,
        seq_lens=args.seq_lens_input,
        states=not args.no_states,
        check=not args.no_check,
        nonfinite=args.nonfinite,
        tolerances=ToleranceArgs.parse(args),
        quantize=args.quantize,
        dtype=_one_dtype(args.dtype),
        precision=args.precision,
        keep_io_types=args.keep_io_types,
    )
    if args.json:
        print(json_report(args, result.to_json(), None if result.report is None else bool(result.report)))
    else:
        print(f"{result.source} ({result.source_format}) -> {result.output} ({result.output_format})")
        print(f"spec: {result.spec}  ({result.parameters} parameters)")
        if result.report is not None:
            print(result.report)
        if result.quantization_line():
            print(result.quantization_line())
        if result.seconds:
            print(result.timing_line())
        for note in result.notes:
            print(f"note: {flagged(note, 'convert')}")
    if result.report is not None and not result.report:
        raise ParityError(f"parity check failed: {result.report.failure()}; nothing was written to {result.output}")
    return 0


def _one_dtype(given: list[str] | None) -> str | None:
    """convert's --dtype: one element type of a raw blob, by its long name."""
    if given is None:
        return None
    if len(given) != 1:
        raise RNNXError(f"--dtype {','.join(given)}: a raw blob has one element type; give one of float32, float16, bfloat16, float64")
    return DTYPES[given[0]]


def export(args: argparse.Namespace) -> int:
    tolerances = ToleranceArgs.parse(args)  # refused before the model is imported
    model, example = load_model(args.model)
    refuse_overwriting(_export_inputs(args.model) + [args.checkpoint], {"-o": args.output, "-o's external data": args.output.with_name(args.output.name + ".data")})
    loaded = load_checkpoint(model, args.checkpoint) if args.checkpoint else None
    if args.input:
        example = order_inputs(model, [parse_input(text) for text in args.input])
    if example is None:
        raise RNNXError("export: no example inputs; pass --input [NAME:]SHAPE for each model input or define example_inputs beside the model")
    dynamic: dict[str, dict[int, Any]] = {}
    for name, dim, label in args.dynamic or []:
        dynamic.setdefault(name, {})[dim] = label
    static: dict[str, list[int]] = {}
    for name, dim, _ in args.static or []:
        static.setdefault(name, []).append(dim)
    try:
        report = api.export(model, example, args.output, opset=args.opset, dynamic=dynamic or None, static=static or None,
                            input_names=args.input_names, output_names=args.output_names, check=not args.no_check, seed=args.seed,
                            tolerances=tolerances, nondeterministic_atol=args.nondeterministic_atol, precision=args.precision,
                            keep_io_types=args.keep_io_types,
                            streaming=getattr(args, "streaming", False))
    except ExportCheckFailed as failed:  # the report says which case failed; then exit status 1 with its one line
        _print_export(args, failed.report, loaded)
        raise
    _print_export(args, report, loaded)
    return 0


def _print_export(args: argparse.Namespace, report: Any, loaded: str | None) -> None:
    if loaded:
        report.notes.insert(0, loaded)
    out = report.to_json()
    if args.no_check:  # nothing was checked: not a pass (convert, fuse and lower say null too)
        out["passed"] = None
    print(json_report(args, out) if args.json else report)


def _export_inputs(target: str) -> list[Path]:
    """The files ``rnnx export`` reads for its model: the .py or TorchScript file, or the module's own file."""
    source = target.rpartition(":")[0] if ":" in target else target
    if source.endswith(".py") or ":" not in target:
        return [Path(source)]
    module = sys.modules.get(source)
    path = getattr(module, "__file__", None) if module is not None else None
    return [Path(path)] if path else []


def inspect(args: argparse.Namespace) -> int:
    fmt = args.from_format or file_format(args.model)
    if fmt != "onnx":  # a weight file: its recurrent groups and the spec each is read with
        groups = inspect_weights(args.model, fmt, spec=args.spec, dtype=_one_dtype(args.dtype), select=args.select)
        for g in groups:  # a group's refusal names the library's parameters; the user reads inspect's flags
            g.unread = flagged(g.unread, "inspect") if g.unread is not None else None
        print(json_report(args, weights_as_json(args.model, fmt, groups)) if args.json else weights_as_text(args.model, fmt, groups))
        return 0
    tensorrt = getattr(args, "tensorrt", None)  # which TensorRT's parser rules judge the nodes (default 10.x)
    tensorrt = parser_for(tensorrt)[0] if tensorrt else None  # a release between two read ones: the one below
    if args.spec or args.dtype or args.select:
        raise RNNXError(f"{args.model}: an ONNX model says what it holds and inspect lists all of it; drop --spec, --dtype and --select (they read weight files)")
    model = load_onnx(args.model, lazy=True)  # weights through memory maps: inspect reads structure, and a few values
    try:
        check_rewrite_size(model, args.model)  # the dry run of rnnx fuse copies the graph, as fuse does
        found = fusable(model)
    except RNNXError as exc:
        found = {"not_analysed": str(exc)}
    reports = inspect_model(model, judge=predict.with_tensorrt(tensorrt) if tensorrt else predict)
    try:  # what a streaming file carries from chunk to chunk; a damaged record is said, not fatal to inspecting the rest
        stream, damaged = read_streaming({p.key: p.value for p in model.metadata_props}, *graph_ranks(model)), ""
    except RNNXError as exc:
        stream, damaged = None, str(exc)
    dims = read_file_dims(model, feeding=False)
    # A Loop, Scan or If (a re-rolled Python loop, lowered Scans): TensorRT takes the file only where it takes every body node
    targets = target_verdicts(model) if has_control_flow(model) else []
    if args.json:
        out = as_json(reports, found, model, args.model)
        out["dimensions"] = dims.to_json()
        if targets:
            out["tensorrt_targets"] = [t.to_json() for t in targets]
        if stream is not None or damaged:
            out["streaming"] = stream.to_dict() if stream is not None else {"damaged": damaged}
        print(json_report(args, out, default=str))
    else:
        text = "\n".join([as_text(reports, found, model, args.model), *dims.describe(), *_targets_text(targets)])
        extra = stream.describe() if stream is not None else [f"streaming: the record is damaged: {damaged}"] if damaged else []
        print("\n".join(extra + [text]) if extra else text)
    return 0


def _targets_text(targets: list[TargetVerdict]) -> list[str]:
    if not targets:
        return []
    return ["TensorRT's ONNX parser on the whole file, Loop, Scan and If bodies included (predicted from onnx-tensorrt's source):",
            *(f"  {t.text()}" for t in targets)]


def fuse(args: argparse.Namespace) -> int:
    return _rewrite(args, fuse_file)


def lower(args: argparse.Namespace) -> int:
    return _rewrite(args, lower_file, select=args.node, for_tensorrt=args.for_target)


def _rewrite(args: argparse.Namespace, rewrite: Any, **options: Any) -> int:
    """fuse and lower: the rewrite, checked; one that differs from its input has its comparison
    case by case on stdout (a table, or JSON with every case's numbers) and its one line on stderr."""
    tolerances, dims, shapes = ToleranceArgs.parse(args), ShapeArgs.dims(args), parse_input_shapes(args.input)
    try:
        report = rewrite(args.model, args.output, check=not args.no_check, seed=args.seed, tolerances=tolerances, dims=dims, input_shapes=shapes,
                         **options)
    except RewriteDiffers as exc:
        if args.json:  # error.json's object, with the comparison: the one --json object of this run
            print(json.dumps({"passed": False, "exit_code": 1, "error": f"rnnx {args.command}: {exc}", "kind": "parity", "verb": args.command,
                              "check": exc.check.to_json()}, indent=2))
        else:
            print(exc.check)
        raise
    print(json_report(args, report.to_json(), None if report.check is None else bool(report.check)) if args.json else report)
    return 0


def check_environment(args: argparse.Namespace) -> int:
    info, check = doctor.environment(), doctor.layout_check()
    print(json_report(args, {"environment": info, "cudnn_layout": check}, check["passed"], default=str) if args.json else doctor.as_text(info, check))
    if check["passed"] is False:
        raise ParityError("rnnx's cuDNN offset table disagrees with this GPU's cuDNN or PyTorch; do not use cuDNN blobs here")
    return 0


def build(args: argparse.Namespace) -> int:
    options = BuildOptions(
        precision=args.precision,
        profiles=args.profile or [],
        min_shapes=merge_shapes(args.min_shapes, "--min-shapes"),
        opt_shapes=merge_shapes(args.opt_shapes, "--opt-shapes"),
        max_shapes=merge_shapes(args.max_shapes, "--max-shapes"),
        workspace_bytes=args.workspace * (1 << 20) if args.workspace else None,
        timing_cache=args.timing_cache,
        optimization_level=args.opt_level,
        dla_core=args.dla_core,
        hardware_compatible=args.hardware_compatible,
        version_compatible=args.version_compatible,
    )
    if args.from_weights:
        meta = build_from_weights(api.load(args.input, format=args.from_format, select=args.select, spec=args.spec), args.output, options)
    else:
        meta = build_engine(args.input, args.output, options)
    if args.json:
        print(json_report(args, meta))  # nothing is checked: passed is null
    else:
        profiles = "; ".join(describe_dimensions(d) for d in meta["profile_dimensions"]) or "static shapes"
        print(f"wrote {args.output} (TensorRT {meta['tensorrt']}, {meta['precision']}, {meta['gpu']['name']}; profile {profiles})")
    return 0


def bundle(args: argparse.Namespace) -> int:
    report = make_bundle(args.input, args.output, tensorrt=args.tensorrt, jetpack=args.jetpack, precision=args.precision or "fp32",
                         profiles=args.profile or None, min_shapes=merge_shapes(args.min_shapes, "--min-shapes"),
                         opt_shapes=merge_shapes(args.opt_shapes, "--opt-shapes"), max_shapes=merge_shapes(args.max_shapes, "--max-shapes"),
                         seed=args.seed)
    print(json_report(args, report.to_json(), report.passed) if args.json else report)
    return 0


def verify(args: argparse.Namespace) -> int:
    tolerances = ToleranceArgs.parse(args)
    if args.html:
        require_plots("--html")  # before any work: a check that runs and then cannot write its report helps nobody
    if args.against is None or is_model_code(args.against):
        return _verify_whole(args, tolerances)
    if args.against.suffix.lower() == ".py":
        raise RNNXError(f"--against {args.against}: model code is named file.py:NAME, NAME being the module-level model, class or factory "
                        f"(e.g. --against {args.against}:model)")
    for flag, given in (("--checkpoint", args.checkpoint), ("--dim", args.dim), ("--static", args.static), ("--chunks", args.chunks),
                        ("--state", args.state)):
        if given:
            raise RNNXError(f"{flag} applies when --against names model code (file.py:NAME or a TorchScript file), found the weights file {args.against}")
    model_files = [args.model, *data_files(args.model)] if args.model and args.model.suffix.lower() == ".onnx" else [args.model]
    against_files = [args.against, *data_files(args.against)] if args.against.suffix.lower() == ".onnx" else [args.against]
    refuse_overwriting(model_files + against_files, {"--report": args.report, "--html": args.html})
    if args.model is not None and args.model.suffix.lower() == ".onnx" and not (args.input_map or args.spec or args.batch_first) \
            and is_whole_model(args.model):
        return _verify_whole_against_weights(args, tolerances)
    report = verify_stack(
        args.against, args.model, backends=args.backends, seq_lens=args.seq_lens, batches=args.batch, dtypes=args.dtype or ["fp32"],
        tolerances=tolerances, backend_tolerances=BackendToleranceArgs.parse(args), seed=args.seed, select=args.select, spec=args.spec,
        input_map=parse_map(args.input_map), batch_first=True if args.batch_first else None,
    )  # each case is a rnnx.progress step: shown under the verb's line at a terminal (main opens the display), not with --json or a pipe
    _write_and_print(args, report)
    if not report.passed:
        raise ParityError("parity check failed" + ("; see the diagnosis above" if report.diagnosis and not args.json else ""))
    return 0


def _verify_whole(args: argparse.Namespace, tolerances: Any) -> int:
    """``--against file.py:NAME`` (or TorchScript): the whole model, end to end and layer by
    layer; no ``--against``: the file on its own."""
    if args.model is None:
        raise RNNXError("verify: expected MODEL (the ONNX file to check), found none; with --against it is held against that source, without it checked on its own")
    if args.model.suffix.lower() != ".onnx":
        raise RNNXError(f"{args.model}: a whole model or a file on its own is verified as ONNX; expected a .onnx file")
    for flag, given in (("--tol", args.tol), ("--input-map", args.input_map), ("--batch-first", args.batch_first), ("--select", args.select),
                        ("--spec", args.spec)):
        if given:
            raise RNNXError(f"{flag} applies to a recurrent stack verified against its weights file; for a whole model use --atol/--rtol and --dim")
    if args.dtype not in (None, ["fp32"]):
        computes = "fp16" if computes_in_float16(load_onnx(args.model, lazy=True)) else "fp32"
        if args.dtype != [computes]:
            raise RNNXError(f"--dtype {','.join(args.dtype)}: a whole model is checked in the precision its file computes in, here {computes}; "
                            "write an fp16 file with rnnx export --precision fp16 (drop --dtype: it is found from the file)")
    inputs = [args.model, *data_files(args.model)] + [p for p in (Path(str(args.against)) if args.against else None, args.checkpoint) if p is not None and p.is_file()]
    refuse_overwriting(inputs, {"--report": args.report, "--html": args.html})
    dims = ShapeArgs.dims(args)
    if getattr(args, "chunks", None) is not None or getattr(args, "state", None) or (args.against is not None and _is_streaming(args.model)):
        return _verify_chunks(args, tolerances, dims)  # a streaming file against its model: chunk by chunk (the default chunks unless given)
    if args.against is None:
        for flag, given in (("--checkpoint", args.checkpoint), ("--static", args.static)):
            if given:
                raise RNNXError(f"{flag} needs --against file.py:NAME (the model code {'to load it into' if flag == '--checkpoint' else 'asked which sizes it takes'})")
        report = verify_file(args.model, args.seq_lens, args.batch, dims, args.seed, tolerances)
    else:
        report = verify_model(args.model, str(args.against), args.checkpoint, args.seq_lens, args.batch, dims, args.seed, tolerances,
                              static=ShapeArgs.static(args))
    return _whole_report(args, report)


def _verify_whole_against_weights(args: argparse.Namespace, tolerances: Any) -> int:
    """A whole model's ONNX file against a weights file: each recurrent layer held to the
    reference with the weights of the group layer of its spec (``--select`` one group)."""
    if args.tol:
        raise RNNXError(f"--tol applies to a recurrent stack verified against its weights file; {args.model} is a whole model "
                        "(its inputs are not a stack's): its layers are checked against the weights, use --atol/--rtol")
    report = verify_file(args.model, args.seq_lens, args.batch, ShapeArgs.dims(args), args.seed, tolerances, weights=args.against, select=args.select)
    return _whole_report(args, report)


def _whole_report(args: argparse.Namespace, report: Any) -> int:
    """A whole model's verify report, written where asked (--report, --html) and printed; exit 1 if it failed."""
    _write_and_print(args, report)
    if not report.passed:
        first = report.first_drift
        raise ParityError("verification failed" + (f": layer {first.name} is the first out of tolerance" if first is not None
                                                   else f": {report.refused}" if report.refused else ""))
    return 0


def _write_and_print(args: argparse.Namespace, report: Any) -> None:
    if args.report:
        report.dump(args.report)
    if args.html:
        write_html(report, args.html)
    print(json_report(args, report.to_json()) if args.json else report)


def _is_streaming(path: Path) -> bool:
    """Whether the file was exported with --streaming (its rnnx.streaming record)."""
    return any(p.key == STREAMING_KEY for p in load_onnx(path, lazy=True).metadata_props)


def _verify_chunks(args: argparse.Namespace, tolerances: Any, dims: dict[str, int]) -> int:
    """``--chunks 1,7,32``: a streaming file run chunk by chunk, its states carried (rnnx.verify.chunked)."""
    from rnnx.verify.chunked import parse_state, verify_chunked

    if args.against is None:
        raise RNNXError("--chunks: expected --against file.py:NAME, the model run on the whole sequence, found none")
    if args.static:
        raise RNNXError("--static: a streaming file is checked chunk by chunk at the sizes --seq-lens, --batch and --dim give; drop --static")
    states = [parse_state(s) for s in args.state or []]
    report = verify_chunked(args.model, str(args.against), list(args.chunks) if args.chunks else None, args.checkpoint, states, args.seq_lens,
                            args.batch, dims, args.seed, tolerances)
    if args.report:
        args.report.write_text(json.dumps(report.to_json(), indent=2))
    print(json_report(args, report.to_json()) if args.json else report)
    if not report.passed:
        first = report.first_failure()
        raise ParityError("chunked verification failed" + (f": output {first.output} in chunks of {first.chunk} frame(s)" if first else ""))
    return 0


def layout(args: argparse.Namespace) -> int:
    if (args.spec is None) == (args.file is None):
        raise RNNXError("expected exactly one of --spec SPEC or FILE, found " + ("both" if args.spec else "neither"))
    dtype = _one_dtype(args.dtype)
    if args.spec is not None:
        spec, itemsize = RNNSpec.parse(args.spec), cudnn_raw.itemsize(cudnn_raw.dtype_name(dtype))
    else:
        if args.file.suffix.lower() == cudnn_raw.SUFFIX and args.from_format in (None, "cudnn"):  # its table is the spec's alone
            raise RNNXError(f"{args.file}: a headerless {cudnn_raw.SUFFIX} blob does not say what it holds, so its table is the spec's: "
                            "run rnnx layout --spec SPEC [--dtype DTYPE] without the file")
        weights = api.load(args.file, format=args.from_format, select=args.select)
        spec, itemsize = weights.spec, cudnn_raw.itemsize(dtype) if dtype else weights.dtype.itemsize
    rows = cudnn.table_as_dicts(spec, itemsize)
    total = cudnn.blob_size(spec)
    if args.json:
        print(json_report(args, {"spec": str(spec), "elements": total, "itemsize": itemsize, "entries": rows}))
        return 0
    print(f"cuDNN weight space for {spec}: {total} elements ({total * itemsize} bytes at {itemsize} bytes each)")
    print(f"{'pseudo':>6} {'layer':>5} {'dir':<8} {'linID':>5} {'gate':<4} {'kind':<4} {'offset':>10} shape")
    for r in rows:
        print(f"{r['pseudo_layer']:>6} {r['layer']:>5} {r['direction']:<8} {r['lin_layer_id']:>5} {r['gate'] or '-':<4} {r['kind']:<4} {r['offset']:>10} {tuple(r['shape'])}")
    return 0


def list_formats(args: argparse.Namespace) -> int:
    rows = [{"name": n, "extensions": list(formats.get(n).extensions), "description": formats.get(n).description} for n in formats.names()]
    if args.json:  # an object, as every verb's: the list under "formats"
        print(json_report(args, {"formats": rows}))
    else:
        for r in rows:
            print(f"{r['name']:<8} {' '.join(r['extensions']) or '-':<28} {r['description']}")
    return 0
