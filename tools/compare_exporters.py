"""Regenerate the README's exporter comparison: what torch.onnx does with each case, and rnnx.

Run: .venv/bin/python tools/compare_exporters.py  (rewrites the table between the markers
in README.md and prints it). Every cell is measured, none typed by hand.
"""

from __future__ import annotations

import collections
import contextlib
import io
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

import rnnx  # noqa: E402
from rnnx.engines.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from rnnx.exporters.modules import RECURRENT_MODULES  # noqa: E402
from rnnx.exporters.torch_export import _fresh_inputs, _quiet, infer_dynamic_axes  # noqa: E402
from tests.exporters.models import CASES, Case  # noqa: E402

BEGIN, END = "<!-- exporter-table:begin -->", "<!-- exporter-table:end -->"
RECURRENT_OPS = {"LSTM", "GRU", "RNN", "Scan", "Loop"}


def _first_line(exc: BaseException) -> str:
    for line in str(exc).splitlines():
        line = line.strip()
        if line.startswith("<class"):
            return line.split(">:", 1)[-1].strip()[:90]
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:90]


def _run_at(model, path: Path, example, structure_axes, seq: int, batch: int) -> str:
    axes = structure_axes
    inputs = _fresh_inputs(example, axes, {"seq": seq, "batch": batch}, seed=1)
    with torch.no_grad():
        want, _ = tree_flatten(model(*inputs))
    try:
        runner = OnnxRuntimeRunner(path)
        got = runner(dict(zip(runner.input_names, [x.numpy() for x in inputs])))
    except Exception as exc:  # noqa: BLE001  the table records whatever ONNX Runtime says
        return f"fails ({_first_line(exc)[:60]})"
    err = max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got.values(), want))
    return f"max err {err:.0e}" if err < 1e-4 else f"WRONG (max err {err:.1e})"


def _describe(proto) -> str:
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    native = ", ".join(f"{k} x{v}" for k, v in sorted(ops.items()) if k in RECURRENT_OPS) or "none (unrolled)"
    return f"{sum(ops.values())} nodes; recurrence: {native}"


def measure(case: Case, exporter: str, tmp: Path) -> str:
    torch.manual_seed(0)
    model = case.make().eval()
    example = case.example()
    originals = [m for m in model.modules() if type(m) in RECURRENT_MODULES]
    stepped = "stepped" in case.name
    # torch.export cannot trace a Python loop over a symbolic length: torch.onnx gets the batch axis only.
    axes = [{1: "batch"}] if stepped and exporter != "rnnx" else infer_dynamic_axes(example, originals, has_cells=stepped)
    path = tmp / f"{case.name}-{exporter}.onnx"
    try:
        with _quiet():
            if exporter == "rnnx":
                rnnx.export(model, example, path, dynamic_axes=axes, check=False)
            elif exporter == "torch.onnx (dynamo)":
                dims = {"seq": torch.export.Dim("seq"), "batch": torch.export.Dim("batch")}
                shapes = tuple({d: dims[r] for d, r in ax.items()} or None for ax in axes)
                torch.onnx.export(model, example, str(path), dynamic_shapes=shapes, opset_version=17)
            else:
                names = [f"in{i}" for i in range(len(example))]
                dyn = {n: {d: r for d, r in ax.items()} for n, ax in zip(names, axes)}
                torch.onnx.export(model, example, str(path), dynamo=False, opset_version=17, input_names=names, dynamic_axes=dyn)
    except Exception as exc:  # noqa: BLE001
        return f"export fails: {_first_line(exc)}"
    proto = onnx.load(str(path))
    seq0 = int(example[0].shape[1 if case.name == "packed-sequence" or "batch-first" in case.name else 0])
    batch0 = max(int(x.shape[d]) for x, ax in zip(example, axes) for d, r in ax.items() if r == "batch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same = _run_at(model, path, example, axes, seq0, batch0)
        fixed = stepped and exporter != "rnnx"
        other = "n/a (traced at a fixed length)" if fixed else _run_at(model, path, example, axes, seq0 + 6, batch0 + 4)
    return f"{_describe(proto)}; at the example's shape: {same}; at T+6, B+4: {other}"


def main() -> None:
    cases = list(CASES)
    exporters = ["torch.onnx (dynamo)", "torch.onnx (TorchScript)", "rnnx"]
    rows = ["| case | " + " | ".join(exporters) + " |", "|---|" + "---|" * len(exporters)]
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            cells = [measure(case, e, Path(tmp)) for e in exporters]
            rows.append(f"| {case.name} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    table = "\n".join([f"Measured with torch {torch.__version__}, onnxruntime {__import__('onnxruntime').__version__} by `tools/compare_exporters.py`.", "", *rows])
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        readme.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    print(table)


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()) if "--quiet" in sys.argv else contextlib.nullcontext():
        main()
