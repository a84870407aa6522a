"""convert's choices travel down its chain as one ConvertOptions: each reaches the file written
and the check that runs it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.pipelines.convert import ConvertOptions, convert


def _source(tmp_path: Path, spec: str = "lstm,input=3,hidden=5,layers=2") -> Path:
    path = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse(spec), seed=4), path)
    return path


def test_the_options_are_one_frozen_value() -> None:
    options = ConvertOptions(batch_first=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.check = False  # type: ignore[misc]
    assert dataclasses.replace(options, check=False).batch_first


def test_each_onnx_choice_reaches_the_file_and_its_check(tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    result = convert(_source(tmp_path), out, opset=13, batch_first=True, seq_lens=True, states=False)
    assert result.written and result.report
    model = onnx.load(str(out))
    assert model.opset_import[0].version == 13
    x = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in x] == ["batch", "seq", 3]  # batch-major, as asked
    assert [i.name for i in model.graph.input] == ["X", "seq_lens"]  # no initial states taken
    rows = result.report.to_json()
    assert {r["batch"] for r in rows} >= {1} and all(r["dtype"] == "float32" for r in rows)


def test_a_raw_blob_s_dtype_and_an_fp16_file_s_precision_reach_their_checks(tmp_path: Path) -> None:
    blob = convert(_source(tmp_path), tmp_path / "m.bin", dtype="float16")
    assert blob.written and (tmp_path / "m.bin").stat().st_size == RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=5,layers=2")).num_parameters() * 2
    assert any(r["output"] == "values" and r["dtype"] == "float16" for r in blob.report.to_json())
    half = convert(_source(tmp_path), tmp_path / "h.onnx", precision="fp16", keep_io_types=True)
    assert half.written and half.precision == "fp16" and half.keep_io_types
    model = onnx.load(str(tmp_path / "h.onnx"))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # float32 at the edges
    assert {r["dtype"] for r in half.report.to_json()} == {"float16"}
    unchecked = convert(_source(tmp_path), tmp_path / "n.onnx", check=False)
    assert unchecked.written and unchecked.report is None and np.isfinite(unchecked.seconds["write"])
