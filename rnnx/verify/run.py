"""Run the backends and collect the comparisons (see :mod:`rnnx.verify`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits, parity, progress
from rnnx.check import Row, Rule, judge
from rnnx.check.runners import Subject, close, make
from rnnx.check.truths import stack_honest, stack_reference
from rnnx.errors import RNNXError
from rnnx.formats import cudnn_raw, files, registry as formats
from rnnx.formats.onnx_read import load_model
from rnnx.layouts.cudnn import blob_size
from rnnx.shapes.sizes import STACK_SEQ_LENS, VERIFY_BATCHES
from rnnx.spec import RNNSpec
from rnnx.tolerance import Tolerance, Tolerances, calibrated
from rnnx.verify.diagnose import explain, per_step_error, stored_weights
from rnnx.verify.drive import DrivenRunner, plan
from rnnx.verify.quantized import quantized_model
from rnnx.verify.stack_report import BackendResult, VerifyReport
from rnnx.weights import RNNWeights

BACKENDS = ("ort", "trt", "cudnn", "torch", "reference")
#: Other names of a backend (``--tol onnxruntime=...``): one name, the one --backends takes, in every report.
BACKEND_ALIASES = {"onnxruntime": "ort", "tensorrt": "trt"}
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}


def _row(backend: str, name: str, got: np.ndarray, want: np.ndarray, T: int, B: int, dtype: str, against: str, rule: Rule) -> Row:
    """One output against ``want`` under ``rule`` (:func:`rnnx.check.judge`)."""
    got = np.asarray(got)
    if got.shape != want.shape:
        raise RNNXError(f"{backend}: output {name} has shape {got.shape}, expected {want.shape}; is the model the stack the source describes?")
    per_step = per_step_error(got, want) if got.ndim == 3 and name == "Y" else []
    return judge(got, want, rule, backend=backend, output=name, seq_len=T, batch=B, dtype=dtype, against=against, per_step=per_step)


def _runners(weights: RNNWeights, model: Path | None, backends: Sequence[str], input_map: dict[str, str] | None = None,
             batch_first: bool | None = None) -> tuple[dict[str, Any], list[BackendResult]]:
    """Each backend asked for, from :mod:`rnnx.check.runners`' registry; those that cannot run here listed as skipped, with why.
    The file under test runs isolated (a file from elsewhere: in a child process under rnnx's limits), fed by the roles its record
    or its wiring gives each input; a file that does not load is bad input, not a backend to skip."""
    runners: dict[str, Any] = {}
    status = []
    for name in backends:
        if name not in BACKENDS:
            raise RNNXError(f"unknown backend {name!r}; expected {', '.join(BACKENDS)}")
        try:
            if name == "ort" and model is None:
                raise RNNXError("no ONNX model given")
            proto = load_model(model, lazy=True) if name == "ort" and model is not None else None
            drive = plan(proto, weights.spec, input_map, batch_first) if proto is not None else None
            # torch casts only weights not float32 already: no second copy of a large model
            runner = make(name, Subject(weights, model, proto=proto, dtype="float32" if name == "torch" else None))
            runners[name] = DrivenRunner(runner, drive) if drive is not None else runner
            status.append(BackendResult(name, "ran"))
        except RNNXError as exc:
            if name == "ort" and model is not None and model.suffix.lower() != ".engine":
                raise  # the file under test does not load: bad input, not a backend to skip
            status.append(BackendResult(name, "skipped", str(exc)))
    return runners, status


def verify(
    source: Path,
    model: Path | None = None,
    backends: Sequence[str] = ("ort", "torch", "reference"),
    seq_lens: Sequence[int] | None = None,
    batches: Sequence[int] | None = None,
    dtypes: Sequence[str] = ("fp32",),
    ragged: bool | None = None,
    tolerances: Tolerances | Mapping[str, Any] | None = None,
    seed: int = 0,
    select: str | None = None,
    spec: str | None = None,
    input_map: dict[str, str] | None = None,
    batch_first: bool | None = None,
    backend_tolerances: Mapping[str, Tolerance | tuple[float, float]] | None = None,
) -> VerifyReport:
    """Run ``model`` (and torch, cuDNN, ...) against the float64 reference of ``source``.

    Each dtype of ``dtypes`` (fp32, fp16, bf16, fp64) runs every backend that can compute in
    it, on the same seeded inputs rounded to it (the reference runs on those rounded values);
    a backend that cannot is listed as skipped, with the reason. Each output (Y, h_n, c_n) is
    held to ``tolerances`` (:class:`rnnx.tolerance.Tolerances`, Polygraphy's semantics; default
    the tolerance of the dtype that ran, :data:`rnnx.tolerance.BY_DTYPE`), and
    ``backend_tolerances`` sets atol and rtol for one backend (``{"ort": (1e-3, 1e-2)}``,
    what ``--tol`` gives). A plain mapping passed as ``tolerances`` is taken as
    ``backend_tolerances`` (the older form of this argument).
    """

    if tolerances is not None and not isinstance(tolerances, Tolerances):
        backend_tolerances, tolerances = {**tolerances, **(backend_tolerances or {})}, None
    tolerances = tolerances or Tolerances()
    per_backend = _backend_tolerances(backend_tolerances)
    for dtype_name in dtypes:
        if dtype_name not in DTYPES:
            raise RNNXError(f"dtypes: expected one of {', '.join(DTYPES)}, found {dtype_name!r}")
    source, model = Path(source), (Path(model) if model is not None else None)
    weights = files.load(source, select=select, spec=spec, dtype=_blob_dtype(source, spec))
    seq_lens, batches, scaled = _default_shapes(weights, seq_lens, batches)
    _check_run_sizes(weights, source, model, seq_lens, batches)
    report = VerifyReport(str(model) if model else "-", str(source), str(weights.spec))
    runners, report.backends = _runners(weights, model, backends, input_map, batch_first)
    try:
        _run_cases(report, weights, model, runners, seq_lens, batches, scaled, dtypes, ragged, tolerances, per_backend, seed)
    finally:
        for runner in runners.values():
            close(getattr(runner, "runner", runner))  # a driven file's child process
    return report


def _run_cases(report: VerifyReport, weights: RNNWeights, model: Path | None, runners: dict[str, Any], seq_lens: list[int], batches: list[int],
               scaled: bool, dtypes: Sequence[str], ragged: bool | None, tolerances: Tolerances, per_backend: dict[str, Tolerance], seed: int) -> None:
    """Every case at every dtype on every runner, into ``report``; then the diagnosis of each backend's first mismatch."""
    _require_the_artefact_runs(model, runners, report.backends)
    takes_lengths = ragged if ragged is not None else _model_takes("seq_lens", runners.get("ort"))
    takes_states = "ort" not in runners or _model_takes("h0", runners["ort"])
    report.shapes = {"seq_lens": seq_lens, "batches": batches,
                     "note": f"lengths {seq_lens}: fewer than the default {list(STACK_SEQ_LENS)} for a model over {LARGE_MODEL:,} parameters" if scaled else ""}
    report.tolerances = {"by_dtype": {d: tolerances.get("", DTYPES[d]).to_json() for d in dict.fromkeys(dtypes)},
                         "given": tolerances.to_json(), "backends": {b: t.to_json() for b, t in per_backend.items()}}
    # A quantized model is held to the bound its scales give (unless the user set ORT's tolerance).
    quantized = quantized_model(load_model(model, lazy=True), model, weights) if "ort" in runners and model is not None else None
    if quantized is not None:
        report.notes += quantized.notes
        if "ort" in per_backend or tolerances.given or tolerances.by_output:
            quantized = None
            report.notes.append("ONNX Runtime's rows use the tolerance given, not the quantization bound")
    if "ort" in runners:
        drive = runners["ort"].drive
        report.driven = {"source": drive.source, "batch_first": drive.batch_first, "inputs": drive.inputs, "outputs": drive.outputs}
    first_mismatch: dict[str, Any] = {}
    cases = [(t, b) for t in seq_lens for b in batches]
    total, done = len(cases) * len(dict.fromkeys(dtypes)), 0
    for dtype_name in dict.fromkeys(dtypes):
        dtype = DTYPES[dtype_name]
        active = _runners_for(dtype_name, runners, weights, report.backends)
        # The rows "against torch": the source's framework in float32 (float64 for fp64), so that a
        # low-precision run is held to its own rounding and not to torch's too.
        torch_ref = (active.get("torch") if dtype in ("float32", "float64") else runners.get("torch")) if "torch" in runners else None
        for k, (T, B) in enumerate(cases):
            done += 1
            progress.step(f"case {done} of {total}: T={T}, B={B}, {dtype_name}")  # shown where the CLI opened a display
            inputs = parity.random_inputs(weights, T, B, seed=seed + k, ragged=takes_lengths, states=takes_states,
                                          dtype="float64" if dtype == "float64" else "float32")
            feed = {key: round_to(v, dtype) for key, v in inputs.items()}
            exact = {key: (v.astype(np.float64) if v.dtype.kind == "f" else v) for key, v in feed.items()}
            want = stack_reference(weights, exact)
            honest = _honest_runs(weights, exact)
            torch_out = None
            if torch_ref is not None:
                torch_out = torch_ref({key: (v.astype(torch_ref.carrier) if v.dtype.kind == "f" else v) for key, v in feed.items()})
            for name, runner in list(active.items()):
                try:
                    got = torch_out if runner is torch_ref and torch_out is not None else runner(feed)
                except RNNXError as exc:
                    if dtype_name != "fp32":  # e.g. an fp32 ONNX model given fp16 inputs: that backend skips this dtype
                        _skip(report.backends, f"{name} ({dtype_name})", str(exc)[:200])
                        del active[name]
                        continue
                    raise RNNXError(f"{name} could not run at T={T}, B={B}, {dtype_name}: {exc}") from None
                runs_in = _computes_in(runner, dtype)
                for out_name, ref in want.items():
                    if out_name not in got:  # the file does not return it (say, a model returning only Y)
                        continue
                    if quantized is not None and name == "ort":
                        rule = quantized.rule(exact, out_name)
                    elif name in per_backend:
                        rule = Rule(_tolerance(tolerances, per_backend, name, out_name, runs_in))
                    else:
                        rule = Rule.of(tolerances, out_name, runs_in, honest(runs_in).get(out_name))
                    row = _row(name, out_name, got[out_name], ref, T, B, dtype_name, "reference", rule)
                    report.rows.append(row)
                    if not row.passed and name not in first_mismatch and out_name == "Y":
                        held = calibrated(row.floor, row.multiple) if row.floor is not None and row.multiple is not None else rule.fixed
                        first_mismatch[name] = (exact, got["Y"], held, runs_in)
                    if torch_out is not None and name != "torch":
                        report.rows.append(_row(name, out_name, got[out_name], np.asarray(torch_out[out_name], np.float64), T, B, dtype_name, "torch",
                                                Rule(rule.fixed)))
    _require_an_artefact_row(model, report, dtypes)
    for name, (inputs, y, tol, runs_in) in first_mismatch.items():
        # a quantized model's bound is already loose: a mistake must reproduce its output within the bound itself
        limit = tol.atol if quantized is not None and name == "ort" else _diagnosis_limit(tol, runs_in)
        found = explain(weights, inputs, y, atol=limit, tol=tol, stored=stored_weights(model, weights.spec) if name == "ort" else None)
        report.diagnosis.append({"backend": name, "matches": found.matches, "hypotheses": [asdict(h) for h in found.hypotheses],
                                 "not_offered": found.not_offered, "lines": found.lines()})


def _honest_runs(weights: RNNWeights, inputs: dict[str, np.ndarray]) -> Callable[[str], dict[str, np.ndarray]]:
    """The reference's arithmetic in a dtype, on these inputs, run once per dtype when first
    asked: the rounding floor of the calibrated rule (empty for a dtype with none)."""
    runs: dict[str, dict[str, np.ndarray]] = {}

    def run(dtype: str) -> dict[str, np.ndarray]:
        if dtype not in runs:
            runs[dtype] = stack_honest(weights, inputs, dtype)
        return runs[dtype]
    return run


def round_to(value: np.ndarray, dtype: str) -> np.ndarray:
    """A float array rounded to ``dtype``, in the numpy dtype that carries it (bfloat16 values
    in float32 arrays, exactly: numpy has no bfloat16); other arrays as they are."""
    if value.dtype.kind != "f":
        return value
    if dtype != "bfloat16":
        return value.astype(dtype)
    bits = np.ascontiguousarray(value, np.float32).view(np.uint32)
    # round to nearest, ties to even, on the 16 bits bfloat16 keeps (finite inputs only)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.astype(np.uint32).view(np.float32)


# Where a runner computes in less than the dtype it is fed (a TensorRT engine built for fp16
# takes float32 inputs), its tolerance is that precision's. TF32 rounds products' inputs to a
# 10-bit mantissa, as float16 does.
_PRECISION_DTYPES = {"fp16": "float16", "tf32": "float16", "bf16": "bfloat16"}
_LOOSER = ("float64", "float32", "float16", "bfloat16")


def _computes_in(runner: Any, dtype: str) -> str:
    precision = _PRECISION_DTYPES.get(str(getattr(runner, "precision", "")), dtype)
    return max(dtype, precision, key=_LOOSER.index)


def _tolerance(tolerances: Tolerances, per_backend: Mapping[str, Tolerance], backend: str, output: str, dtype: str) -> Tolerance:
    """``--tol BACKEND=ATOL,RTOL`` laid over the output's tolerance (its statistic kept)."""
    return replace(tolerances.get(output, dtype), atol=per_backend[backend].atol, rtol=per_backend[backend].rtol)


def _backend_tolerances(given: Mapping[str, Tolerance | tuple[float, float]] | None) -> dict[str, Tolerance]:
    """``--tol BACKEND=ATOL,RTOL`` (or its Python form): backend names checked, aliases resolved."""
    out = {}
    for backend, value in (given or {}).items():
        name = BACKEND_ALIASES.get(backend, backend)
        if name not in BACKENDS:
            raise RNNXError(f"backend_tolerances: unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if not isinstance(value, Tolerance):
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                raise RNNXError(f"backend_tolerances[{backend!r}]: expected a Tolerance or an (atol, rtol) pair, found {value!r}")
            value = Tolerance(float(value[0]), float(value[1]))
        out[name] = value
    return out


def _skip(status: list[BackendResult], name: str, reason: str) -> None:
    note = BackendResult(name, "skipped", reason)
    if note not in status:
        status.append(note)


def _runners_for(dtype_name: str, runners: dict[str, Any], weights: RNNWeights, status: list[BackendResult]) -> dict[str, Any]:
    """The runners that compute in this dtype (torch: one built for it); the others listed as skipped with the reason."""
    dtype = DTYPES[dtype_name]
    active: dict[str, Any] = {}
    for name, runner in runners.items():
        why = ""
        if name == "reference":
            continue
        if name == "torch" and dtype != "float32":
            try:
                runner = make("torch", Subject(weights, dtype=dtype))
            except RNNXError as exc:
                why = str(exc)
        elif name == "cudnn" and dtype != "float32":
            why = "rnnx's cuDNN runner computes in float32 only"
        elif name == "trt" and dtype != "float32" and _PRECISION_DTYPES.get(str(getattr(runner, "precision", ""))) != dtype:
            why = f"the engine was built for {getattr(runner, 'precision', 'fp32')}; build one with --precision {dtype_name} to check {dtype_name}"
        elif name == "ort" and dtype == "bfloat16":
            why = "ONNX Runtime has no bfloat16 LSTM, GRU or RNN kernel on the CPU (and numpy no bfloat16 to feed it)"
        if why:
            _skip(status, f"{name} ({dtype_name})", why[:200])
        else:
            active[name] = runner
    return active


def _require_an_artefact_row(model: Path | None, report: VerifyReport, dtypes: Sequence[str]) -> None:
    """The file under test (or, with no model, the layout backend) must have run at one dtype at least."""
    wanted = _ARTEFACT_BACKENDS.get(model.suffix.lower(), ("ort",)) if model is not None else _WEIGHT_BACKENDS
    if any(r.backend in wanted for r in report.rows):
        return
    why = "; ".join(f"{b.name}: {b.reason}" for b in report.backends if b.status == "skipped" and b.name.split(" ")[0] in wanted)
    raise RNNXError(f"{model or 'the weights'}: no backend ran it at the dtypes asked ({', '.join(dtypes)}): {why or 'it returned no output the reference has'}; "
                    "nothing was verified (add fp32 to dtypes=)")


def _diagnosis_limit(tol: Tolerance, dtype: str) -> float:
    """How close the reference on deliberately wrong weights must come to the backend's Y to
    name that mistake: ten times float32's atol (a layout mistake moves outputs by 1e-2 or
    more); for float16 and bfloat16, their own rounding."""
    return max(tol.atol * 10, 1e-3) if dtype in ("float32", "float64") else max(tol.atol, 1e-3)


# The backends that run each kind of artefact; torch and the reference run the source's weights.
_ARTEFACT_BACKENDS = {".onnx": ("ort",), ".engine": ("trt",)}
_WEIGHT_BACKENDS = ("cudnn",)  # runs the weights through cuDNN's packed layout: a check of that layout


LARGE_MODEL = 20_000_000  # parameters; past it the float64 reference dominates and the default check shrinks


def _default_shapes(weights: RNNWeights, seq_lens: Sequence[int] | None, batches: Sequence[int] | None) -> tuple[list[int], list[int], bool]:
    """The lengths and batches to run: the caller's, else the defaults, shorter for large models
    (batch 1 and a length past 1 always stay)."""
    large = weights.num_parameters() > LARGE_MODEL
    lens = list(seq_lens) if seq_lens else list(STACK_SEQ_LENS[:2] if large else STACK_SEQ_LENS)
    bats = list(batches) if batches else list(VERIFY_BATCHES)
    return lens, bats, large and not seq_lens


def _require_the_artefact_runs(model: Path | None, runners: dict[str, Any], status: list[BackendResult]) -> None:
    """A verdict needs the thing under test to have run: the model file in its backend, or, with
    no model, the weights in a layout backend (cuDNN). torch against the reference checks only
    the source and the reference; that alone is never a PASS."""
    why = {b.name: b.reason for b in status if b.status == "skipped"}
    if model is not None:
        wanted = _ARTEFACT_BACKENDS.get(model.suffix.lower(), ("ort",))
        if not any(b in runners for b in wanted):
            reasons = "; ".join(f"{b}: {why.get(b, 'not in backends=')}" for b in wanted)
            raise RNNXError(f"{model}: no backend here ran it ({reasons}); nothing was verified")
    elif not any(b in runners for b in _WEIGHT_BACKENDS):
        raise RNNXError("nothing to verify: give MODEL (an ONNX file or TensorRT engine) to check it against --against, "
                        "or run where cuDNN is available; torch and the reference alone check only the source "
                        f"({'; '.join(f'{k}: {v}' for k, v in why.items()) or 'no other backend asked for'})")


def _check_run_sizes(weights: RNNWeights, source: Path, model: Path | None, seq_lens: Sequence[int], batches: Sequence[int]) -> None:
    """The largest case's activations, in float64 for the reference and once per backend, must fit the budget."""

    spec = weights.spec
    per_step = spec.input_size + 2 * spec.num_layers * spec.num_directions * (spec.output_size + spec.hidden_size)
    claimed = max(seq_lens, default=0) * max(batches, default=0) * per_step * 8 * limits.WORKING_COPIES
    files = sum(Path(p).stat().st_size for p in (source, model) if p is not None and Path(p).is_file())
    limits.check_claim(f"the largest case (T={max(seq_lens, default=0)}, B={max(batches, default=0)})", claimed, files)


def _model_takes(name: str, runner: Any) -> bool:
    return runner is not None and name in getattr(runner, "input_names", [])


def _blob_dtype(source: Path, spec: str | None) -> str | None:
    """The element type of a headerless cuDNN blob given as the source, told by its size (verify's
    dtypes= are the dtypes to compute in, not this): float32 or float64 where the size fits one;
    2-byte values are refused, since float16 and bfloat16 have the same size. None: not such a
    blob, or a size that fits nothing (the reader's refusal says so)."""
    if spec is None or not source.is_file() or formats.detect(source).name != "cudnn":
        return None
    parsed = RNNSpec.parse(spec) if isinstance(spec, str) else spec
    count, found = blob_size(parsed), source.stat().st_size
    fits = [name for name in cudnn_raw.STORED if found == count * cudnn_raw.itemsize(name)]
    wide = [name for name in fits if name in ("float32", "float64")]
    if len(wide) == 1:
        return wide[0]
    if fits:
        raise RNNXError(f"{source}: its {found} bytes are {count} 2-byte values for spec {parsed}, and a headerless {cudnn_raw.SUFFIX} blob cannot say "
                        f"whether they are float16 or bfloat16; convert it first, naming which (rnnx convert {source} --from cudnn --dtype float16 "
                        f"--spec {parsed} -o w.safetensors, or --dtype bfloat16), and verify against that file")
    return None
