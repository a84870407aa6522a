"""The files of a bundle (:mod:`rnnx.pipelines.bundle`): raw inputs and golden outputs with
cases.json (what check.py reads), Polygraphy's inputs.json and golden.json, build.sh and
check.sh (every trtexec line through :mod:`rnnx.engines.trtexec`), README.txt and BUNDLE.json."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from rnnx._version import __version__
from rnnx.check import Case
from rnnx.engines import trtexec, trtexec_flags
from rnnx.fileio import file_sha256
from rnnx.formats.onnx_read import load_model, value_dims
from rnnx.graphs.legalize import model_opset
from rnnx.pipelines.bundle_folder import WRITTEN_BY
from rnnx.shapes.roles import LENGTH
from rnnx.tolerance import CALIBRATED_MULTIPLE


def _slug(text: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in text)


def file_stems(names: list[str]) -> dict[str, str]:
    """Each tensor name's file name: the name itself where it is a safe, short file name no other
    name shares (case-insensitively: a copy through a filesystem that folds case must not merge
    two), else its slug with a hash of the name (``a.b`` and ``a_b`` get two files)."""
    slugs = {n: _slug(n)[:64] for n in names}
    folded: dict[str, int] = {}
    for slug in slugs.values():
        folded[slug.lower()] = folded.get(slug.lower(), 0) + 1
    return {n: slug if slug == n and folded[slug.lower()] == 1 else f"{slug}-{hashlib.sha256(n.encode()).hexdigest()[:10]}"
            for n, slug in slugs.items()}


def _export_path(case: Case, k: int) -> str:
    return f"out/{_slug(case.name)}/{k}.json"


def _input_path(case: Case, k: int, name: str, stems: dict[str, str]) -> str:
    carried = k > 0 and name in case.carry
    return f"{'out' if carried else 'cases'}/{_slug(case.name)}/{k}/{stems[name]}.bin"


def write_cases(staging: Path, cases: list[Case], specs: list[Any], proto: Any, roles: dict[str, str]) -> None:
    """Inputs as raw little-endian files and golden outputs as raw little-endian float64, with
    cases.json, which check.py reads (``roles``: each label's, which says an output's time axis)."""
    dtypes = {s.name: np.dtype(s.dtype) for s in specs}
    time_axes = _output_time_axes(proto, roles)
    inputs_stems, outputs_stems = file_stems([s.name for s in specs]), file_stems([o.name for o in proto.graph.output])
    manifest_cases = []
    for case in cases:
        chunks = []
        for k, chunk in enumerate(case.chunks):
            inputs = {}
            for name, value in chunk.feed.items():
                path = _input_path(case, k, name, inputs_stems)
                inputs[name] = {"file": path, "dtype": dtypes[name].name, "shape": list(value.shape)}
                if not path.startswith("out/"):
                    _raw(staging / path, value.astype(dtypes[name]))
            outputs = {}
            for name, floor in chunk.floors.items():
                path = f"golden/{_slug(case.name)}/{k}/{outputs_stems[name]}.f64"
                _raw(staging / path, chunk.golden[name].astype(np.float64))
                outputs[name] = {"golden": path, "shape": list(chunk.golden[name].shape), "floor": floor, "time_axis": time_axes.get(name)}
            chunks.append({"shapes": chunk.shapes, "inputs": inputs, "outputs": outputs, "export": _export_path(case, k)})
        manifest_cases.append({"name": _slug(case.name), "chunks": chunks, "carry": case.carry})
        case.name = _slug(case.name)
    (staging / "cases.json").write_text(json.dumps({"cases": manifest_cases}, indent=1))


def _raw(path: Path, value: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes())


def _output_time_axes(proto: Any, roles: dict[str, str]) -> dict[str, int | None]:
    axes: dict[str, int | None] = {}
    for out in proto.graph.output:
        dims = value_dims(out, unnamed=None)
        axes[out.name] = next((i for i, d in enumerate(dims) if isinstance(d, str) and roles.get(d) == LENGTH), None)
    return axes


def _npy_json(value: np.ndarray) -> dict[str, Any]:
    """An array as Polygraphy's JSON holds it (polygraphy.json: np.save, base64)."""
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}


def write_polygraphy(staging: Path, cases: list[Case], proto: Any) -> None:
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


def polygraphy_atol(cases: list[Case]) -> dict[str, float]:
    """Per output, the largest allowed error over the cases (Polygraphy takes one per output),
    plus the golden values' own rounding to float32 in golden.json."""
    atol: dict[str, float] = {}
    for case in cases:
        for chunk in case.chunks:
            for name, floor in chunk.floors.items():
                scale = float(np.abs(chunk.golden[name]).max()) if chunk.golden[name].size else 0.0
                atol[name] = max(atol.get(name, 0.0), CALIBRATED_MULTIPLE * floor + scale * 2.0 ** -24)
    return atol


def build_script(target: trtexec.Target, argv: list[str]) -> str:
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
rm -f model.engine  # a failed build must not leave an earlier engine for check.sh to pass
set +e
"$TRTEXEC" {' '.join(trtexec.quote(a) for a in argv)} > build.log 2>&1
status=$?
set -e
found=$(sed -n 's/.*TensorRT version: *\\([0-9][0-9.]*\\).*/\\1/p' build.log | head -n 1)
case "$found" in
  ""|{target.tensorrt_major_minor}|{target.tensorrt_major_minor}.*) ;;
  *) echo "build.sh: this bundle's parser rules and trtexec flags are TensorRT {target.tensorrt}'s, and trtexec reports $found;" \\
          "make the bundle with --tensorrt $found where rnnx has read that version" >&2 ;;
esac
if [ $status -ne 0 ]; then rm -f model.engine; echo "build.sh: trtexec failed (exit $status); see build.log" >&2; exit 1; fi
echo "built model.engine (TensorRT ${{found:-?}}); next: bash check.sh"
"""


def check_script(target: trtexec.Target, cases: list[Case], specs: list[Any]) -> str:
    stems = file_stems([s.name for s in specs])
    lines = [
        "#!/usr/bin/env bash",
        "# Runs model.engine on every golden case with trtexec (a stream's chunks in order, each fed the engine's own",
        "# state outputs of the chunk before), then holds the outputs to the float64 reference with check.py.",
        "# Exit 0: every output holds; 1: one does not; 2: the engine or trtexec is missing, or the folder is not as rnnx wrote it.",
        "set -u",
        'cd "$(dirname "$0")"',
        'TRTEXEC="${TRTEXEC:-trtexec}"',
        'PYTHON="${PYTHON:-python3}"',
        'if ! command -v "$TRTEXEC" >/dev/null 2>&1; then',
        '  if [ -x /usr/src/tensorrt/bin/trtexec ]; then TRTEXEC=/usr/src/tensorrt/bin/trtexec',
        '  else echo "check.sh: expected trtexec on PATH or at /usr/src/tensorrt/bin/trtexec, found neither; set TRTEXEC" >&2; exit 2; fi',
        "fi",
        '[ -f model.engine ] || { echo "check.sh: expected model.engine, found none; run bash build.sh first" >&2; exit 2; }',
        '"$PYTHON" -c "import sys; sys.exit(sys.version_info < (3, 6))" 2>/dev/null || '
        '{ echo "check.sh: expected Python 3.6 or later as $PYTHON, found none or an older one; set PYTHON=/path/to/python3" >&2; exit 2; }',
        "# the folder as rnnx wrote it (every file's size and SHA-256, cases.json's values) before any trtexec run",
        '"$PYTHON" check.py --folder || exit $?',
        'rm -rf out 2>/dev/null && mkdir out 2>/dev/null || '
        '{ echo "check.sh: expected to write out/ in $(pwd), found it cannot (is the folder read-only, or out/ another user\'s?)" >&2; exit 2; }',
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
            files = {name: _input_path(case, k, name, stems) for name in chunk.feed}
            argv = trtexec.run_argv(target, chunk.shapes, files, _export_path(case, k))
            lines.append(f"run {trtexec.quote(_export_path(case, k)[:-5] + '.log')} " + " ".join(trtexec.quote(a) for a in argv))
    lines.append('exec "$PYTHON" check.py')
    return "\n".join(lines) + "\n"


# What each precision means on the device, for README.txt.
PRECISION_TEXT = {
    "fp32": "fp32, with TF32 off (build.sh passes --noTF32: trtexec enables TF32 otherwise, and on Ampere and later GPUs, every "
            "Jetson Orin included, it would round the inputs of matrix products and convolutions to a 10-bit mantissa).",
    "tf32": "TF32 (trtexec's default): on Ampere and later GPUs, matrix products and convolutions take inputs rounded to a 10-bit "
            "mantissa; the floor is measured by the file computing so. On older GPUs the engine computes in fp32, within it too.",
    "fp16": "fp16 (--fp16): layers may run in float16; the floor is measured by the file computing in float16.",
}


def write_manifests(staging: Path, report: Any, target: trtexec.Target, precision: str, build_argv: list[str],
                     cases: list[Case]) -> None:
    atol = polygraphy_atol(cases)
    polygraphy = (["polygraphy", "run", "model.onnx", "--trt", "--load-inputs", "inputs.json", "--load-outputs", "golden.json",
                   "--check-error-stat", "max", "--rtol", "0", "--atol", *[f"{n}:{v:.3g}" for n, v in atol.items()]]
                  + list(trtexec.POLYGRAPHY_PRECISION_FLAGS[precision]) + trtexec.polygraphy_profile(report.profile["shapes"]))
    manifest = json.loads((staging / "cases.json").read_text())
    manifest.update({"engine": "model.engine", "target": f"TensorRT {target.tensorrt}", "precision": precision,
                     "printed_digits": trtexec_flags.EXPORT_OUTPUT["significant_digits"],
                     "rule": {"multiple": CALIBRATED_MULTIPLE, "what": "max abs error within multiple x the rounding floor, the floor "
                              f"measured per case and output by an honest run at {precision}"}})
    (staging / "cases.json").write_text(json.dumps(manifest, indent=1))
    readme = f"""rnnx bundle: a TensorRT engine for {target.describe()}, built and checked with NVIDIA's tools alone.

On the device (nothing else to install; check.py needs only python3, 3.6 or later):

    bash build.sh      # trtexec builds model.engine from model.onnx ({precision}, the profile below)
    bash check.sh      # trtexec runs the engine on every case; check.py holds it to the float64 reference

check.sh first holds the folder to what rnnx wrote (every file's size and SHA-256), then prints
one line per case and output and PASS or FAIL. It exits 0 when every output holds, 1 when one
does not, 2 when the engine or trtexec is missing or the folder is not as rnnx wrote it (copy it
again), 3 on a bug in check.py. TRTEXEC=/path/to/trtexec picks another trtexec; PYTHON=python3.8
another Python.

The rule: the engine's max abs error against the float64 reference within {CALIBRATED_MULTIPLE:g} times the
rounding floor, measured per case and output by an honest run at {precision} (and half a unit of
the sixth significant digit trtexec prints; a printed zero is exact).

Precision: {PRECISION_TEXT[precision]}

Profile: {report.profile['summary'] or 'static shapes'}.

With Polygraphy installed, the same check without trtexec:

    {' '.join(trtexec.quote(a) for a in polygraphy)}

(Polygraphy runs each feed on its own: a stream's later chunks take the reference's states.
To run the file in ONNX Runtime instead, put --onnxrt for --trt and leave out the --trt-*-shapes
flags and their shapes.)

What rnnx checked where it made this folder: ONNX Runtime on this model.onnx and these cases
(each case held to the rule above), and onnx-tensorrt's parser rules for TensorRT {target.parser}.
BUNDLE.json holds the target, the profile, the rule and every file's SHA-256.
"""
    (staging / "README.txt").write_text(readme)
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    bundle = {"format": 2, "written_by": f"{WRITTEN_BY} {__version__}", "target": target.to_json(), "precision": precision, "tf32": "--noTF32" not in build_argv,
              "opset": model_opset(load_model(staging / "model.onnx")),
              "profile": report.profile, "rule": manifest["rule"],
              "commands": {"build": "bash build.sh", "check": "bash check.sh", "trtexec build": build_argv, "polygraphy": polygraphy},
              "checked_here": {"onnxruntime": report.cases, "parser_rules": f"onnx-tensorrt {target.parser}", "lowered": report.lowered},
              "trtexec_flags": trtexec.citations(target, build_argv),
              "notes": report.notes,
              "files": {p.relative_to(staging).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in files}}
    (staging / "BUNDLE.json").write_text(json.dumps(bundle, indent=1, default=str))
