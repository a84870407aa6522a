"""``rnnx bundle FILE.onnx -o DIR``: a folder that builds and checks a TensorRT engine on the device with NVIDIA's tools alone.

An engine belongs to one GPU and one TensorRT version, so it is built where it runs (a
Jetson), and there rnnx may not install (JetPack 4.6 has Python 3.6). The folder holds:

- ``model.onnx``: the file as the target's parser needs it: lowered where onnx-tensorrt's
  rules for that version refuse a node or compute it differently (:mod:`rnnx.pipelines.lower`),
  at an opset that parser reads;
- ``build.sh``: trtexec with the optimization profile rnnx plans from the file
  (:mod:`rnnx.engines.trt_profiles`), the precision and a timing cache, every flag one that
  version's trtexec takes (:mod:`rnnx.engines.trtexec`);
- ``cases/`` and ``golden/``: inputs as raw little-endian files (trtexec's ``--loadInputs``),
  and the outputs of the float64 reference (:mod:`rnnx.engines.onnx_reference`) at the
  example's shapes and the profile's corners; a streaming file gets sequences of chunks;
- ``check.sh`` (trtexec on each case, each chunk's state outputs fed to the next chunk) and
  ``check.py`` (:mod:`rnnx.pipelines.bundle_check`, standard library only), which hold the
  engine's outputs to the float64 reference under the calibrated rule, with the rounding
  floor measured at the engine's precision;
- ``inputs.json`` and ``golden.json`` in Polygraphy's format, for ``polygraphy run --trt``;
- ``BUNDLE.json`` and ``README.txt``: the target, the profile, the rule, the files' hashes,
  what was checked here and the two commands to run there.

Here, before anything is renamed into place, ONNX Runtime runs ``model.onnx`` on every case
(chunks chained through its own states) and must hold to the same rule.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import progress
from rnnx.engines import trtexec
from rnnx.engines.onnx_reference import ReferenceRun
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.trt_profiles import Profile, ProfileChoice, file_inputs, plan_profiles
from rnnx.errors import ParityError, RNNXError
from rnnx.fileio import refuse_overwriting
from rnnx.formats.onnx_build import save_model
from rnnx.formats.onnx_read import data_files, load_model
from rnnx.formats.onnx_metadata import read_metadata
from rnnx.graphs.legalize import convert_down, model_opset
from rnnx.pipelines import bundle_check
from rnnx.pipelines.lower import lower_file
from rnnx.streaming import graph_ranks, read_streaming
from rnnx.tolerance import CALIBRATED_MULTIPLE, rounding_floor
from rnnx.verify.inputs import Case, input_specs, make_feed

MAX_CASE_VALUES = 1 << 24  # per case, all inputs together: a profile corner larger than this is left out, with a note
CHUNKS = (1, 3, 2)  # a streaming case's chunks, in units of the chunk multiple


@dataclass
class BundleReport:
    folder: str
    target: dict[str, Any]
    precision: str
    profile: dict[str, Any]
    cases: list[dict[str, Any]] = field(default_factory=list)  # per case: chunks, outputs, the floor and ONNX Runtime's error here
    lowered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o["passed"] for c in self.cases for ch in c["chunks"] for o in ch["outputs"].values())

    def to_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "target": self.target, "precision": self.precision, "profile": self.profile, "lowered": self.lowered,
                "cases": self.cases, "passed": self.passed, "notes": self.notes}

    def __str__(self) -> str:
        t = self.target
        lines = [f"wrote {self.folder}: TensorRT {t['tensorrt']}" + (f" (JetPack {t['jetpack']})" if t.get("jetpack") else "")
                 + f", opset {t['opset']}, {self.precision}; profile {self.profile['summary'] or 'static shapes'}",
                 f"lowered for that parser: {', '.join(self.lowered) or 'nothing'}",
                 "checked here: ONNX Runtime on model.onnx, each case against the float64 reference "
                 f"(max abs error within {CALIBRATED_MULTIPLE:g} x the rounding floor at {self.precision}):"]
        for case in self.cases:
            for k, chunk in enumerate(case["chunks"]):
                label = case["name"] + ("" if len(case["chunks"]) == 1 else f" chunk {k}")
                shapes = ", ".join(f"{n}: {'x'.join(map(str, s))}" for n, s in chunk["shapes"].items())
                worst = max(chunk["outputs"].values(), key=lambda o: o["ratio"])
                lines.append(f"  {label} ({shapes}): {'ok' if all(o['passed'] for o in chunk['outputs'].values()) else 'FAIL'} "
                             f"(worst {worst['output']}: {worst['ratio']:.3g} x its floor {worst['floor']:.2e})")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"on the device: cd {Path(self.folder).name} && bash build.sh && bash check.sh")
        return "\n".join(lines)


@dataclass
class _Chunk:
    shapes: dict[str, list[int]]
    feed: dict[str, np.ndarray]  # every input; a later chunk's states are the reference chain's (for Polygraphy)
    golden: dict[str, np.ndarray] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)


@dataclass
class _Case:
    name: str
    chunks: list[_Chunk]
    carry: dict[str, str] = field(default_factory=dict)  # state input -> the output that feeds it next chunk


def make_bundle(source: Path, folder: Path, tensorrt: str | None = None, jetpack: str | None = None, precision: str = "fp32",
                profiles: list[Profile] | None = None, min_shapes: dict[str, tuple[int, ...]] | None = None,
                opt_shapes: dict[str, tuple[int, ...]] | None = None, max_shapes: dict[str, tuple[int, ...]] | None = None,
                seed: int = 0) -> BundleReport:
    """Write the bundle for ``source`` into ``folder`` (which must not exist); see the module docstring."""
    source, folder = Path(source), Path(folder)
    target = trtexec.resolve_target(tensorrt, jetpack)
    if precision not in trtexec.PRECISIONS:
        raise RNNXError(f"--precision: expected one of {', '.join(trtexec.PRECISIONS)}, found {precision!r}")
    if folder.exists() or folder.is_symlink():
        raise RNNXError(f"-o {folder}: expected a new folder, found {'one' if folder.is_dir() else 'a file'} already there; "
                        "remove it or choose another name")
    refuse_overwriting([source, *data_files(source)], {"-o": folder})
    if not folder.absolute().parent.is_dir():
        raise RNNXError(f"-o {folder}: the folder {folder.absolute().parent} does not exist; create it first")
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.absolute().parent))
    try:
        report = _write(source, staging, folder, target, precision, profiles, min_shapes, opt_shapes, max_shapes, seed)
        if not report.passed:
            failed = next(f"{c['name']} chunk {k}, output {o['output']}" for c in report.cases for k, ch in enumerate(c["chunks"])
                          for o in ch["outputs"].values() if not o["passed"])
            raise ParityError(f"bundle: ONNX Runtime on the bundle's model.onnx differs from the float64 reference beyond "
                              f"{CALIBRATED_MULTIPLE:g} x the rounding floor at {failed}; nothing was written to {folder}")
        os.replace(staging, folder)
        return report
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _write(source: Path, staging: Path, folder: Path, target: trtexec.Target, precision: str, profiles: Any, min_shapes: Any,
           opt_shapes: Any, max_shapes: Any, seed: int) -> BundleReport:
    progress.step(f"lowering for TensorRT {target.tensorrt}'s parser")
    model_path = staging / "model.onnx"
    lowered = lower_file(source, model_path, for_tensorrt=target.parser)
    proto = load_model(model_path)
    notes: list[str] = [target.note] if target.note else []
    if model_opset(proto) > target.opset:
        progress.step(f"converting to opset {target.opset}")
        proto = convert_down(proto, target.opset)
        save_model(proto, model_path)
        notes.append(f"converted from opset {model_opset(load_model(source))} to {target.opset}, the newest TensorRT {target.tensorrt}'s parser reads")
    original = load_model(source)
    export, _ = read_metadata(proto)
    specs, roles = input_specs(proto, export)
    record = read_streaming({p.key: p.value for p in proto.metadata_props}, *graph_ranks(proto))
    inputs = file_inputs(proto, roles)
    choices = plan_profiles(inputs, profiles, min_shapes, opt_shapes, max_shapes)
    if len(choices) > 1:
        raise RNNXError("bundle: expected one optimization profile (trtexec builds one from --minShapes/--optShapes/--maxShapes), "
                        f"found {len(choices)}; give one --profile")
    choice = choices[0] if choices else None
    cases = _plan_cases(proto, specs, choice, inputs.example, record, seed, notes)
    progress.step("computing the golden outputs with the float64 reference")
    _golden(original, cases, precision, notes)
    progress.step("checking model.onnx in ONNX Runtime on every case")
    runner = OnnxRuntimeRunner(proto, data_folder=staging)
    checked = [_check_here(runner, case) for case in cases]
    _write_cases(staging, cases, specs, proto)
    _write_polygraphy(staging, cases, proto)
    shutil.copyfile(bundle_check.__file__, staging / "check.py")
    build_argv = trtexec.build_argv(target, choice.profile if choice else None, precision)
    (staging / "build.sh").write_text(_build_script(target, build_argv))
    (staging / "check.sh").write_text(_check_script(target, cases, specs))
    for script in ("build.sh", "check.sh", "check.py"):
        (staging / script).chmod(0o755)
    summary = choice.summary() if choice else ""
    report = BundleReport(str(folder), target.to_json(), precision, {"summary": summary, "shapes": choice.profile.as_json() if choice else {}},
                          checked, lowered.lowered, notes + lowered_notes(lowered))
    _write_manifests(staging, report, target, precision, build_argv, cases)
    return report


def lowered_notes(lowered: Any) -> list[str]:
    return [f"{node} lowered to Scans: {'; '.join(rules)}" for node, rules in lowered.why.items()]


# --- cases ----------------------------------------------------------------------------------------


def _plan_cases(proto: Any, specs: list[Any], choice: ProfileChoice | None, example: dict[str, list[int]], record: Any, seed: int,
                notes: list[str]) -> list[_Case]:
    """The example's shapes and the profile's two corners; a streaming file's are sequences of chunks."""
    static = {s.name: [d if isinstance(d, int) else None for d in s.dims] for s in specs}
    shaped: list[tuple[str, dict[str, list[int]]]] = []
    if choice is None:
        shaped.append(("static", {n: list(d) for n, d in static.items()}))  # type: ignore[misc]
    else:
        profile = choice.profile.shapes
        corner = {end: {n: list(t[i]) for n, t in profile.items()} for i, end in enumerate(("min", "opt", "max"))}
        first = {n: example.get(n) or corner["opt"].get(n) or static[n] for n in static}
        shaped += [("example", first), ("min", corner["min"] | {n: v for n, v in first.items() if n not in profile}),
                   ("max", corner["max"] | {n: v for n, v in first.items() if n not in profile})]
    cases: list[_Case] = []
    for k, (name, shapes) in enumerate(shaped):
        if any(s is None for dims in shapes.values() for s in dims):
            raise RNNXError(f"bundle: expected a size for every dimension of the {name} case, found none for "
                            f"{next(n for n, d in shapes.items() if None in d)}; give --opt-shapes")
        if sum(int(np.prod(s)) for s in shapes.values()) > MAX_CASE_VALUES:
            notes.append(f"the {name} case ({_shape_text(shapes)}) holds over {MAX_CASE_VALUES} values: left out")
            continue
        case = _Case(name, [_Chunk(shapes, _feed(specs, shapes, seed + k))]) if record is None else \
            _stream_case(name, specs, shapes, record, seed + k, choice)
        if any([c.shapes for c in case.chunks] == [c.shapes for c in other.chunks] for other in cases):
            continue  # a stream at the example's batch is the min corner's stream too
        cases.append(case)
    return cases


def _stream_case(name: str, specs: list[Any], shapes: dict[str, list[int]], record: Any, seed: int, choice: ProfileChoice | None) -> _Case:
    """A stream of chunks (CHUNKS x the chunk multiple frames, within the profile) at this case's batch, states at zeros first."""
    states = {s.input: s.output for s in record.states}
    chunks = []
    # the max corner's stream takes the profile's longest chunk in its middle
    for k, units in enumerate((CHUNKS[0], 1 << 30, CHUNKS[2]) if name == "max" else CHUNKS):
        frames = units * record.multiple
        at = {}
        for n, shape in shapes.items():
            axis = (record.inputs.get(n) or {}).get("time_axis")
            shape = list(shape)
            if axis is not None:
                shape[axis] = _within(n, axis, frames, choice, record.multiple)
            at[n] = shape
        feed = _feed(specs, at, seed * 10 + k)
        for s in record.states:
            feed[s.input] = np.zeros(at[s.input], dtype=feed[s.input].dtype)
        chunks.append(_Chunk(at, feed))
    return _Case(f"{name} stream", chunks, states)


def _within(name: str, axis: int, frames: int, choice: ProfileChoice | None, multiple: int) -> int:
    if choice is None or name not in choice.profile.shapes:
        return frames
    lo, _, hi = (t[axis] for t in choice.profile.shapes[name])
    frames = max(frames, -(-lo // multiple) * multiple)
    return min(frames, hi // multiple * multiple) if hi >= multiple else frames


def _feed(specs: list[Any], shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    return make_feed(specs, Case("bundle", {}, shapes), {}, seed)


def _shape_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{n}: {'x'.join(map(str, s))}" for n, s in shapes.items())


# --- the reference and the floors -----------------------------------------------------------------


def _golden(original: Any, cases: list[_Case], precision: str, notes: list[str]) -> None:
    """Golden outputs (the float64 reference on the source file, a stream's chunks chained
    through its own states) and each output's rounding floor: an honest run at the engine's
    precision (ONNX Runtime in float32; ONNX's reference evaluator in float16 for fp16)."""
    reference = ReferenceRun(original, "float64")
    honest_dtype = "float16" if precision == "fp16" else "float32"
    if honest_dtype == "float16":
        try:
            honest: Any = ReferenceRun(original, "float16")
        except RNNXError as exc:
            raise RNNXError(f"bundle --precision fp16: the honest float16 run that measures the rounding floor failed ({exc})") from None
        notes.append("the rounding floor is measured by the file computing in float16 (ONNX's reference evaluator): an fp16 engine that "
                     "keeps some layers in float32 lies within it")
    else:
        honest = OnnxRuntimeRunner(original)
    for case in cases:
        ref_states: dict[str, np.ndarray] = {}
        honest_states: dict[str, np.ndarray] = {}
        for chunk in case.chunks:
            feed = {**chunk.feed, **{i: v.astype(chunk.feed[i].dtype) for i, v in ref_states.items()}}
            chunk.feed = feed
            want = reference(feed)
            got = honest({**feed, **honest_states})
            for name, value in want.items():
                chunk.golden[name] = value
                if value.dtype.kind != "f":
                    continue
                floor = rounding_floor(np.asarray(got[name], np.float64), value, honest_dtype)
                chunk.floors[name] = floor if floor is not None else float(np.finfo(np.float32).eps)
            ref_states = {i: want[o] for i, o in case.carry.items()}
            honest_states = {i: np.asarray(got[o]) for i, o in case.carry.items()}


def _check_here(runner: OnnxRuntimeRunner, case: _Case) -> dict[str, Any]:
    """ONNX Runtime on the bundle's model.onnx, each chunk fed the state outputs of its own
    chunk before, held to the rule."""
    chunks = []
    states: dict[str, np.ndarray] = {}
    for chunk in case.chunks:
        got = runner({**chunk.feed, **states})
        outputs = {}
        for name, floor in chunk.floors.items():
            error = float(np.abs(np.asarray(got[name], np.float64) - chunk.golden[name]).max()) if chunk.golden[name].size else 0.0
            passed = bool(np.isfinite(error)) and error <= CALIBRATED_MULTIPLE * floor
            outputs[name] = {"output": name, "max_abs": error, "floor": floor, "ratio": error / floor, "passed": passed}
        chunks.append({"shapes": chunk.shapes, "outputs": outputs})
        states = {i: np.asarray(got[o]) for i, o in case.carry.items()}
    return {"name": case.name, "chunks": chunks}


# --- files ------------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def _export_path(case: _Case, k: int) -> str:
    return f"out/{_slug(case.name)}/{k}.json"


def _input_path(case: _Case, k: int, name: str) -> str:
    carried = k > 0 and name in case.carry
    return f"{'out' if carried else 'cases'}/{_slug(case.name)}/{k}/{_slug(name)}.bin"


def _write_cases(staging: Path, cases: list[_Case], specs: list[Any], proto: Any) -> None:
    """Inputs as raw little-endian files and golden outputs as raw little-endian float64, with
    cases.json, which check.py reads."""
    dtypes = {s.name: np.dtype(s.dtype) for s in specs}
    time_axes = _output_time_axes(proto)
    manifest_cases = []
    for case in cases:
        chunks = []
        for k, chunk in enumerate(case.chunks):
            inputs = {}
            for name, value in chunk.feed.items():
                path = _input_path(case, k, name)
                inputs[name] = {"file": path, "dtype": dtypes[name].name, "shape": list(value.shape)}
                if not path.startswith("out/"):
                    _raw(staging / path, value.astype(dtypes[name]))
            outputs = {}
            for name, floor in chunk.floors.items():
                path = f"golden/{_slug(case.name)}/{k}/{_slug(name)}.f64"
                _raw(staging / path, chunk.golden[name].astype(np.float64))
                outputs[name] = {"golden": path, "shape": list(chunk.golden[name].shape), "floor": floor, "time_axis": time_axes.get(name)}
            chunks.append({"shapes": chunk.shapes, "inputs": inputs, "outputs": outputs, "export": _export_path(case, k)})
        manifest_cases.append({"name": _slug(case.name), "chunks": chunks, "carry": case.carry})
        case.name = _slug(case.name)
    (staging / "cases.json").write_text(json.dumps({"cases": manifest_cases}, indent=1))


def _raw(path: Path, value: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes())


def _output_time_axes(proto: Any) -> dict[str, int | None]:
    export, _ = read_metadata(proto)
    roles = (export or {}).get("roles") or {}
    axes: dict[str, int | None] = {}
    for out in proto.graph.output:
        dims = [d.dim_param for d in out.type.tensor_type.shape.dim]
        axes[out.name] = next((i for i, d in enumerate(dims) if d and roles.get(d) == "length"), None)
    return axes


def _npy_json(value: np.ndarray) -> dict[str, Any]:
    """An array as Polygraphy's JSON holds it (polygraphy.json: np.save, base64)."""
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}


def _write_polygraphy(staging: Path, cases: list[_Case], proto: Any) -> None:
    """inputs.json (a list of feeds) and golden.json (RunResults, one iteration per feed), in
    Polygraphy's JSON; a stream's later chunks take the reference chain's states, since
    Polygraphy runs each feed on its own."""
    types = {o.name: o.type.tensor_type.elem_type for o in proto.graph.output}
    feeds, iterations = [], []
    for case in cases:
        for chunk in case.chunks:
            feeds.append({name: _npy_json(value) for name, value in chunk.feed.items()})
            outputs = {name: {"values": _npy_json(chunk.golden[name].astype(np.float16 if types.get(name) == 10 else np.float32)),
                              "polygraphy_class": "LazyArray"} for name in chunk.floors}
            iterations.append({"outputs": outputs, "runtime": 0.0, "runner_name": "rnnx-float64-reference", "polygraphy_class": "IterationResult"})
    (staging / "inputs.json").write_text(json.dumps(feeds))
    (staging / "golden.json").write_text(json.dumps({"lst": [["rnnx-float64-reference", iterations]], "polygraphy_class": "RunResults"}))


def polygraphy_atol(cases: list[_Case]) -> dict[str, float]:
    """Per output, the largest allowed error over the cases (Polygraphy takes one per output),
    plus the golden values' own rounding to float32 in golden.json."""
    atol: dict[str, float] = {}
    for case in cases:
        for chunk in case.chunks:
            for name, floor in chunk.floors.items():
                scale = float(np.abs(chunk.golden[name]).max()) if chunk.golden[name].size else 0.0
                atol[name] = max(atol.get(name, 0.0), CALIBRATED_MULTIPLE * floor + scale * 2.0 ** -24)
    return atol


def _build_script(target: trtexec.Target, argv: list[str]) -> str:
    return f"""#!/usr/bin/env bash
# Builds model.engine from model.onnx with NVIDIA's trtexec, for TensorRT {target.tensorrt}{f' (JetPack {target.jetpack})' if target.jetpack else ''}.
# Written by rnnx bundle; every flag below is one trtexec {target.flags} accepts (BUNDLE.json cites the table).
# TRTEXEC: the trtexec to run (on JetPack: /usr/src/tensorrt/bin/trtexec).
set -eu
cd "$(dirname "$0")"
TRTEXEC="${{TRTEXEC:-trtexec}}"
if ! command -v "$TRTEXEC" >/dev/null 2>&1; then
  if [ -x /usr/src/tensorrt/bin/trtexec ]; then TRTEXEC=/usr/src/tensorrt/bin/trtexec
  else echo "build.sh: expected trtexec on PATH or at /usr/src/tensorrt/bin/trtexec, found neither; set TRTEXEC=/path/to/trtexec" >&2; exit 2; fi
fi
set +e
"$TRTEXEC" {' '.join(trtexec.quote(a) for a in argv)} > build.log 2>&1
status=$?
set -e
found=$(sed -n 's/.*TensorRT version: *\\([0-9][0-9.]*\\).*/\\1/p' build.log | head -n 1)
case "$found" in
  ""|{target.tensorrt_major_minor}|{target.tensorrt_major_minor}.*) ;;
  *) echo "build.sh: this bundle is for TensorRT {target.tensorrt}, trtexec reports $found; rebuild the bundle with --tensorrt $found" >&2 ;;
esac
if [ $status -ne 0 ]; then echo "build.sh: trtexec failed (exit $status); see build.log" >&2; exit 1; fi
echo "built model.engine (TensorRT ${{found:-?}}); next: bash check.sh"
"""


def _check_script(target: trtexec.Target, cases: list[_Case], specs: list[Any]) -> str:
    lines = [
        "#!/usr/bin/env bash",
        "# Runs model.engine on every golden case with trtexec (a stream's chunks in order, each fed the engine's own",
        "# state outputs of the chunk before), then holds the outputs to the float64 reference with check.py.",
        "# Exit 0: every output holds; 1: one does not; 2: the engine or trtexec is missing.",
        "set -u",
        'cd "$(dirname "$0")"',
        'TRTEXEC="${TRTEXEC:-trtexec}"',
        'PYTHON="${PYTHON:-python3}"',
        'if ! command -v "$TRTEXEC" >/dev/null 2>&1; then',
        '  if [ -x /usr/src/tensorrt/bin/trtexec ]; then TRTEXEC=/usr/src/tensorrt/bin/trtexec',
        '  else echo "check.sh: expected trtexec on PATH or at /usr/src/tensorrt/bin/trtexec, found neither; set TRTEXEC" >&2; exit 2; fi',
        "fi",
        '[ -f model.engine ] || { echo "check.sh: expected model.engine, found none; run bash build.sh first" >&2; exit 2; }',
        "rm -rf out",
        "run() {",
        '  log="$1"; shift',
        '  mkdir -p "$(dirname "$log")"',
        '  if ! "$TRTEXEC" "$@" > "$log" 2>&1; then echo "check.sh: trtexec failed on ${log%.log}; see $log" >&2; exit 1; fi',
        "}",
    ]
    for case in cases:
        for k, chunk in enumerate(case.chunks):
            if k > 0:
                lines.append(f'"$PYTHON" check.py --carry {trtexec.quote(case.name)} {k} || exit $?')
            files = {name: _input_path(case, k, name) for name in chunk.feed}
            argv = trtexec.run_argv(target, chunk.shapes, files, _export_path(case, k))
            lines.append(f"run {trtexec.quote(_export_path(case, k)[:-5] + '.log')} " + " ".join(trtexec.quote(a) for a in argv))
    lines.append('exec "$PYTHON" check.py')
    return "\n".join(lines) + "\n"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_manifests(staging: Path, report: BundleReport, target: trtexec.Target, precision: str, build_argv: list[str],
                     cases: list[_Case]) -> None:
    atol = polygraphy_atol(cases)
    polygraphy = (["polygraphy", "run", "model.onnx", "--trt", "--load-inputs", "inputs.json", "--load-outputs", "golden.json",
                   "--check-error-stat", "max", "--rtol", "0", "--atol", *[f"{n}:{v:.3g}" for n, v in atol.items()]]
                  + (["--fp16"] if precision == "fp16" else []) + trtexec.polygraphy_profile(report.profile["shapes"]))
    manifest = json.loads((staging / "cases.json").read_text())
    manifest.update({"engine": "model.engine", "target": f"TensorRT {target.tensorrt}", "precision": precision,
                     "rule": {"multiple": CALIBRATED_MULTIPLE, "what": "max abs error within multiple x the rounding floor, the floor "
                              f"measured per case and output by an honest run at {precision}"}})
    (staging / "cases.json").write_text(json.dumps(manifest, indent=1))
    readme = f"""rnnx bundle: a TensorRT engine for {target.describe()}, built and checked with NVIDIA's tools alone.

On the device (nothing else to install; check.py needs only python3, 3.6 or later):

    bash build.sh      # trtexec builds model.engine from model.onnx ({precision}, the profile below)
    bash check.sh      # trtexec runs the engine on every case; check.py holds it to the float64 reference

check.sh prints one line per case and output and PASS or FAIL, and exits 0 when every output
holds, 1 when one does not, 2 when the engine or trtexec is missing. TRTEXEC=/path/to/trtexec
picks another trtexec; PYTHON=python3.8 another Python.

The rule: the engine's max abs error against the float64 reference within {CALIBRATED_MULTIPLE:g} times the
rounding floor, measured per case and output by an honest run at {precision} (and half a unit of
the last digit trtexec prints).

Profile: {report.profile['summary'] or 'static shapes'}.

With Polygraphy installed, the same check without trtexec:

    {' '.join(trtexec.quote(a) for a in polygraphy)}

What rnnx checked where it made this folder: ONNX Runtime on this model.onnx and these cases
(each case held to the rule above), and onnx-tensorrt's parser rules for TensorRT {target.parser}.
BUNDLE.json holds the target, the profile, the rule and every file's SHA-256.
"""
    (staging / "README.txt").write_text(readme)
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    bundle = {"format": 1, "target": target.to_json(), "precision": precision, "opset": model_opset(load_model(staging / "model.onnx")),
              "profile": report.profile, "rule": manifest["rule"],
              "commands": {"build": "bash build.sh", "check": "bash check.sh", "trtexec build": build_argv, "polygraphy": polygraphy},
              "checked_here": {"onnxruntime": report.cases, "parser_rules": f"onnx-tensorrt {target.parser}", "lowered": report.lowered},
              "trtexec_flags": trtexec.citations(target, build_argv),
              "notes": report.notes,
              "files": {str(p.relative_to(staging)): _sha256(p) for p in files}}
    (staging / "BUNDLE.json").write_text(json.dumps(bundle, indent=1, default=str))
