"""``rnnx bundle FILE.onnx -o DIR``: a folder that builds and checks a TensorRT engine on the device with NVIDIA's tools alone.

An engine belongs to one GPU and one TensorRT version, so it is built where it runs (a
Jetson), and there rnnx may not install (JetPack 4.6 has Python 3.6). The folder holds:

- ``model.onnx``: the file as the target's parser needs it: lowered where onnx-tensorrt's
  rules for that version refuse a node or compute it differently (:mod:`rnnx.pipelines.lower`),
  at an opset that parser reads;
- ``build.sh``: trtexec with the optimization profile rnnx plans from the file
  (:mod:`rnnx.shapes.profiles`), the precision and a timing cache, every flag one that
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

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import progress
from rnnx.engines import trtexec
from rnnx.engines.shape_probe import shape_probe
from rnnx.errors import ParityError, RNNXError, shown
from rnnx.fileio import refuse_overwriting, require_file, staging_folder
from rnnx.formats.onnx_build import save_model
from rnnx.formats.onnx_metadata import read_metadata
from rnnx.formats.onnx_read import data_files, load_model
from rnnx.graphs.legalize import convert_down, model_opset
from rnnx.pipelines import bundle_check, bundle_folder
from rnnx.pipelines.bundle_cases import check_here, golden, isolated, plan_cases
from rnnx.pipelines.bundle_files import build_script, check_script, write_cases, write_manifests, write_polygraphy
from rnnx.pipelines.lower import lower_file
from rnnx.shapes.file_dims import read_file_dims
from rnnx.shapes.profiles import Profile, plan_profiles, shapes_text
from rnnx.streaming import graph_ranks, read_streaming
from rnnx.tolerance import CALIBRATED_MULTIPLE


@dataclass
class BundleReport:
    folder: str
    target: dict[str, Any]
    precision: str
    profile: dict[str, Any]
    cases: list[dict[str, Any]] = field(default_factory=list)  # per case: chunks, outputs, the floor and ONNX Runtime's error here
    lowered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    opset: int = 0  # model.onnx's, at most the target's newest

    @property
    def passed(self) -> bool:
        return all(o["passed"] for c in self.cases for ch in c["chunks"] for o in ch["outputs"].values())

    def to_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "target": self.target, "opset": self.opset, "precision": self.precision, "profile": self.profile,
                "lowered": self.lowered, "cases": self.cases, "passed": self.passed, "notes": self.notes}

    def __str__(self) -> str:
        t = self.target
        lines = [f"wrote {self.folder}: TensorRT {t['tensorrt']}" + (f" (JetPack {t['jetpack']})" if t.get("jetpack") else "")
                 + f", opset {self.opset}, {self.precision}; profile {self.profile['summary'] or 'static shapes'}",
                 f"lowered for that parser: {', '.join(self.lowered) or 'nothing'}",
                 "checked here: ONNX Runtime on model.onnx, each case against the float64 reference "
                 f"(max abs error within {CALIBRATED_MULTIPLE:g} x the rounding floor at {self.precision}):"]
        for case in self.cases:
            for k, chunk in enumerate(case["chunks"]):
                label = case["name"] + ("" if len(case["chunks"]) == 1 else f" chunk {k}")
                worst = max(chunk["outputs"].values(), key=lambda o: o["ratio"])
                lines.append(f"  {label} ({shapes_text(chunk['shapes'])}): {'ok' if all(o['passed'] for o in chunk['outputs'].values()) else 'FAIL'} "
                             f"(worst {shown(worst['output'], quoted=False)}: {worst['ratio']:.3g} x its floor {worst['floor']:.2e})")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"on the device: cd {Path(self.folder).name} && bash build.sh && bash check.sh")
        return "\n".join(lines)


def make_bundle(source: Path, folder: Path, tensorrt: str | None = None, jetpack: str | None = None, precision: str = "fp32",
                profiles: list[Profile] | None = None, min_shapes: dict[str, tuple[int, ...]] | None = None,
                opt_shapes: dict[str, tuple[int, ...]] | None = None, max_shapes: dict[str, tuple[int, ...]] | None = None,
                seed: int = 0) -> BundleReport:
    """Write the bundle for ``source`` into ``folder`` (a new folder, or one an earlier bundle
    wrote, which is replaced whole); see the module docstring."""
    source, folder = require_file(Path(source)), Path(os.path.abspath(folder))  # absolute: "-o ." names the folder, not the working one
    target = trtexec.resolve_target(tensorrt, jetpack)
    if precision not in trtexec.PRECISIONS:
        raise RNNXError(f"--precision: expected one of {', '.join(trtexec.PRECISIONS)}, found {precision!r}")
    if not folder.parent.is_dir():
        raise RNNXError(f"-o {folder}: the folder {folder.parent} does not exist; create it first")
    replacing = bundle_folder.earlier_bundle(folder)
    if replacing and any(folder.resolve() in p.resolve().parents for p in (source, *data_files(source))):
        raise RNNXError(f"-o {folder}: the input {source} lies inside the bundle folder it would replace; bundle into another folder")
    if not replacing:  # (an earlier bundle's folder is replaced whole; the input was held outside it above)
        refuse_overwriting([source, *data_files(source)], {"-o": folder})
    with staging_folder(folder.parent, "bundle") as staging:
        report = _write(source, staging, folder, target, precision, profiles, min_shapes, opt_shapes, max_shapes, seed)
        if not report.passed:
            failed = next(f"{c['name']} chunk {k}, output {o['output']}" for c in report.cases for k, ch in enumerate(c["chunks"])
                          for o in ch["outputs"].values() if not o["passed"])
            raise ParityError(f"bundle: ONNX Runtime on the bundle's model.onnx differs from the float64 reference beyond "
                              f"{CALIBRATED_MULTIPLE:g} x the rounding floor at {failed}; nothing was written to {folder}")
        bundle_folder.move_into_place(staging, folder, replacing)
    return report


def _write(source: Path, staging: Path, folder: Path, target: trtexec.Target, precision: str, profiles: Any, min_shapes: Any,
           opt_shapes: Any, max_shapes: Any, seed: int) -> BundleReport:
    progress.step(f"lowering for TensorRT {target.tensorrt}'s parser")
    model_path = staging / "model.onnx"
    lowered = lower_file(source, model_path, for_tensorrt=target.parser)
    proto = load_model(model_path)
    original = load_model(source)
    notes: list[str] = [target.note] if target.note else []
    if model_opset(proto) > target.opset:
        progress.step(f"converting to opset {target.opset}")
        try:
            proto = convert_down(proto, target.opset)
        except RNNXError as exc:
            why = str(exc).split("; ")[0]
            raise RNNXError(f"bundle: expected a file TensorRT {target.tensorrt}'s parser can read (opset {target.opset} or lower), found one "
                            f"that cannot be converted down ({why}); export the model at that opset (rnnx export --opset {target.opset}: "
                            "torch.onnx then writes the operators that opset has), or bundle for a newer TensorRT") from None
        save_model(proto, model_path)
        notes.append(f"converted from opset {model_opset(original)} to {target.opset}, the newest TensorRT {target.tensorrt}'s parser reads")
    export, _ = read_metadata(proto)
    inputs = read_file_dims(proto, export)
    trtexec.check_names([s.name for s in inputs.specs], [o.name for o in proto.graph.output])
    record = read_streaming({p.key: p.value for p in proto.metadata_props}, *graph_ranks(proto))
    runner = isolated(proto, folder=staging)  # one session, in a child held to the budgets: the profile's probe, then every case's check
    choices = plan_profiles(inputs, profiles, min_shapes, opt_shapes, max_shapes, probe=shape_probe(proto, inputs.specs, session=runner))
    if len(choices) > 1:
        raise RNNXError("bundle: expected one optimization profile (trtexec builds one from --minShapes/--optShapes/--maxShapes), "
                        f"found {len(choices)}; give one --profile")
    choice = choices[0] if choices else None
    cases = plan_cases(proto, inputs.specs, choice, inputs.example, record, seed, notes)
    progress.step("computing the golden outputs with the float64 reference")
    golden(original, cases, precision, notes)
    progress.step("checking model.onnx in ONNX Runtime on every case")
    checked = [check_here(runner, case) for case in cases]
    write_cases(staging, cases, inputs.specs, proto, inputs.roles)
    write_polygraphy(staging, cases, proto)
    shutil.copyfile(bundle_check.__file__, staging / "check.py")
    build_argv = trtexec.build_argv(target, choice.profile if choice else None, precision)
    (staging / "build.sh").write_text(build_script(target, build_argv))
    (staging / "check.sh").write_text(check_script(target, cases, inputs.specs))
    for script in ("build.sh", "check.sh", "check.py"):
        (staging / script).chmod(0o755)
    summary = choice.summary() if choice else ""
    asked = [f"the profile's {label}: {choice.dimensions[label]['from']}" for label in choice.asked] if choice else []
    profile = {"summary": summary, "shapes": choice.profile.as_json() if choice else {}, "dimensions": choice.dimensions if choice else {}}
    notes = asked + notes
    report = BundleReport(str(folder), target.to_json(), precision, profile,
                          checked, lowered.lowered, notes + lowered_notes(lowered) + trtexec.deprecations(target, build_argv), model_opset(proto))
    write_manifests(staging, report, target, precision, build_argv, cases)
    return report


def lowered_notes(lowered: Any) -> list[str]:
    return [f"{node} lowered to Scans: {'; '.join(rules)}" for node, rules in lowered.why.items()]
