"""The ``rnnx`` command. Each verb is a thin call into the package.

Exit status: 0 success, 1 a parity check failed, 2 bad input or usage, 3 an internal error
(a bug in rnnx: the message says so; --debug shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from rnnx import __version__, progress
from rnnx.errors import ParityError, RNNXError
from rnnx.fileio import refuse_overwriting, remove_partial_outputs

INTERNAL_ERROR = 3
_MAX_CHECK_SIZE = 100_000  # verify's lengths and batches: each one is run, in float64 too
_MAX_CHECK_VALUES = 32
_STEPPED_VERBS = ("convert", "export", "fuse", "lower")


def _cmd_convert(args: argparse.Namespace) -> int:
    from rnnx.pipelines.convert import convert

    tolerances = _tolerances(args)  # a bad value is refused before anything is read
    result = convert(
        args.input,
        args.output,
        from_format=args.from_format,
        to_format=args.to_format,
        select=args.select,
        spec=args.spec,
        opset=args.opset,
        batch_first=args.batch_first,
        seq_lens=args.seq_lens,
        states=not args.no_states,
        check=not args.no_check,
        nonfinite=args.nonfinite,
        tolerances=tolerances,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(f"{result.source} ({result.source_format}) -> {result.output} ({result.output_format})")
        print(f"spec: {result.spec}  ({result.parameters} parameters)")
        if result.report is not None:
            print(result.report)
        for note in result.notes:
            print(f"note: {note}")
    if result.report is not None and not result.report:
        raise ParityError(f"parity check failed: {result.report.failure()}; nothing was written to {result.output}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from rnnx.exporters.loading import load_checkpoint, load_model, order_inputs, parse_dim, parse_input
    from rnnx.exporters.torch_export import export

    tolerances = _tolerances(args)  # a bad value is refused before the model is imported
    model, example = load_model(args.model)
    refuse_overwriting(_export_inputs(args.model) + [args.checkpoint], {"-o": args.output, "-o's external data": args.output.with_name(args.output.name + ".data")})
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint)
    if args.input:
        example = order_inputs(model, [parse_input(text) for text in args.input])
    if example is None:
        raise RNNXError("export: no example inputs; pass --input [NAME:]SHAPE for each model input or define example_inputs beside the model")
    dynamic: dict[str, dict[int, str | None]] = {}
    for text in args.dynamic or []:
        name, dim, label = parse_dim(text, "--dynamic")
        dynamic.setdefault(name, {})[dim] = label
    static: dict[str, list[int]] = {}
    for text in args.static or []:
        name, dim, _ = parse_dim(text, "--static")
        static.setdefault(name, []).append(dim)
    report = export(model, example, args.output, opset=args.opset, dynamic=dynamic or None, static=static or None,
                    input_names=_names(args.input_names), output_names=_names(args.output_names), check=not args.no_check, seed=args.seed,
                    tolerances=tolerances)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    if not report.passed:
        raise ParityError(f"{report.check.failure()}; nothing was written to {args.output}")  # type: ignore[union-attr]
    return 0


def _export_inputs(target: str) -> list[Path]:
    """The files ``rnnx export`` reads for its model: the .py or TorchScript file, or the module's own file."""
    source = target.rpartition(":")[0] if ":" in target else target
    if source.endswith(".py") or ":" not in target:
        return [Path(source)]
    module = sys.modules.get(source)
    return [Path(module.__file__)] if module is not None and getattr(module, "__file__", None) else []


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer below 2**63, found {text!r}")
    return value


def _names(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",")] if text else None


def _cmd_inspect(args: argparse.Namespace) -> int:
    import copy

    from rnnx.formats.onnx_read import load_model
    from rnnx.graphs.fuse_steps import fuse_steps
    from rnnx.engines.acceptance import predict
    from rnnx.graphs.inspect import as_json, as_text, inspect_model

    model = load_model(args.model)
    reports = inspect_model(model, judge=predict)
    fusable = fuse_steps(copy.deepcopy(model)).fused
    print(json.dumps(as_json(reports, fusable, model), indent=2, default=str) if args.json else as_text(reports, fusable, model))
    return 0


def _cmd_fuse(args: argparse.Namespace) -> int:
    from rnnx.pipelines.fuse import fuse_file

    tolerances = _tolerances(args)
    report = fuse_file(args.model, args.output, check=not args.no_check, seed=args.seed, tolerances=tolerances)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from rnnx.engines.doctor import as_text, environment, layout_check

    info, check = environment(), layout_check()
    print(json.dumps({"environment": info, "cudnn_layout": check}, indent=2, default=str) if args.json else as_text(info, check))
    if check["passed"] is False:
        raise ParityError("rnnx's cuDNN offset table disagrees with this GPU's cuDNN or PyTorch; do not use cuDNN blobs here")
    return 0


def _cmd_lower(args: argparse.Namespace) -> int:
    from rnnx.pipelines.lower import lower_file

    tolerances = _tolerances(args)
    result = lower_file(args.model, args.output, select=args.select, check=not args.no_check, seed=args.seed, tolerances=tolerances)
    report = result.pop("_report")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"lowered {len(result['lowered'])} node(s) to hoisted-input Scans: {', '.join(result['lowered']) or '-'}; written to {result['output']}")
        for item in result["left_alone"]:
            print(f"left alone: {item['node']}: {item['reason']}")
        if report is not None:
            print(report)
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from rnnx.engines.tensorrt import BuildOptions, Profile, build_engine, build_from_weights

    options = BuildOptions(
        precision=args.precision,
        profiles=[Profile.parse(p) for p in args.profile or []],
        workspace_bytes=args.workspace * (1 << 20) if args.workspace else None,
        timing_cache=args.timing_cache,
        optimization_level=args.opt_level,
        dla_core=args.dla_core,
        hardware_compatible=args.hardware_compatible,
        version_compatible=args.version_compatible,
    )
    if args.from_weights:
        from rnnx import api

        meta = build_from_weights(api.load(args.input, format=args.from_format, select=args.select, spec=args.spec), args.output, options)
    else:
        meta = build_engine(args.input, args.output, options)
    print(json.dumps(meta, indent=2) if args.json else f"wrote {args.output} (TensorRT {meta['tensorrt']}, {meta['precision']}, {meta['gpu']['name']})")
    return 0


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise RNNXError(f"{what}: expected comma-separated integers like 1,17,256, found {text!r}") from None
    if not values or min(values) < 1:
        raise RNNXError(f"{what}: expected positive integers, found {text!r}")
    if max(values) > _MAX_CHECK_SIZE:
        raise RNNXError(f"{what}: expected at most {_MAX_CHECK_SIZE} (a check runs at every value), found {max(values)}")
    if len(values) > _MAX_CHECK_VALUES:
        raise RNNXError(f"{what}: expected at most {_MAX_CHECK_VALUES} values (each pairs with every other option's), found {len(values)}")
    return values


def _cmd_verify(args: argparse.Namespace) -> int:
    from rnnx.tolerance import parse_tol_items
    from rnnx.verify import verify
    from rnnx.verify.models import is_model_code

    per_backend = parse_tol_items(args.tol)
    tolerances = _tolerances(args)
    if args.against is None or is_model_code(args.against):
        return _verify_whole(args, tolerances)
    if args.against.suffix.lower() == ".py":
        raise RNNXError(f"--against {args.against}: model code is named file.py:NAME, NAME being the module-level model, class or factory "
                        f"(e.g. --against {args.against}:model)")
    for flag, given in (("--checkpoint", args.checkpoint), ("--dim", args.dim)):
        if given:
            raise RNNXError(f"{flag} applies when --against names model code (file.py:NAME or a TorchScript file), found the weights file {args.against}")
    from rnnx.formats.onnx_read import data_files
    from rnnx.verify.drive import parse_map

    model_files = [args.model, *data_files(args.model)] if args.model and args.model.suffix.lower() == ".onnx" else [args.model]
    against_files = [args.against, *data_files(args.against)] if args.against.suffix.lower() == ".onnx" else [args.against]
    refuse_overwriting(model_files + against_files, {"--report": args.report, "--html": args.html})
    report = verify(
        args.against, args.model, backends=[b.strip() for b in args.backends.split(",") if b.strip()],
        seq_lens=_ints(args.seq_lens, "--seq-lens") if args.seq_lens else None, batches=_ints(args.batch, "--batch") if args.batch else None, dtypes=[d.strip() for d in args.dtype.split(",")],
        tolerances=tolerances, backend_tolerances=per_backend, seed=args.seed, select=args.select, spec=args.spec,
        input_map=parse_map(args.input_map), batch_first=True if args.batch_first else None,
        progress=sys.stderr.isatty() and not args.json,
    )
    if args.report:
        report.dump(args.report)
    if args.html:
        from rnnx.verify.plots import write_html

        write_html(report, args.html)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    if not report.passed:
        raise ParityError("parity check failed" + ("; see the diagnosis above" if report.diagnosis and not args.json else ""))
    return 0


def _verify_whole(args: argparse.Namespace, tolerances: Any) -> int:
    """``--against file.py:NAME`` (or TorchScript): the whole model, end to end and layer by
    layer; no ``--against``: the file on its own."""
    from rnnx.formats.onnx_read import data_files
    from rnnx.verify.models import verify_file, verify_model

    if args.model is None:
        raise RNNXError("verify: expected MODEL (the ONNX file to check), found none; with --against it is held against that source, without it checked on its own")
    if args.model.suffix.lower() != ".onnx":
        raise RNNXError(f"{args.model}: a whole model or a file on its own is verified as ONNX; expected a .onnx file")
    for flag, given in (("--tol", args.tol), ("--input-map", args.input_map), ("--batch-first", args.batch_first), ("--select", args.select),
                        ("--spec", args.spec), ("--html", args.html)):
        if given:
            raise RNNXError(f"{flag} applies to a recurrent stack verified against its weights file; for a whole model use --atol/--rtol and --dim")
    if args.dtype.strip() != "fp32":
        raise RNNXError(f"--dtype {args.dtype}: a whole model runs in the dtypes its file takes; --dtype applies to a stack verified against its weights")
    inputs = [args.model, *data_files(args.model)] + [p for p in (Path(str(args.against)) if args.against else None, args.checkpoint) if p is not None and p.is_file()]
    refuse_overwriting(inputs, {"--report": args.report})
    dims = _dims(args.dim)
    seq_lens = _ints(args.seq_lens, "--seq-lens") if args.seq_lens else None
    batches = _ints(args.batch, "--batch") if args.batch else None
    progress = sys.stderr.isatty() and not args.json
    if args.against is None:
        if args.checkpoint:
            raise RNNXError("--checkpoint needs --against file.py:NAME (the model code to load it into)")
        report = verify_file(args.model, seq_lens, batches, dims, args.seed, tolerances, progress)
    else:
        report = verify_model(args.model, str(args.against), args.checkpoint, seq_lens, batches, dims, args.seed, tolerances, progress)
    if args.report:
        report.dump(args.report)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    if not report.passed:
        first = report.first_drift
        raise ParityError("verification failed" + (f": layer {first.name} is the first out of tolerance" if first is not None else ""))
    return 0


def _dims(items: list[str] | None) -> dict[str, int]:
    dims = {}
    for item in items or []:
        label, sep, size = item.partition("=")
        if not sep or not label or not size.isdigit() or not 0 < int(size) <= _MAX_CHECK_SIZE:
            raise RNNXError(f"--dim {item!r}: expected LABEL=SIZE with SIZE between 1 and {_MAX_CHECK_SIZE}, like --dim channels=3")
        dims[label] = int(size)
    return dims


def _cmd_layout(args: argparse.Namespace) -> int:
    from rnnx import api
    from rnnx.formats import cudnn
    from rnnx.spec import RNNSpec

    if (args.spec is None) == (args.file is None):
        raise RNNXError("expected exactly one of --spec SPEC or FILE, found " + ("both" if args.spec else "neither"))
    if args.spec is not None:
        spec, itemsize = RNNSpec.parse(args.spec), 4
    else:
        weights = api.load(args.file, format=args.from_format, select=args.select)
        spec, itemsize = weights.spec, weights.dtype.itemsize
    rows = cudnn.table_as_dicts(spec, itemsize)
    total = cudnn.blob_size(spec)
    if args.json:
        print(json.dumps({"spec": str(spec), "elements": total, "itemsize": itemsize, "entries": rows}, indent=2))
        return 0
    print(f"cuDNN weight space for {spec}: {total} elements ({total * itemsize} bytes at {itemsize} bytes each)")
    print(f"{'pseudo':>6} {'layer':>5} {'dir':<8} {'linID':>5} {'gate':<4} {'kind':<4} {'offset':>10} shape")
    for r in rows:
        print(f"{r['pseudo_layer']:>6} {r['layer']:>5} {r['direction']:<8} {r['lin_layer_id']:>5} {r['gate'] or '-':<4} {r['kind']:<4} {r['offset']:>10} {tuple(r['shape'])}")
    return 0


def _cmd_formats(args: argparse.Namespace) -> int:
    from rnnx import formats

    rows = [{"name": n, "extensions": list(formats.get(n).extensions), "description": formats.get(n).description} for n in formats.names()]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<8} {' '.join(r['extensions']) or '-':<28} {r['description']}")
    return 0


def _add_graph_rewrite_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """The arguments every ONNX-to-ONNX verb shares."""
    p.add_argument("model", type=Path, help="ONNX model (never modified)")
    p.add_argument("-o", "--output", type=Path, required=True, help=f"{what} ONNX model (written atomically)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the check's inputs")
    p.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime comparison")
    _add_tolerance_arguments(p, "graph output")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")


def _add_tolerance_arguments(p: argparse.ArgumentParser, named: str) -> None:
    """Polygraphy's tolerance options, for every verb that checks what it writes."""
    from rnnx.tolerance import BY_DTYPE

    defaults = "; ".join(f"{dtype} atol {t.atol:g}, rtol {t.rtol:g}" for dtype, t in BY_DTYPE.items())
    group = p.add_argument_group(
        "tolerance", "Polygraphy's semantics: an element fails when its absolute error exceeds atol and its relative error exceeds rtol "
        "(or, with --check-error-stat max/mean/median/quantile, when that statistic of both does); NaN fails. Defaults depend on the "
        f"dtype that ran: {defaults} (see rnnx/tolerance.py). An option given sets that field only; the others keep the dtype's. "
        f"Each option is VALUE for every output or NAME:VALUE for one {named}; repeat it for several.")
    group.add_argument("--atol", action="append", metavar="[NAME:]VALUE", help="absolute tolerance, e.g. 1e-3 or Y:1e-3")
    group.add_argument("--rtol", action="append", metavar="[NAME:]VALUE", help="relative tolerance (error / |reference|), e.g. 1e-2 or h_n:1e-2")
    group.add_argument("--check-error-stat", action="append", metavar="[NAME:]STAT",
                       help="what the tolerances apply to: elemwise (default; every element), max, mean, median or quantile (the 99th percentile)")


def _tolerances(args: argparse.Namespace) -> Any:
    """The tolerance options as rnnx.tolerance.Tolerances, or None where none was given (refused, exit 2, if malformed)."""
    from rnnx.tolerance import Tolerances

    given = [getattr(args, key, None) for key in ("atol", "rtol", "check_error_stat")]
    return Tolerances.parse(*given) if any(given) else None


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line like every other refusal (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rnnx",
        description="Move recurrent networks (LSTM, GRU, RNN) between frameworks, ONNX and cuDNN, with parity checked.",
        epilog="Specs are written like lstm,input=8,hidden=16,layers=2,bidirectional,proj=4. Exit status: 0 ok, 1 parity failure, 2 bad input, 3 internal error (a bug: please report it with --debug's traceback).",
    )
    parser.add_argument("--version", action="version", version=f"rnnx {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout (also accepted after the verb)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_parser = sub.add_parser

    def add_parser(*a: object, **k: object) -> argparse.ArgumentParser:
        verb = _add_parser(*a, **k)  # type: ignore[arg-type]
        verb.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors")
        verb.add_argument("--max-memory", metavar="SIZE", help="memory an untrusted file may claim (archive members, array "
                          "headers, ONNX Runtime runs of its graph), e.g. 4G (default: 1 GiB or 16x the input's size, whichever is larger)")
        verb.add_argument("--time-limit", type=float, metavar="SECONDS", help="time ONNX Runtime may spend on a model rnnx did not build, "
                          "over all its runs (default: 20 s plus 1 s per 10 MB of model)")
        return verb

    sub.add_parser = add_parser  # type: ignore[method-assign]

    p = sub.add_parser("convert", help="convert weights between formats and check the result",
                       description="Convert recurrent weights between formats. The written file is re-read and run against the float64 reference unless --no-check.")
    p.add_argument("input", type=Path, help="weights file (.pt .pth .safetensors .onnx .npz .keras .weights.h5)")
    p.add_argument("-o", "--output", type=Path, required=True, help="file to write (written atomically)")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", help="input format (default: from extension and content)")
    p.add_argument("--to", dest="to_format", metavar="FORMAT", help="output format (default: from extension; .safetensors means rnnx)")
    p.add_argument("--select", metavar="GROUP", help="the recurrent group to convert when the file holds several")
    p.add_argument("--spec", metavar="SPEC", help="spec for formats that do not describe themselves (cudnn, jax) or cannot tell tanh from relu")
    p.add_argument("--opset", type=int, metavar="N", help="ONNX opset for --to onnx (default 17, what TensorRT 8.6 parses)")
    p.add_argument("--batch-first", action="store_true", help="ONNX model takes X as (batch, seq, input)")
    p.add_argument("--seq-lens", action="store_true", help="ONNX model takes per-sequence lengths as input seq_lens")
    p.add_argument("--no-states", action="store_true", help="ONNX model starts from zero states instead of taking h0/c0")
    p.add_argument("--no-check", action="store_true", help="skip running the written file against the reference")
    p.add_argument("--nonfinite", choices=["error", "warn"], default="error", help="NaN/Inf weights: refuse (default) or convert with a warning, unchecked")
    _add_tolerance_arguments(p, "output (Y, h_n, c_n)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print a JSON report on stdout")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("export", help="export a PyTorch model to ONNX with native LSTM/GRU/RNN nodes, checked",
                       description="Export a PyTorch model to ONNX with native recurrent nodes (projections lowered to Scans). torch.export "
                       "decides which input dimensions are dynamic (every one is offered); rnnx names them (batch, seq, <input>_dim<k>) by where "
                       "they flow. The file is checked in ONNX Runtime against the model at batch 1 and with each dynamic dimension varied, "
                       "and written only if the check passes (exit 1 otherwise).")
    p.add_argument("model", help="file.py:NAME or package.module:NAME (a module, class or factory), or a TorchScript file")
    p.add_argument("-o", "--output", type=Path, required=True, help="ONNX file to write (atomically)")
    p.add_argument("--checkpoint", type=Path, help="state_dict to load first (.pt/.pth weights-only, .safetensors)")
    p.add_argument("--input", action="append", metavar="[NAME:]SHAPE[:DTYPE]",
                   help="example input, repeated: x:5x3x8, [5,3,8], tokens:4x12:int64 (shapes, seeded random values; integers are ones), "
                   "or lengths:values=12,9,4:int64 (those values); named inputs go to forward's parameter of that name")
    p.add_argument("--dynamic", action="append", metavar="NAME:DIM[=LABEL]", help="make this input dimension dynamic (and name it); by default torch decides for every dimension")
    p.add_argument("--static", action="append", metavar="NAME:DIM", help="keep this input dimension at the example's size")
    p.add_argument("--input-names", metavar="A,B,...", help="names of the graph inputs, one per tensor input (default: forward's parameter names)")
    p.add_argument("--output-names", metavar="A,B,...", help="names of the graph outputs (default: dict keys or output_0, output_1, ...)")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset, 14 to the newest onnx knows (default 17, what TensorRT 8.6 on JetPack 5 parses)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the check's inputs")
    p.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime check")
    _add_tolerance_arguments(p, "graph output (see --output-names)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the export report as JSON on stdout")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("inspect", help="list the LSTM/GRU/RNN nodes of an ONNX model and which backends accept them",
                       description="Find every LSTM, GRU and RNN node (subgraphs included), say what it is, where its weights come from, "
                       "and whether ONNX Runtime, TensorRT's ONNX parser and cuDNN accept it as it is.")
    p.add_argument("model", type=Path, help="ONNX model")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("fuse", help="turn decomposed or unrolled LSTM cells of an ONNX model into native nodes, checked",
                       description="Recognise LSTM and GRU cells that an exporter decomposed (MatMul/Gemm + Split or Slices + Sigmoid/Tanh + Mul/Add), "
                       "make each a native step, join chains of steps over a sequence into one node with a dynamic length, and check the result "
                       "against the input in ONNX Runtime. Say what was left alone and why.")
    _add_graph_rewrite_arguments(p, "fused")
    p.set_defaults(func=_cmd_fuse)

    p = sub.add_parser("doctor", help="show what is installed and check the cuDNN layout against this GPU",
                       description="Print versions of rnnx's dependencies, ONNX Runtime providers and the GPU; where a GPU with cuDNN is present, "
                       "check rnnx's cuDNN offset table against cudnnGetRNNWeightParams and PyTorch's flattened buffer (exit 1 on a mismatch).")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("lower", help="rewrite LSTM/GRU/RNN nodes as Scans with the input product hoisted (TensorRT form), checked",
                       description="Rewrite native recurrent nodes (or the one given by --select) into one hoisted input MatMul (cuDNN gate "
                       "order) plus a Scan holding only the recurrent product, as TensorRT builds from; check against the input in ONNX Runtime.")
    _add_graph_rewrite_arguments(p, "lowered")
    p.add_argument("--select", metavar="NODE", help="lower only this node")
    p.set_defaults(func=_cmd_lower)

    p = sub.add_parser("build", help="build a TensorRT engine from ONNX (or, with --from-weights, from a weights file)",
                       description="Build a TensorRT engine through TensorRT's ONNX parser and write a metadata file beside it. With --from-weights, "
                       "the weights become rnnx's lowered ONNX stack (hoisted input product, recurrent product in a loop) first.")
    p.add_argument("input", type=Path, help="ONNX model, or a weights file with --from-weights")
    p.add_argument("-o", "--output", type=Path, required=True, help="engine file (metadata goes to ENGINE.json)")
    p.add_argument("--from-weights", action="store_true", help="INPUT is a weights file in any rnnx format")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", help="format of the weights file")
    p.add_argument("--select", metavar="GROUP", help="recurrent group of the weights file")
    p.add_argument("--spec", metavar="SPEC", help="spec for weights that do not describe themselves")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16", "int8"], help="default fp32")
    p.add_argument("--profile", action="append", metavar="NAME:MIN,OPT,MAX[;...]", help="optimization profile, e.g. X:1x1x8,50x8x8,200x32x8;h0:...")
    p.add_argument("--workspace", type=int, metavar="MiB", help="workspace memory limit")
    p.add_argument("--timing-cache", type=Path, metavar="FILE", help="timing cache to read and update")
    p.add_argument("--opt-level", type=int, choices=range(6), metavar="0-5", help="builder optimization level (TensorRT 8.6+)")
    p.add_argument("--dla-core", type=int, metavar="N", help="build for this DLA core, with GPU fallback")
    p.add_argument("--hardware-compatible", action="store_true", help="engine runs on Ampere and later GPUs (TensorRT 8.6+)")
    p.add_argument("--version-compatible", action="store_true", help="engine runs on later TensorRT versions (TensorRT 8.6+)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the engine's metadata as JSON")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("verify", help="check a model against its weights, its PyTorch code, or on its own, against the float64 reference",
                       description="Three forms. (1) MODEL --against WEIGHTS: a recurrent stack and the weights it was made from, in every available "
                       "backend and in the source's framework at several lengths and batches, with errors per output and per time step against the "
                       "float64 reference and a diagnosis of layout mistakes. (2) MODEL.onnx --against file.py:NAME (or package.module:NAME, or a "
                       "TorchScript file) [--checkpoint CK]: a whole model against its PyTorch code, in float64 and float32, at lengths and batches "
                       "taken from the file's dynamic axes, and layer by layer: each recurrent layer on the inputs it received, naming the first "
                       "that drifts. (3) MODEL.onnx alone: it runs at varied shapes and each recurrent layer matches the reference for the weights it "
                       "stores. Exit 0 pass, 1 parity failure, 2 bad input, 3 internal error.")
    p.add_argument("model", nargs="?", type=Path, help="ONNX model (or TensorRT engine) to check")
    p.add_argument("--against", type=Path, metavar="SOURCE", help="the weights it was made from, in any rnnx format; or the model code "
                   "(file.py:NAME, package.module:NAME, a TorchScript file); leave out to check MODEL on its own")
    p.add_argument("--checkpoint", type=Path, help="state_dict to load into the model code first (.pt/.pth weights-only, .safetensors)")
    p.add_argument("--dim", action="append", metavar="LABEL=SIZE", help="size of a dynamic dimension that is neither a batch nor a length "
                   "(whole models and files on their own; repeated)")
    p.add_argument("--select", metavar="GROUP", help="recurrent group of SOURCE")
    p.add_argument("--spec", metavar="SPEC", help="spec for a SOURCE that does not describe itself")
    p.add_argument("--backends", default="ort,torch,cudnn,trt,reference", help="comma-separated, from ort,trt,cudnn,torch,reference (default all; unavailable ones are listed as skipped)")
    p.add_argument("--seq-lens", help="sequence lengths (default 1,17,64; 1,17 for models over 20M parameters)")
    p.add_argument("--batch", help="batch sizes (default 1,8)")
    p.add_argument("--dtype", default="fp32", help="dtypes to run in, from fp32,fp16,bf16,fp64, e.g. fp32,bf16 (default fp32): each backend "
                   "that can computes in it on inputs rounded to it, against the float64 reference, with that dtype's tolerance; one that "
                   "cannot is listed as skipped (ONNX Runtime has no bfloat16 LSTM, so bf16 runs torch)")
    _add_tolerance_arguments(p, "output (Y, h_n, c_n)")
    p.add_argument("--tol", action="append", metavar="BACKEND=ATOL,RTOL", help="one backend's atol and rtol (e.g. ort=1e-3,1e-2), over --atol and --rtol; repeated")
    p.add_argument("--input-map", action="append", metavar="NAME=ROLE", help="what a graph input or output is (X, h0, c0, seq_lens, Y, h_n, c_n), "
                   "where neither rnnx export's record nor the graph's wiring says; repeated")
    p.add_argument("--batch-first", action="store_true", help="the model takes X and gives Y as (batch, seq, features), where its wiring does not show it")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the inputs")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report here")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML page with plots here")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the JSON report on stdout")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("layout", help="print cuDNN's offset table for a spec or a weights file",
                       description="Print where each gate's matrix and bias lies in cuDNN's packed weight space.")
    p.add_argument("file", nargs="?", type=Path, help="weights file to take the spec from")
    p.add_argument("--spec", metavar="SPEC", help="spec string instead of a file")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", help="format of FILE")
    p.add_argument("--select", metavar="GROUP", help="recurrent group of FILE")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")
    p.set_defaults(func=_cmd_layout)

    p = sub.add_parser("formats", help="list the weight formats rnnx reads and writes")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")
    p.set_defaults(func=_cmd_formats)
    return parser


def _budgets(args: argparse.Namespace) -> Any:
    from rnnx import limits

    if args.time_limit is not None and not args.time_limit > 0:
        raise RNNXError(f"--time-limit {args.time_limit}: expected a positive number of seconds")
    return limits.budgets(limits.parse_size(args.max_memory) if args.max_memory else None, args.time_limit)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP (what `timeout`, CI runners and closed terminals send): remove the
    half-written outputs and leave at once. Raising an exception here instead could unwind
    through a native library's frames (torch's, mid-import) and abort the process."""
    remove_partial_outputs()
    os.write(2, f"rnnx {_running[0]}: stopped by {signal.Signals(signum).name}; no output was left behind\n".encode())
    os._exit(128 + signum)


_running = ["rnnx"]  # the verb, for the signal handler's message


def main(argv: Sequence[str] | None = None) -> int:
    handlers = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(argv)
    finally:  # called in-process (tests, notebooks): give the caller its own handlers back
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on usage errors
    if args.command is None:
        parser.print_help()
        return 2
    _running[0] = args.command
    # What a long verb is doing, for a person at a terminal; pipelines and --json get none.
    # verify draws its own bar per case.
    shown = args.command in _STEPPED_VERBS and sys.stderr.isatty() and not getattr(args, "json", False)
    try:
        with _budgets(args), progress.shown(f"rnnx {args.command}", shown):
            if args.debug:
                return args.func(args)
            # Other libraries' warnings (torch, onnx, h5py) would add lines to a one-line
            # report or refusal; they are shown with --debug only.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return args.func(args)
    except ParityError as exc:
        if args.debug:
            raise
        print(f"rnnx {args.command}: {exc}", file=sys.stderr)
        return 1
    except RNNXError as exc:
        if args.debug:
            raise
        print(f"rnnx {args.command}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our stdout (e.g. `| head`) left; exit quietly as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except MemoryError:
        if args.debug:
            raise
        print(f"rnnx {args.command}: ran out of memory on this input; nothing was written. If the input is trusted, "
              "run it on a machine with more memory", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rnnx {args.command}: interrupted; no output was left behind", file=sys.stderr)
        return 130
    except Exception as exc:  # anything else is a bug in rnnx, not the user's input
        if args.debug:
            raise
        where = exc.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        frame = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where is not None else ""
        print(f"rnnx {args.command}: internal error {type(exc).__name__}{frame}: {' '.join(str(exc).split())[:300]} "
              "(a bug in rnnx; rerun with --debug for the traceback and report it)", file=sys.stderr)
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
