"""rnnx verify: exit statuses, skipped backends, per-step errors, and a planted layout bug named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.formats.onnx_build import build_stack_model
from rnnx.verify import verify
from rnnx.weights import tensor_name


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx.cli", "verify", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture()
def stack(tmp_path: Path) -> tuple[Path, Path, RNNWeights]:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=4,hidden=5,layers=2,bidirectional"), seed=3, scale=0.9)
    source, model = tmp_path / "w.safetensors", tmp_path / "m.onnx"
    rnnx.save(weights, source)
    onnx.save(build_stack_model(weights, sequence_lens=True), str(model))
    return source, model, weights


def _forum_packed(weights: RNNWeights) -> RNNWeights:
    """The widely copied mistake: gates packed i,f,o,g where i,f,g,o belongs."""
    swap = {"g": "o", "o": "g"}
    tensors = {}
    for name in weights:
        parts = name.split(".")
        if len(parts) == 4 and parts[2] in ("W", "R", "bW", "bR") and parts[3] in swap:
            parts[3] = swap[parts[3]]
        tensors[name] = weights[".".join(parts)]
    return RNNWeights(weights.spec, tensors)


def test_pass_exits_0_and_lists_skipped_backends(stack, tmp_path: Path) -> None:
    source, model, _ = stack
    out = _cli(model, "--against", source, "--seq-lens", "1,9", "--batch", "2,3", "--json", "--html", tmp_path / "r.html")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    status = {b["name"]: b for b in report["backends"]}
    assert status["ort"]["status"] == "ran" and status["reference"]["status"] == "ran"
    assert status["trt"]["status"] == "skipped" and "engine" in status["trt"]["reason"]
    y_rows = [r for r in report["rows"] if r["output"] == "Y" and r["backend"] == "ort" and r["against"] == "reference"]
    assert {(r["seq_len"], r["batch"]) for r in y_rows} == {(1, 2), (1, 3), (9, 2), (9, 3)}
    assert all(len(r["per_step"]) == r["seq_len"] for r in y_rows)
    page = (tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") == 1 and "PASS" in page


def test_planted_gate_order_bug_is_named(stack, tmp_path: Path) -> None:
    source, _, weights = stack
    bad_model = tmp_path / "bad.onnx"
    onnx.save(build_stack_model(_forum_packed(weights), sequence_lens=True), str(bad_model))
    report = verify(source, bad_model, backends=["ort", "reference"], seq_lens=(12,), batches=(3,))
    assert not report.passed
    (diag,) = report.diagnosis
    assert diag["matches"] == ["gates read in order i,f,o,g instead of i,f,g,o"]
    out = _cli(bad_model, "--against", source, "--backends", "ort", "--seq-lens", "12", "--batch", "3", "--html", tmp_path / "bad.html")
    assert out.returncode == 1
    assert "gates read in order i,f,o,g instead of i,f,g,o" in out.stdout
    assert (tmp_path / "bad.html").read_text().count("data:image/png;base64,") == 2


def test_swapped_gru_biases_are_named(tmp_path: Path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=5, scale=1.0)
    swapped = RNNWeights(weights.spec, {k: weights[k.replace(".bW.", ".bX.").replace(".bR.", ".bW.").replace(".bX.", ".bR.")] for k in weights})
    source, model = tmp_path / "w.safetensors", tmp_path / "m.onnx"
    rnnx.save(weights, source)
    onnx.save(build_stack_model(swapped), str(model))
    report = verify(source, model, backends=["ort"], seq_lens=(8,), batches=(2,))
    assert "input and recurrent biases swapped" in report.diagnosis[0]["matches"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(("--seq-lens", "0"), "positive integers"), (("--backends", "ort,gpu9"), "unknown backend 'gpu9'"), (("--tol", "ort=abc"), "BACKEND=ATOL,RTOL")],
)
def test_bad_usage_exits_2(stack, args: tuple[str, ...], fragment: str) -> None:
    source, model, _ = stack
    out = _cli(model, "--against", source, *args)
    assert out.returncode == 2 and fragment in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_model_of_another_network_is_a_usage_error(stack, tmp_path: Path) -> None:
    source, _, _ = stack
    other = tmp_path / "other.onnx"
    onnx.save(build_stack_model(RNNWeights.random(RNNSpec.parse("gru,input=4,hidden=3"))), str(other))
    out = _cli(other, "--against", source, "--backends", "ort")
    assert out.returncode == 2, out.stderr


def test_tensor_names_used_by_the_planted_bug_exist(stack) -> None:
    _, _, weights = stack
    assert tensor_name(1, "reverse", "W", "o") in weights.tensors
    np.testing.assert_array_equal(_forum_packed(weights)["l0.forward.W.g"], weights["l0.forward.W.o"])


def test_a_dtype_a_backend_cannot_take_is_listed_as_skipped(stack) -> None:
    """An fp32 ONNX file takes no fp16, bf16 or fp64 inputs; torch computes in each, with that dtype's tolerance."""
    from rnnx.tolerance import BY_DTYPE

    source, model, _ = stack
    report = verify(source, model, backends=["ort", "torch", "reference"], seq_lens=(3,), batches=(2,), dtypes=("fp32", "fp16", "bf16", "fp64"))
    skipped = {b.name: b.reason for b in report.backends if b.status == "skipped"}
    assert {"ort (fp16)", "ort (bf16)", "ort (fp64)"} <= set(skipped) and not any(n.startswith("torch") for n in skipped), skipped
    assert "bfloat16" in skipped["ort (bf16)"] and report.passed
    assert {r.dtype for r in report.rows if r.backend == "ort"} == {"fp32"}
    torch_rows = [r for r in report.rows if r.backend == "torch"]
    assert {r.dtype for r in torch_rows} == {"fp32", "fp16", "bf16", "fp64"}
    names = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}
    # against the reference, fp32 and fp16 are held to the calibrated rule (the reference's arithmetic in that
    # dtype sets the floor); bf16 and fp64 have no such run and keep their dtype's fixed tolerance
    calibrated = [r for r in torch_rows if r.floor is not None]
    assert {(r.dtype, r.against) for r in calibrated} == {("fp32", "reference"), ("fp16", "reference")}
    assert all(r.ratio is not None and r.ratio <= r.multiple and r.stat == "max" for r in calibrated)
    assert all((r.atol, r.rtol) == (BY_DTYPE[names[r.dtype]].atol, BY_DTYPE[names[r.dtype]].rtol) for r in torch_rows if r.floor is None)
    # each ran in its own precision: fp64 agrees with the reference to rounding, bf16 only to bf16's
    worst = {d: max(r.max_abs for r in torch_rows if r.dtype == d) for d in names}
    assert worst["fp64"] < 1e-12 < worst["fp32"] < 1e-5 < worst["fp16"] < worst["bf16"], worst


def test_bf16_through_torch_passes_and_a_planted_gate_swap_fails(stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """--dtype bf16 runs torch in bfloat16 against the float64 reference at bf16's tolerance: a
    correct stack passes at every length, and the same stack with two gates swapped fails."""
    from rnnx.engines import torch as torch_engine

    pytest.importorskip("torch")
    source, model, weights = stack
    lens = (1, 9, 33, 64)
    report = verify(source, model, backends=["ort", "torch"], seq_lens=lens, batches=(1, 4), dtypes=("fp32", "bf16"), seed=7)
    bf16 = [r for r in report.rows if r.dtype == "bf16"]
    assert report.passed and bf16 and {r.backend for r in bf16} == {"torch"} and {r.seq_len for r in bf16} == set(lens)
    assert max(r.max_abs for r in bf16) > 1e-4  # it did run in bfloat16, not float32

    build = torch_engine.build_module
    monkeypatch.setattr(torch_engine, "build_module", lambda w, batch_first=False: build(_forum_packed(w), batch_first))
    planted = verify(source, model, backends=["ort", "torch"], seq_lens=lens, batches=(1, 4), dtypes=("fp32", "bf16"), seed=7)
    assert not planted.passed
    assert not all(r.passed for r in planted.rows if r.dtype == "bf16" and r.backend == "torch")
    assert all(r.passed for r in planted.rows if r.backend == "ort" and r.against == "reference")  # the file itself is right


def test_a_dtype_the_file_under_test_runs_at_none_is_not_a_verdict(stack) -> None:
    source, model, _ = stack
    out = _cli(model, "--against", source, "--dtype", "bf16", "--backends", "ort,torch")
    assert out.returncode == 2 and "nothing was verified" in out.stderr and "bfloat16" in out.stderr, out.stderr
    bad = _cli(model, "--against", source, "--dtype", "fp8")
    assert bad.returncode == 2 and "fp32, fp16, bf16, fp64" in bad.stderr


def _refused_by_onnx_runtime(folder: Path, weights: RNNWeights) -> Path:
    """A well-formed ONNX file with an operator ONNX Runtime does not know."""
    model = build_stack_model(weights, sequence_lens=True)
    model.graph.node.append(onnx.helper.make_node("NoSuchOp", ["X"], ["extra"], domain="com.example"))
    model.opset_import.append(onnx.helper.make_opsetid("com.example", 1))
    model.graph.output.append(onnx.helper.make_tensor_value_info("extra", onnx.TensorProto.FLOAT, None))
    path = folder / "refused.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("case", ["garbage", "missing", "refused", "torch_and_reference", "reference_only", "no_model"])
def test_a_verdict_needs_the_file_under_test_to_have_run(stack, tmp_path: Path, case: str) -> None:
    """Each of these once printed PASS (or an empty FAIL) without running the file: now bad input, exit 2."""
    source, model, weights = stack
    args: list[object] = []
    if case == "garbage":
        (tmp_path / "garbage.onnx").write_bytes(b"\x08\x07 not a model")
        args = [tmp_path / "garbage.onnx", "--against", source]
    elif case == "missing":
        args = [tmp_path / "missing.onnx", "--against", source]
    elif case == "refused":
        args = [_refused_by_onnx_runtime(tmp_path, weights), "--against", source]
    elif case == "torch_and_reference":
        args = [model, "--against", source, "--backends", "torch,reference"]
    elif case == "reference_only":
        args = [model, "--against", source, "--backends", "reference"]
    else:
        args = ["--against", source, "--backends", "ort,torch,reference"]
    out = _cli(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "PASS" not in out.stdout and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_default_shapes_shrink_for_large_models_and_keep_batch_one() -> None:
    from rnnx.verify.run import LARGE_MODEL, _default_shapes

    small = RNNWeights.random(RNNSpec.parse("lstm,input=8,hidden=16"))
    large = RNNWeights.random(RNNSpec.parse("lstm,input=1024,hidden=1024,layers=3,bidirectional"))
    assert large.num_parameters() > LARGE_MODEL > small.num_parameters()
    assert _default_shapes(small, None, None) == ([1, 17, 64], [1, 8], False)
    lens, batches, scaled = _default_shapes(large, None, None)
    assert scaled and 1 in batches and max(lens) > 1 and len(lens) < 3
    assert _default_shapes(large, [5, 9], [2]) == ([5, 9], [2], False)  # what the user asks for runs as asked
