"""rnnx lower --for tensorrt[=VERSION]: exactly the recurrent nodes TensorRT's parser would refuse
or build into something that computes otherwise are lowered to Scans, the rest stay native, the
result runs as the input does in ONNX Runtime, and the parser table accepts every node written."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import pytest

from rnnx import RNNSpec, RNNWeights
from rnnx.cli.main import main
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.tensorrt_parser import parser_verdicts
from rnnx.engines.tensorrt_parser_rules import ACCEPTED
from rnnx.formats.onnx_build import build_stack_model
from rnnx.pipelines.lower import lower_file


def _stack(tmp_path: Path, *specs: str) -> Path:
    """One graph with a stack per spec, side by side on inputs of their own."""
    models = [build_stack_model(RNNWeights.random(RNNSpec.parse(s), seed=k)) for k, s in enumerate(specs)]
    for m in models:  # each stack's own record would contradict the others' in one file
        del m.metadata_props[:]
    merged = models[0]
    for k, other in enumerate(models[1:], start=1):
        other = onnx.compose.add_prefix(other, prefix=f"m{k}_")
        merged = onnx.compose.merge_models(merged, other, io_map=[])
    path = tmp_path / "stacks.onnx"
    onnx.save(merged, str(path))
    return path


def test_lowers_the_refused_and_the_differing_and_keeps_the_rest(tmp_path: Path) -> None:
    source = _stack(tmp_path, "gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh", "lstm,input=4,hidden=5,clip=0.5",
                    "lstm,input=4,hidden=5,layers=2")
    out = tmp_path / "for_trt.onnx"
    report = lower_file(source, out, for_tensorrt="8.6")
    assert sorted(report.lowered) == ["GRU_l0", "m1_LSTM_l0"], report.lowered
    assert report.why["GRU_l0"][0].startswith("refused") and report.why["m1_LSTM_l0"][0].startswith("builds but computes differently")
    assert sorted(report.kept_native) == ["m2_LSTM_l0", "m2_LSTM_l1"] and report.after == []
    written = onnx.load(str(out))
    assert all(v.verdict == ACCEPTED for v in parser_verdicts(written, "8.6") if v.graph == "main")
    assert report.check is not None and report.check  # ran as the input does in ONNX Runtime
    kinds = sorted(n.op_type for n in written.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    assert kinds == ["LSTM", "LSTM"]


def test_a_file_tensorrt_takes_as_it_is_is_written_unchanged_in_kind(tmp_path: Path) -> None:
    source = _stack(tmp_path, "lstm,input=4,hidden=5,layers=2,bidirectional")
    report = lower_file(source, tmp_path / "same.onnx", for_tensorrt="10.x")
    assert report.lowered == [] and report.tensorrt == "10.15" and report.after == []
    rng = np.random.default_rng(0)
    feeds = {"X": rng.standard_normal((6, 2, 4)).astype(np.float32), "h0": np.zeros((4, 2, 5), np.float32), "c0": np.zeros((4, 2, 5), np.float32)}
    a, b = OnnxRuntimeRunner(source)(feeds), OnnxRuntimeRunner(tmp_path / "same.onnx")(feeds)
    np.testing.assert_array_equal(a["Y"], b["Y"])


def test_cli_for_tensorrt_json_and_bad_targets(tmp_path: Path) -> None:
    source = _stack(tmp_path, "lstm,input=4,hidden=5,clip=0.5")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["lower", str(source), "-o", str(tmp_path / "l.onnx"), "--for", "tensorrt=8.2", "--json"]) == 0
    report = json.loads(out.getvalue())
    assert report["tensorrt"] == "8.2" and report["lowered"] == ["LSTM_l0"] and report["not_accepted_after"] == []
    for bad in ("tensorrt=7.1", "openvino"):
        with pytest.raises(SystemExit) as exited, redirect_stdout(io.StringIO()):
            main(["lower", str(source), "-o", str(tmp_path / "x.onnx"), "--for", bad])
        assert exited.value.code == 2
    with redirect_stdout(io.StringIO()):
        code = main(["lower", str(source), "-o", str(tmp_path / "y.onnx"), "--for", "tensorrt", "--node", "LSTM_l0"])
    assert code == 2 and not (tmp_path / "y.onnx").exists()
