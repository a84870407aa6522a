"""Export the RECORDED third-party models with rnnx and record what the tests check them against.

Run only in the pinned environment of requirements.txt (see README.md), never in the test
environment: it imports packages that need torchaudio / torchvision builds made for another
torch than the test environment's CPU 2.13, or pins that clash with the test pins.

For each case of tests/exporters/test_third_party.py's RECORDED list it builds the model as
that test module does (seed 0, random weights, eval mode), then

- records the inputs of the test's three check shapes and the torch module's outputs on them
  (``<case>.npz``: ``in{k}_{i}`` / ``out{k}_{i}``, the flattened tensors of shape k);
- calls ``rnnx.export(model, example, path)`` with no axes, from the batch-3 and from the
  batch-1 example, and keeps each file that it writes (``<case>.batch3.onnx``, ...);
- runs each kept file in ONNX Runtime at the three shapes against the recorded outputs, as the
  test will;

and writes manifest.json: package and version, the environment, each export's file, sha256 and
op counts, or the first line of its failure (an export that raised, or a file that ONNX Runtime
runs to other outputs than torch's). The test marks a case with a recorded failure
xfail(strict=True) with that line as its reason, so rerunning this script after a fix in rnnx
turns the case into a plain test.

    python tools/third_party/make_fixtures.py [--only NAME,NAME] [--out tests/fixtures/third_party]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import importlib.metadata
import io
import json
import logging
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

import rnnx  # noqa: E402
from tests.exporters import test_third_party as tp  # noqa: E402


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def quiet():
    """torch.export and torch.onnx are loud; keep the script's own lines readable."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def rnnx_revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rnnx"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + (" with uncommitted changes under rnnx/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(case: tp.ThirdPartyCase, out: Path) -> dict:
    model, make_inputs = tp.build(case)
    checks = tp.check_inputs(make_inputs)
    arrays, n_in, n_out = {}, set(), set()
    for k, inputs in enumerate(checks):
        flat_in = [x.numpy() for x in tp.flat_tensors(inputs)]
        flat_out = tp.torch_outputs(model, inputs)
        n_in.add(len(flat_in)), n_out.add(len(flat_out))
        arrays.update({f"in{k}_{i}": x for i, x in enumerate(flat_in)})
        arrays.update({f"out{k}_{i}": y for i, y in enumerate(flat_out)})
    assert len(n_in) == len(n_out) == 1, (case.name, n_in, n_out)
    (n_in,), (n_out,) = n_in, n_out
    recorded = out / f"{case.name}.npz"
    np.savez_compressed(recorded, **arrays)

    exports = {}
    for batch in tp.EXAMPLE_BATCHES:
        entry: dict = {}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.onnx"
            try:
                with quiet():
                    report = rnnx.export(model, tp.example(make_inputs, batch), path)
                if not report.passed:
                    raise AssertionError(str(report))
            except Exception as exc:  # noqa: BLE001  whatever rnnx raises is the recorded failure
                entry["failure"] = first_line(exc)
            else:
                kept = out / f"{case.name}.batch{batch}.onnx"
                shutil.copyfile(path, kept)
                ops = collections.Counter(n.op_type for n in onnx.load(str(kept)).graph.node)
                entry.update(file=kept.name, sha256=sha256(kept), ops=dict(sorted(ops.items())))
                session = ort.InferenceSession(str(kept), providers=["CPUExecutionProvider"])
                try:
                    tp._assert_native(onnx.load(str(kept)), case.native)
                    for k, (b, seq) in enumerate(tp.CHECK_SHAPES):
                        tp.compare(session, [arrays[f"in{k}_{i}"] for i in range(n_in)],
                                   [arrays[f"out{k}_{i}"] for i in range(n_out)], f"batch={b} seq={seq}")
                except Exception as exc:  # noqa: BLE001  an assertion of the test, or ONNX Runtime refusing the feeds
                    entry["failure"] = first_line(exc)
        exports[f"batch{batch}"] = entry
        print(f"  {case.name} from a batch-{batch} example: {entry.get('failure', 'ok')}", flush=True)

    dist = case.package
    return {
        "package": dist,
        "version": importlib.metadata.version(dist),
        "model": " ".join((case.build.__doc__ or "").split()),
        "native": case.native,
        "environment": f"tools/third_party: python {platform.python_version()}, torch {torch.__version__}, "
                       f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, rnnx at {rnnx_revision()}",
        "recorded": recorded.name,
        "recorded_sha256": sha256(recorded),
        "inputs_per_shape": n_in,
        "outputs_per_shape": n_out,
        "check_shapes": tp.CHECK_SHAPES,
        "exports": exports,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=tp.FIXTURES)
    parser.add_argument("--only", help="comma-separated case names (others keep their manifest entries)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    wanted = set(args.only.split(",")) if args.only else {c.name for c in tp.RECORDED}
    unknown = wanted - {c.name for c in tp.RECORDED}
    if unknown:
        raise SystemExit(f"not in RECORDED: {sorted(unknown)}")
    for case in tp.RECORDED:
        if case.name not in wanted:
            continue
        for old in args.out.glob(f"{case.name}.*"):
            old.unlink()
        print(case.name, flush=True)
        manifest[case.name] = record(case, args.out)
    manifest = {c.name: manifest[c.name] for c in tp.RECORDED if c.name in manifest}
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
