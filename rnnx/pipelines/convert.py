"""``rnnx convert``: any format in, any format out, and the written file checked.

The check re-reads what was written and runs it: ONNX files in ONNX Runtime and torch
files in PyTorch (when installed) against the float64 reference on fresh seeded inputs
at two shapes; every other format by running the reference on the re-read weights. Each
output is held to ``tolerances`` (:class:`rnnx.tolerance.Tolerances`; by default the
tolerance of the dtype that ran, :data:`rnnx.tolerance.BY_DTYPE`).

``quantize="dynamic"`` (ONNX output only) writes the float model, quantizes it with ONNX
Runtime's own tool (:func:`rnnx.formats.onnx_quantized.quantize_file`), and checks the
quantized file in ONNX Runtime against the float reference, each case held to the bound its
scales and inputs give (:func:`rnnx.formats.onnx_quantized.error_bound`).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import formats, parity, progress
from rnnx.check import Row, Rule, judge, stack
from rnnx.check.runners import FORMAT_BACKENDS, RUNS_WEIGHTS, Subject, running
from rnnx.check.stack import StackReport
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.fileio import atomic_output, refuse_overwriting
from rnnx.formats import cudnn_raw, files, keras as keras_files
from rnnx.formats.onnx_build import DEFAULT_OPSET, build_stack_model, plan_stack_model, save_model, save_planned
from rnnx.formats.onnx_quantized import QUANTIZE_OPTIONS, error_bound, is_dequantized, main_graph_quantizations, quantize_file
from rnnx.formats.onnx_read import choose_group, data_files, load_model, recurrent_groups
from rnnx.graphs.precision import keep_io_types
from rnnx.spec import RNNSpec
from rnnx.tolerance import BY_DTYPE, ErrorStats, Tolerance, Tolerances
from rnnx.weights import RNNWeights

PRECISIONS = ("fp32", "fp16")  # what an ONNX file computes in: --precision (--dtype is a raw blob's element type)


@dataclass(frozen=True)
class ConvertOptions:
    """How :func:`convert` writes and checks the output, passed down its chain as one value (the
    arguments of the same names; ``raw_dtype``: the element type of a headerless blob written,
    None for any other output)."""

    opset: int = DEFAULT_OPSET
    batch_first: bool = False
    seq_lens: bool = False
    states: bool = True
    check: bool = True
    tolerances: Tolerances | None = None
    quantize: str | None = None
    raw_dtype: str | None = None
    precision: str = "fp32"
    keep_io_types: bool = False


@dataclass
class ConvertResult:
    source: str
    source_format: str
    output: str
    output_format: str
    spec: str
    parameters: int
    report: StackReport | None = None
    notes: list[str] = field(default_factory=list)
    written: bool = True  # False when the check failed: the output was not renamed into place
    tolerances: dict[str, Any] = field(default_factory=dict)  # what the caller set (Tolerances.to_json); the rest is by dtype
    quantization: dict[str, Any] | None = None  # quantize="dynamic": how, and the quantized file's error against the float reference
    seconds: dict[str, float] = field(default_factory=dict)  # read, write and check, each apart: the check's cost is not the conversion's
    files: dict[str, int] = field(default_factory=dict)  # every file written, with its size: an ONNX model past 1.8 GB is two
    external_data: bool = False  # the ONNX output's weights went to <output>.data
    precision: str | None = "fp32"  # what an ONNX output computes in (fp32 or fp16); None for other formats
    keep_io_types: bool = False  # an fp16 ONNX output that takes and returns float32 (Casts at its edges)

    def check_shapes(self) -> list[tuple[int, int]]:
        """The (sequence length, batch) the check ran at (a blob's "values" row ran at none)."""
        return sorted({(r.seq_len, r.batch) for r in self.report.rows if r.seq_len or r.batch}) if self.report else []

    def timing_line(self) -> str:
        """One line: how long reading, writing and the check took, and what the check ran."""
        parts = [f"{k} {v:.2f} s" for k, v in self.seconds.items()]
        if self.report is not None and self.report.rows:
            shapes = self.check_shapes()
            parts[-1] += f" ({', '.join(f'T={t} B={b}' for t, b in shapes)}, {', '.join(sorted({r.backend for r in self.report.rows}))})"
        return "time: " + ", ".join(parts)

    def quantization_line(self) -> str:
        """One line on the quantized output's error ("" when not quantized)."""
        q = self.quantization
        if not q:
            return ""
        how = ", ".join(f"{k}={v}" for k, v in q["options"].items())
        return (f"quantized by {q['tool']} ({how}): max abs error {q['max_abs']:.3e} against the float reference, "
                f"{q['relative']:.2%} of the largest output; bound from its scales {q['bound']:.3e} (worst case ran)")

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "source_format": self.source_format,
            "output": self.output,
            "output_format": self.output_format,
            "spec": self.spec,
            "parameters": self.parameters,
            "check": None if self.report is None else {"passed": bool(self.report), "tolerances": self.tolerances, "rows": self.report.to_json(),
                                                        "seconds": self.seconds.get("check"),
                                                        "shapes": self.check_shapes()},
            "seconds": self.seconds,
            "notes": self.notes,
            "written": self.written,
            "files": self.files,
            "quantization": self.quantization,
            "precision": self.precision,
            "keep_io_types": self.keep_io_types,
        }


def _check_written(weights: RNNWeights, path: Path, fmt_name: str, notes: list[str], options: ConvertOptions) -> StackReport:
    """The written file run by the backend that owns its format (the check registry's
    FORMAT_BACKENDS), where it runs here; else, and for a raw blob, read back and the reference
    run on it. What the runner takes (seq_lens, initial states) is what the check feeds."""
    dtype, tolerances = options.raw_dtype, options.tolerances
    if dtype is not None:  # a headerless blob: nothing here runs cuDNN
        return _check_raw(weights, files.load(path, format=fmt_name, spec=weights.spec, dtype=dtype), fmt_name, dtype, notes, tolerances)
    backend = FORMAT_BACKENDS.get(fmt_name)
    why = f"{fmt_name} has no runtime here"
    if backend is not None:
        # Only an ONNX file takes its weights' dtype (float16, float32 or float64; an fp16 file
        # float16, or float32 with Casts at its edges); the frameworks' runners take float32.
        computes = ("float16" if options.precision == "fp16" else weights.dtype.name) if backend == "ort" else "float32"
        try:
            held = files.load(path, format=fmt_name, spec=weights.spec) if backend in RUNS_WEIGHTS else weights
            with running(backend, Subject(held, path, trusted=True, dtype="float32" if backend in RUNS_WEIGHTS else None)) as runner:
                takes = runner.input_names
                return stack.check(backend, runner, weights, ragged="seq_lens" in takes, batch_first=options.batch_first, states="h0" in takes,
                                   dtype=computes, tolerances=tolerances, feed_dtype="float32" if options.keep_io_types else None)
        except RNNXError as exc:
            if backend == "ort" and ("does not support" not in str(exc) or weights.dtype == np.float32):
                raise  # ONNX Runtime refusing a float32 file rnnx wrote is a failure, not a runtime missing here
            why = (f"ONNX Runtime has no {weights.dtype.name} kernel for this {weights.spec.cell.upper().split('_')[0]} on the CPU"
                   if backend == "ort" else f"{backend} cannot run it here ({one_line(exc, DETAIL_CHARS)})")
    reread = files.load(path, format=fmt_name, spec=weights.spec)
    # The reference on the re-read weights must reproduce the reference on the source.
    notes.append(f"{why}: read back only (the file re-read and the reference run on it; nothing ran the file itself)")
    return stack.check(f"{fmt_name} (reread)", lambda inputs: parity.reference_outputs(reread, inputs), weights, ran=False, tolerances=tolerances)


def _check_raw(weights: RNNWeights, reread: RNNWeights, fmt_name: str, dtype: str, notes: list[str],
               tolerances: Tolerances | None) -> StackReport:
    """A headerless blob re-read: its values are the source's, exactly or within the rounding of
    the dtype it stores; then the reference on them reproduces the reference on the source
    within that dtype's tolerance. Nothing here runs cuDNN."""
    exact = dtype != "bfloat16" and np.can_cast(weights.dtype, np.dtype(cudnn_raw.STORED[dtype]), "safe")  # widening loses nothing
    rounding = Tolerance(0.0, 0.0) if exact else cudnn_raw.ROUNDING[dtype]
    backend = f"{fmt_name} (reread)"
    report = StackReport()
    report.rows.append(_values_row(backend, reread, weights, rounding, dtype))
    notes.append(f"no runtime for a {dtype} cuDNN blob here: read back only (its values compared with the source's "
                 f"{'exactly' if exact else f'within {dtype} rounding'} and the reference run on them; cuDNN did not run)")
    held = tolerances or Tolerances({"": BY_DTYPE[dtype]})
    report.rows += stack.check(backend, lambda inputs: parity.reference_outputs(reread, inputs), weights, ran=False, tolerances=held).rows
    return report


def _identities(paths: list[Path]) -> dict[Path, tuple[int, ...]]:
    """Each file's device, inode, size and modification time (a file gone is left out, so it reads as changed)."""
    found: dict[Path, tuple[int, ...]] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found[path] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    return found


def _values_row(backend: str, reread: RNNWeights, weights: RNNWeights, rounding: Tolerance, dtype: str) -> Row:
    """One "values" row for a re-read blob: tensor by tensor (never a whole model in float64),
    the first tensor beyond ``rounding``, else the one furthest off."""
    found: tuple[str, ErrorStats] | None = None
    for name in weights:
        stats = judge(reread[name], weights[name], Rule(rounding)).stats
        assert stats is not None  # judge gives statistics wherever there is a truth
        if found is None or (not stats.passed and found[1].passed) or (stats.passed == found[1].passed and stats.max_abs > found[1].max_abs):
            found = (name, stats)
    assert found is not None
    found[1].note = found[1].note or f"worst tensor {found[0]}"
    return Row({"backend": backend, "output": "values", "seq_len": 0, "batch": 0, "ran": False, "dtype": dtype}, found[1],
               weights.num_parameters())


def convert(
    source: str | Path,
    output: str | Path,
    from_format: str | None = None,
    to_format: str | None = None,
    select: str | None = None,
    spec: RNNSpec | str | None = None,
    opset: int = DEFAULT_OPSET,
    batch_first: bool = False,
    seq_lens: bool = False,
    states: bool = True,
    check: bool = True,
    nonfinite: str = "error",
    tolerances: Tolerances | None = None,
    quantize: str | None = None,
    dtype: str | None = None,
    precision: str = "fp32",
    keep_io_types: bool = False,
) -> ConvertResult:
    """Read ``source``, write ``output`` in the target format, and (unless ``check`` is False)
    run what was written against the float64 reference, holding each output to ``tolerances``
    (``Tolerances.parse(["1e-3"], ["1e-2"])``, per output ``Y``, ``h_n``, ``c_n`` if wanted;
    default: the tolerance of the dtype that ran). A failed check writes nothing
    (``result.written`` is False, ``result.report`` says why). ``quantize="dynamic"`` writes
    an ONNX file quantized by ONNX Runtime's own tool (see the module's docstring). ``dtype``
    (float32, float16, bfloat16, float64; default float32) is the element type of a
    headerless cuDNN ``.bin`` blob read or written, which needs ``spec`` to be read.
    ``precision="fp16"`` writes an ONNX file that computes in float16 (its weights rounded
    once; its inputs and outputs float16, or float32 with Casts at its edges with
    ``keep_io_types``), checked against the float64 reference on the source's weights at
    float16's rounding floor."""
    source, output = Path(source), Path(output)
    if precision not in PRECISIONS:
        raise RNNXError(f"precision: expected one of {', '.join(PRECISIONS)}, found {precision!r}")
    if keep_io_types and precision == "fp32":
        raise RNNXError("keep_io_types: a float32 file's inputs and outputs are float32 already; give precision=fp16 with it, or drop it")
    if quantize not in (None, "dynamic"):
        raise RNNXError(f"quantize: expected dynamic (ONNX Runtime's dynamic quantization), found {quantize!r}")
    refuse_overwriting([source], {"-o": output})
    src_fmt = formats.get(from_format) if from_format else formats.detect(source)
    out_fmt = formats.get(to_format) if to_format else formats.detect(output, output=True)
    # An ONNX input's external data are inputs too: never overwritten, and checked unchanged before the rename.
    source_files = [source, *(data_files(source) if src_fmt.name == "onnx" else [])]
    if src_fmt.name == "onnx" or out_fmt.name == "onnx":
        # An ONNX output may write a .data file beside it.
        refuse_overwriting(source_files,
                           {"-o": output, **({"-o's external data": output.with_name(output.name + ".data")} if out_fmt.name == "onnx" else {})})
    if quantize and out_fmt.name != "onnx":
        raise RNNXError(f"quantize=dynamic applies to to_format=onnx only, not {out_fmt.name}")
    raw_in, raw_out = (fmt.name == "cudnn" and cudnn_raw.is_raw(path) for fmt, path in ((src_fmt, source), (out_fmt, output)))
    if dtype is not None and not (raw_in or raw_out):
        raise RNNXError(f"dtype= is the element type of a headerless cuDNN {cudnn_raw.SUFFIX} blob, and neither {source.name} ({src_fmt.name}) "
                        f"nor {output.name} ({out_fmt.name}) is one; drop dtype=")
    raw_dtype = cudnn_raw.dtype_name(dtype)
    progress.step(f"reading {source.name}")
    # The weights are read through memory maps as they are used: an input changed while it is
    # converted would change what is written, so it is identified now and checked before the rename.
    inputs = _identities(source_files)
    started = time.perf_counter()
    weights = files.load(source, format=src_fmt.name, select=select, spec=spec, dtype=raw_dtype if raw_in else None)
    read_seconds = time.perf_counter() - started
    notes = [_dequantized_note(source, select)] if src_fmt.name == "onnx" else []
    notes = [n for n in notes if n]
    if src_fmt.name in ("keras", "keras_h5"):  # what the Keras file did not record, and go_backwards's output order
        notes += keras_files.read_notes(source, select, weights.spec if spec is not None else None, weights)
    if raw_in:
        notes.append(f"{source.name} read as a headerless blob of {weights.num_parameters()} little-endian {raw_dtype} values"
                     + ("" if dtype else f" ({cudnn_raw.DEFAULT_DTYPE}, as no dtype= was given)"))
    if raw_out:
        notes.append(f"{output.name} holds {weights.num_parameters()} little-endian {raw_dtype} values, no header "
                     f"({weights.num_parameters() * cudnn_raw.itemsize(raw_dtype)} bytes): cuDNN's weight space for spec {weights.spec}, "
                     "as C++ code reads it with fread")
    if quantize:
        _check_quantizable(weights.spec, tolerances)
    bad = weights.nonfinite()
    if bad and nonfinite == "error":
        raise RNNXError(f"{source}: tensor {bad[0]} holds NaN or Inf ({len(bad)} tensor(s)); fix the checkpoint or pass nonfinite=warn")
    if bad:
        notes.append(f"tensor {bad[0]} holds NaN or Inf ({len(bad)} tensor(s)); converted anyway (nonfinite=warn)")
        check = False
    options = ConvertOptions(opset, batch_first, seq_lens, states, check, tolerances, quantize, raw_dtype if raw_out else None, precision, keep_io_types)
    result = ConvertResult(str(source), src_fmt.name, str(output), out_fmt.name, str(weights.spec), weights.num_parameters(), notes=notes,
                           tolerances=tolerances.to_json() if tolerances else {}, seconds={"read": round(read_seconds, 3)})
    # The defaults are what an ONNX file gets; another format has no use for them, so only a
    # choice away from them is refused (it would be silently ignored).
    if out_fmt.name != "onnx" and (opset != DEFAULT_OPSET or batch_first or seq_lens or not states or precision != "fp32"):
        raise RNNXError(f"opset=N, batch_first=True, seq_lens=True, states=False and precision=fp16 apply to to_format=onnx only, not {out_fmt.name} "
                        "(a weights file keeps the source's dtype; a cuDNN blob's is dtype=)")
    if precision != "fp32" and quantize:
        raise RNNXError("precision=fp16 and quantize=dynamic: give one (the quantizer takes float32 weights)")
    result.precision = precision if out_fmt.name == "onnx" else None
    result.keep_io_types = keep_io_types
    try:
        _write_checked(weights, output, out_fmt.name, result, options, inputs)
    except _CheckFailed:
        result.written = False
    return result


def _write_checked(weights: RNNWeights, output: Path, fmt_name: str, result: ConvertResult, options: ConvertOptions,
                   inputs: dict[Path, tuple[int, ...]] | None = None) -> None:
    """The written file is checked under its temporary name and renamed into place only if it
    passes, and only if the inputs are still the files that were read: a failed check, like any
    failure, leaves nothing behind."""
    data = output.with_name(output.name + ".data")  # ONNX weights past protobuf's limit
    had_data = data.exists()
    try:
        with atomic_output(output) as written:
            if options.quantize:
                _write_quantized(weights, output, written, result, options)
            else:
                _write_and_check(weights, output, written, fmt_name, result, options)
            changed = [p for p, seen in (inputs or {}).items() if _identities([p]).get(p) != seen]
            if changed:
                raise RNNXError(f"{changed[0]}: changed while it was being converted (its size or modification time differs from when it was read); "
                                f"nothing was written to {output}: convert it again once it is complete")
    except BaseException:
        if not had_data and data.exists():
            data.unlink()
        raise
    result.files = {str(output): output.stat().st_size}
    if result.external_data:
        result.files[str(data)] = data.stat().st_size
        result.notes.append(f"the weights are in {data.name} ({data.stat().st_size / 1e6:,.0f} MB), past protobuf's 2 GiB: "
                            f"{output.name} reads them from its own folder, so copy or ship both files together")


def _write_and_check(weights: RNNWeights, output: Path, written: Path, fmt_name: str, result: ConvertResult, options: ConvertOptions) -> None:
    progress.step(f"writing {output.name}")
    started = time.perf_counter()
    if fmt_name == "onnx":
        stored = weights.astype(np.float16) if options.precision == "fp16" else weights  # rounded once, here
        plan = plan_stack_model(stored, opset=options.opset, batch_first=options.batch_first, sequence_lens=options.seq_lens,
                                initial_states=options.states)
        if options.keep_io_types:
            keep_io_types(plan.model)
        result.external_data = save_planned(plan, output)  # into ``written``: the output's write is under way; weights streamed
    else:
        files.save(weights, output, format=fmt_name, dtype=options.raw_dtype)
    result.seconds["write"] = round(time.perf_counter() - started, 3)
    if options.check:
        progress.step("checking the written file against the float64 reference")
        started = time.perf_counter()
        result.report = _check_written(weights, written, fmt_name, result.notes, options)
        result.seconds["check"] = round(time.perf_counter() - started, 3)
        if not result.report:
            raise _CheckFailed


def _dequantized_note(source: Path, select: str | None) -> str:
    """The note a quantized source gets: its weights were dequantized ("" for a float source)."""
    group = choose_group(recurrent_groups(load_model(source, lazy=True)), select, str(source))
    kinds = sorted({n.sources.get("W", "").split(" ")[0] for n in group.nodes if is_dequantized(n.node)})
    if not kinds:
        return ""
    return (f"{group.name} is {group.nodes[0].node.doc_string.rpartition(' ')[2]}: dequantized from {'/'.join(kinds)} weights "
            "((q - zero_point) * scale); what was written holds those float weights")


def _check_quantizable(spec: RNNSpec, tolerances: Tolerances | None) -> None:
    if spec.cell != "lstm" or spec.proj_size:
        what = "a projected LSTM (written as Scans)" if spec.proj_size else f"a {spec.cell.split('_')[0].upper()}"
        raise RNNXError(f"quantize=dynamic: ONNX Runtime's quantizer quantizes native LSTM nodes only; {what} would stay float; "
                        "drop quantize=dynamic")
    if tolerances:
        raise RNNXError("quantize=dynamic: the quantized file is held to the bound its scales give; drop atol=, rtol= and check_error_stat=")


QUANTIZED_SHAPES = ((1, 1), (17, 1), (64, 8))  # (seq_len, batch): batch 1, a long sequence, a batch


def _write_quantized(weights: RNNWeights, output: Path, written: Path, result: ConvertResult, options: ConvertOptions, seed: int = 0) -> None:
    """The float model, quantized by ONNX Runtime's tool into ``written``, then run in ONNX
    Runtime against the float64 reference on the float weights, each case held to its bound."""
    progress.step(f"writing {output.name} in float")
    batch_first = options.batch_first
    model = build_stack_model(weights.astype(np.float32), opset=options.opset, batch_first=batch_first, sequence_lens=options.seq_lens,
                              initial_states=options.states)
    with tempfile.TemporaryDirectory(prefix=".rnnx-", dir=output.parent) as folder:
        float_model = Path(folder) / "float.onnx"
        save_model(model, float_model)
        progress.step("quantizing with onnxruntime.quantization.quantize_dynamic")
        quantize_file(float_model, written)
    layers = main_graph_quantizations(load_model(written))
    if len(layers) != weights.spec.num_layers:
        raise RNNXError(f"quantize_dynamic quantized {len(layers)} of the {weights.spec.num_layers} LSTM layers; nothing was written")
    result.quantization = {"mode": "dynamic", "tool": "onnxruntime.quantization.quantize_dynamic",
                           "options": dict(QUANTIZE_OPTIONS), "weights": [w.summary() for w in layers[0].weights]}
    result.notes.append(f"{output.name} holds {layers[0].op}: " + "; ".join(w.summary() for w in layers[0].weights))
    if not options.check:
        return
    progress.step("checking the quantized file against the float64 reference")
    runner = OnnxRuntimeRunner(written)
    own = files.from_format(_dequantized(written), "onnx")  # the bound reads the file's own weights
    report = StackReport()
    worst = {"max_abs": 0.0, "largest": 0.0, "bound": 0.0}
    for k, (T, B) in enumerate(QUANTIZED_SHAPES):
        inputs = parity.random_inputs(weights, T, B, seed=seed + k, ragged=options.seq_lens, states=options.states)
        feed = dict(inputs)
        if batch_first:
            feed["X"] = inputs["X"].transpose(1, 0, 2).copy()
        want = parity.reference_outputs(weights, feed, batch_first=batch_first)
        got = runner(feed)
        bound = error_bound(layers, own, inputs, from_float=True)
        report.rows += stack.compare("ort (int8)", got, want, T, B, "float32", Tolerances({"": Tolerance(bound, 0.0)}))
        worst["max_abs"] = max([worst["max_abs"]] + [float(np.abs(got[n] - w).max()) for n, w in want.items() if n in got])
        worst["largest"] = max([worst["largest"]] + [float(np.abs(w).max()) for w in want.values()])
        worst["bound"] = max(worst["bound"], bound)
    result.report = report
    result.quantization.update(max_abs=worst["max_abs"], relative=worst["max_abs"] / max(worst["largest"], 1e-30), bound=worst["bound"])
    if not report:
        raise _CheckFailed


def _dequantized(written: Path) -> list[dict[str, Any]]:
    """The quantized file's own weights, as ONNX node dicts (dequantized)."""
    return choose_group(recurrent_groups(load_model(written)), None, str(written)).layer_dicts()


class _CheckFailed(Exception):
    """Leaves the output's context without renaming the written file into place."""
