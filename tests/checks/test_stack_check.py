"""rnnx.check.stack: a stack's check (convert's, and every runner test's) makes rnnx.check rows,
judged by the one rule, and keeps convert's JSON row fields; a planted mistake fails it, an
output the run drops fails it, and convert's written files are checked by the backend its
format's registry entry names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rnnx import parity
from rnnx.check import Row
from rnnx.check.stack import ROW_FIELDS, StackReport, check, compare, describe
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats import files
from rnnx.formats.onnx_build import build_stack_model
from rnnx.pipelines.convert import convert
from rnnx.spec import RNNSpec
from rnnx.tolerance import Tolerance, Tolerances
from rnnx.weights import RNNWeights

SHAPES = ((1, 1), (7, 2), (12, 5))  # batch 1, and lengths and batches no file was built at


@pytest.fixture(scope="module")
def weights() -> RNNWeights:
    return RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4,layers=2,bidirectional"), seed=11, scale=0.9)


def test_a_file_passes_and_its_rows_keep_converts_fields(weights: RNNWeights) -> None:
    report = check("ort", OnnxRuntimeRunner(build_stack_model(weights, sequence_lens=True)), weights, shapes=SHAPES, seed=5, ragged=True)
    assert report and report.failure() == ""
    assert len(report.rows) == 2 * len(SHAPES) and all(isinstance(r, Row) and r.compared > 0 for r in report.rows)
    assert {(r.seq_len, r.batch) for r in report.rows} == set(SHAPES)
    assert all(r.floor is not None for r in report.rows)  # nothing set: the calibrated rule held
    rows = json.loads(report.dumps())
    assert [list(r) for r in rows] == [list(ROW_FIELDS)] * len(rows)
    assert rows[0]["backend"] == "ort" and rows[0]["ran"] is True and rows[0]["passed"] is True


def test_a_planted_mistake_fails_naming_where(weights: RNNWeights) -> None:
    tensors = dict(weights.tensors)
    name = next(k for k in tensors if k.endswith(".R.r"))
    tensors[name] = tensors[name] * 1.01  # one recurrent gate off by one percent
    report = check("ort", OnnxRuntimeRunner(build_stack_model(RNNWeights(weights.spec, tensors))), weights, shapes=SHAPES, seed=6)
    assert not report
    line = report.failure()
    assert line.startswith("ort ") and " at T=" in line and "beyond max abs <=" in line, line
    assert "FAIL" in str(report)


def test_a_fixed_tolerance_given_holds_and_a_dropped_output_fails(weights: RNNWeights) -> None:
    feed = parity.random_inputs(weights, 9, 1, seed=3)
    want = parity.reference_outputs(weights, feed)
    got = {k: v.astype(np.float32) for k, v in want.items()}
    rows = compare("ort", got, want, 9, 1, tolerances=Tolerances({"": Tolerance(1e-6, 0.0)}))
    assert all(r.passed and r.floor is None and r.atol == 1e-6 for r in rows)
    dropped = StackReport(compare("ort", {"Y": got["Y"]}, want, 9, 1))
    assert not dropped and "did not return" in describe(dropped.first_failure())
    assert not StackReport() and StackReport().failure() == "nothing was compared"


@pytest.mark.parametrize("suffix, backend", [(".onnx", "ort"), (".pt", "torch"), (".safetensors", "rnnx (reread)")])
def test_convert_checks_a_written_file_with_its_formats_backend(weights: RNNWeights, tmp_path: Path, suffix: str, backend: str) -> None:
    source = tmp_path / "in.safetensors"
    if backend == "torch":
        pytest.importorskip("torch")
    files.save(weights, source)
    result = convert(source, tmp_path / f"out{suffix}")
    assert result.written and result.report
    assert {r.backend for r in result.report.rows} == {backend}
    rows = result.to_json()["check"]["rows"]
    assert rows and all(list(r) == list(ROW_FIELDS) for r in rows)
    assert all(r["ran"] is not backend.endswith("(reread)") for r in rows)
    assert {(r["seq_len"], r["batch"]) for r in rows} == {(1, 1), (5, 3), (11, 7)}  # batch 1 among them
