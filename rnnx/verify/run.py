"""Run the backends and collect the comparisons (see :mod:`rnnx.verify`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import parity
from rnnx.errors import RNNXError
from rnnx.verify.diagnose import diagnose, per_step_error
from rnnx.weights import RNNWeights

BACKENDS = ("ort", "trt", "cudnn", "torch", "reference")
DTYPES = {"fp32": "float32", "fp16": "float16", "fp64": "float64"}


@dataclass
class Row:
    backend: str
    output: str
    seq_len: int
    batch: int
    dtype: str
    against: str  # "reference" or "torch"
    max_abs: float
    mean_abs: float
    max_rel: float
    mean_rel: float
    atol: float
    rtol: float
    passed: bool
    per_step: list[float] = field(default_factory=list)


@dataclass
class BackendResult:
    name: str
    status: str  # "ran" or "skipped"
    reason: str = ""


@dataclass
class VerifyReport:
    model: str
    source: str
    spec: str
    backends: list[BackendResult] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    diagnosis: list[dict[str, Any]] = field(default_factory=list)
    driven: dict[str, Any] = field(default_factory=dict)  # how the file's inputs and outputs were mapped
    shapes: dict[str, Any] = field(default_factory=dict)  # the lengths and batches that ran

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    def dump(self, path: Path) -> None:
        from rnnx.fileio import atomic_output

        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(self.to_json(), indent=2))

    def __str__(self) -> str:
        lines = [f"verify {self.model} against {self.source} ({self.spec})"]
        if self.driven:
            d = self.driven
            roles = ", ".join(f"{k}={v}" for k, v in {**d["inputs"], **d["outputs"]}.items())
            lines.append(f"  driven by {d['source']}: {roles}" + (" (batch-major X and Y)" if d["batch_first"] else ""))
        if self.shapes:
            lines.append(f"  shapes: lengths {self.shapes['seq_lens']} x batches {self.shapes['batches']}" + (f" ({self.shapes['note']})" if self.shapes["note"] else ""))
        lines += [f"  {b.name:<10} {b.status}" + (f": {b.reason}" if b.reason else "") for b in self.backends]
        lines.append(f"{'backend':<10} {'vs':<9} {'dtype':<7} {'output':<6} {'T':>4} {'B':>3} {'max abs':>10} {'mean abs':>10} {'max rel':>10}  result")
        for r in self.rows:
            verdict = "ok" if r.passed else f"FAIL (atol {r.atol:g}, rtol {r.rtol:g})"
            lines.append(f"{r.backend:<10} {r.against:<9} {r.dtype:<7} {r.output:<6} {r.seq_len:>4} {r.batch:>3} {r.max_abs:>10.2e} {r.mean_abs:>10.2e} {r.max_rel:>10.2e}  {verdict}")
        for d in self.diagnosis:
            if d["matches"]:
                lines.append(f"diagnosis for {d['backend']}: its output is what the reference gives with " + "; or ".join(d["matches"]))
            else:
                lines.append(f"diagnosis for {d['backend']}: no layout mistake rnnx knows reproduces it (closest: {d['hypotheses'][0]['name']}, error {d['hypotheses'][0]['error']:.2e})")
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)


def _row(backend: str, name: str, got: np.ndarray, want: np.ndarray, T: int, B: int, dtype: str, against: str, tol: tuple[float, float]) -> Row:
    got64 = np.asarray(got, np.float64)
    if got64.shape != want.shape:
        raise RNNXError(f"{backend}: output {name} has shape {got64.shape}, expected {want.shape}; is the model the stack the source describes?")
    diff = np.abs(got64 - want)
    rel = diff / np.maximum(np.abs(want), 1e-6)
    atol, rtol = tol
    passed = bool(np.all(np.isfinite(got64)) and np.all(diff <= atol + rtol * np.abs(want)))
    per_step = per_step_error(got64, want) if got64.ndim == 3 and name == "Y" else []
    return Row(backend, name, T, B, dtype, against, float(diff.max(initial=0)), float(diff.mean()) if diff.size else 0.0,
               float(rel.max(initial=0)), float(rel.mean()) if rel.size else 0.0, atol, rtol, passed, per_step)


def _runners(weights: RNNWeights, model: Path | None, backends: Sequence[str], input_map: dict[str, str] | None = None,
             batch_first: bool | None = None) -> tuple[dict[str, Callable[..., Any]], list[BackendResult]]:
    runners: dict[str, Callable[..., Any]] = {}
    status = []
    for name in backends:
        try:
            if name == "ort":
                if model is None:
                    raise RNNXError("no ONNX model given")
                from rnnx.engines.isolated import IsolatedOnnxRuntime
                from rnnx.graphs.find import load_model
                from rnnx.verify.drive import DrivenRunner, plan

                # A file from elsewhere: its external data is checked by load_model, and it runs in
                # a child process under rnnx's time and memory limits, fed by the roles its record
                # or its wiring gives each input.
                proto = load_model(model)
                drive = plan(proto, weights.spec, input_map, batch_first)
                runners[name] = DrivenRunner(IsolatedOnnxRuntime(proto.SerializeToString(), str(model)), drive)
            elif name == "reference":
                from rnnx.engines.reference import ReferenceRunner

                runners[name] = ReferenceRunner(weights)
            elif name == "torch":
                from rnnx.engines.torch import TorchRunner

                runners[name] = TorchRunner(weights.astype(np.float32))
            elif name == "cudnn":
                from rnnx.engines.cudnn import CudnnRunner

                runners[name] = CudnnRunner(weights)
            elif name == "trt":
                if model is None or not str(model).endswith(".engine"):
                    raise RNNXError("TensorRT runs an engine: pass MODEL.engine (rnnx build makes one)")
                from rnnx.engines.tensorrt import TensorRTRunner

                runners[name] = TensorRTRunner(model)
            else:
                raise RNNXError(f"unknown backend {name!r}; expected {', '.join(BACKENDS)}")
            status.append(BackendResult(name, "ran"))
        except RNNXError as exc:
            if str(exc).startswith("unknown backend") or (name == "ort" and model is not None and model.suffix.lower() != ".engine"):
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
    tolerances: dict[str, tuple[float, float]] | None = None,
    seed: int = 0,
    select: str | None = None,
    spec: str | None = None,
    input_map: dict[str, str] | None = None,
    batch_first: bool | None = None,
    progress: bool = False,
) -> VerifyReport:
    from rnnx import api

    source, model = Path(source), (Path(model) if model is not None else None)
    weights = api.load(source, select=select, spec=spec)
    seq_lens, batches, scaled = _default_shapes(weights, seq_lens, batches)
    _check_run_sizes(weights, source, model, seq_lens, batches)
    report = VerifyReport(str(model) if model else "-", str(source), str(weights.spec))
    runners, report.backends = _runners(weights, model, backends, input_map, batch_first)
    _require_the_artefact_runs(model, runners, report.backends)
    takes_lengths = ragged if ragged is not None else _model_takes("seq_lens", runners.get("ort"))
    takes_states = "ort" not in runners or _model_takes("h0", runners["ort"])
    report.shapes = {"seq_lens": seq_lens, "batches": batches,
                     "note": f"lengths {seq_lens}: fewer than the default {list(DEFAULT_SEQ_LENS)} for a model over {LARGE_MODEL:,} parameters" if scaled else ""}
    if "ort" in runners:
        drive = runners["ort"].drive  # type: ignore[attr-defined]
        report.driven = {"source": drive.source, "batch_first": drive.batch_first, "inputs": drive.inputs, "outputs": drive.outputs}
    first_mismatch: dict[str, Any] = {}
    for dtype_name in dtypes:
        dtype = DTYPES.get(dtype_name)
        if dtype is None:
            raise RNNXError(f"--dtype {dtype_name!r}: expected one of {', '.join(DTYPES)}")
        cases = [(t, b) for t in seq_lens for b in batches]
        for k, (T, B) in enumerate(_progress(cases, f"verify {dtype_name}", progress)):
            inputs = parity.random_inputs(weights, T, B, seed=seed + k, ragged=takes_lengths, states=takes_states)
            want = parity.reference_outputs(weights, inputs)
            torch_out = runners["torch"](inputs) if "torch" in runners else None
            for name, runner in runners.items():
                if name == "reference":
                    continue
                feed = {key: (v.astype(dtype) if v.dtype.kind == "f" else v) for key, v in inputs.items()}
                try:
                    got = runner(feed)
                except RNNXError as exc:
                    if dtype_name != "fp32":  # e.g. an fp32 ONNX model given fp16 inputs: that backend skips this dtype
                        note = BackendResult(f"{name} ({dtype_name})", "skipped", str(exc)[:200])
                        if note not in report.backends:
                            report.backends.append(note)
                        continue
                    raise RNNXError(f"{name} could not run at T={T}, B={B}, {dtype_name}: {exc}") from None
                tol = (tolerances or {}).get(name) or parity.TOLERANCES[dtype]
                for out_name, ref in want.items():
                    if out_name not in got:  # the file does not return it (say, a model returning only Y)
                        continue
                    row = _row(name, out_name, got[out_name], ref, T, B, dtype_name, "reference", tol)
                    report.rows.append(row)
                    if not row.passed and name not in first_mismatch and out_name == "Y":
                        first_mismatch[name] = (inputs, got["Y"], tol)
                    if torch_out is not None and name != "torch":
                        report.rows.append(_row(name, out_name, got[out_name], np.asarray(torch_out[out_name], np.float64), T, B, dtype_name, "torch", tol))
    for name, (inputs, y, tol) in first_mismatch.items():
        hyps, matches = diagnose(weights, inputs, y, atol=max(tol[0] * 10, 1e-3))
        report.diagnosis.append({"backend": name, "matches": matches, "hypotheses": [asdict(h) for h in hyps]})
    return report


# The backends that run each kind of artefact; torch and the reference run the source's weights.
_ARTEFACT_BACKENDS = {".onnx": ("ort",), ".engine": ("trt",)}
_WEIGHT_BACKENDS = ("cudnn",)  # runs the weights through cuDNN's packed layout: a check of that layout


DEFAULT_SEQ_LENS, DEFAULT_BATCHES = (1, 17, 64), (1, 8)
LARGE_MODEL = 20_000_000  # parameters; past it the float64 reference dominates and the default check shrinks


def _default_shapes(weights: RNNWeights, seq_lens: Sequence[int] | None, batches: Sequence[int] | None) -> tuple[list[int], list[int], bool]:
    """The lengths and batches to run: the caller's, else the defaults, shorter for large models
    (batch 1 and a length past 1 always stay)."""
    large = weights.num_parameters() > LARGE_MODEL
    lens = list(seq_lens) if seq_lens else list(DEFAULT_SEQ_LENS[:2] if large else DEFAULT_SEQ_LENS)
    bats = list(batches) if batches else list(DEFAULT_BATCHES)
    return lens, bats, large and not seq_lens


def _progress(items: list[Any], label: str, shown: bool) -> Any:
    """A progress bar on stderr (for a person at a terminal; the CLI turns it off for pipes and --json)."""
    if not shown:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=label, unit="case", file=sys.stderr, leave=False)


def _require_the_artefact_runs(model: Path | None, runners: dict[str, Any], status: list[BackendResult]) -> None:
    """A verdict needs the thing under test to have run: the model file in its backend, or, with
    no model, the weights in a layout backend (cuDNN). torch against the reference checks only
    the source and the reference; that alone is never a PASS."""
    why = {b.name: b.reason for b in status if b.status == "skipped"}
    if model is not None:
        wanted = _ARTEFACT_BACKENDS.get(model.suffix.lower(), ("ort",))
        if not any(b in runners for b in wanted):
            reasons = "; ".join(f"{b}: {why.get(b, 'not in --backends')}" for b in wanted)
            raise RNNXError(f"{model}: no backend here ran it ({reasons}); nothing was verified")
    elif not any(b in runners for b in _WEIGHT_BACKENDS):
        raise RNNXError("nothing to verify: give MODEL (an ONNX file or TensorRT engine) to check it against --against, "
                        f"or run where cuDNN is available; torch and the reference alone check only the source ({'; '.join(f'{k}: {v}' for k, v in why.items()) or 'no other backend asked for'})")


def _check_run_sizes(weights: RNNWeights, source: Path, model: Path | None, seq_lens: Sequence[int], batches: Sequence[int]) -> None:
    """The largest case's activations, in float64 for the reference and once per backend, must fit the budget."""
    from rnnx import limits

    spec = weights.spec
    per_step = spec.input_size + 2 * spec.num_layers * spec.num_directions * (spec.output_size + spec.hidden_size)
    claimed = max(seq_lens, default=0) * max(batches, default=0) * per_step * 8 * limits.WORKING_COPIES
    files = sum(Path(p).stat().st_size for p in (source, model) if p is not None and Path(p).is_file())
    limits.check_claim(f"the largest case (T={max(seq_lens, default=0)}, B={max(batches, default=0)})", claimed, files)


def _model_takes(name: str, runner: Any) -> bool:
    return runner is not None and name in getattr(runner, "input_names", [])
