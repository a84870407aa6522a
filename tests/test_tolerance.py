"""One comparator, Polygraphy's semantics: what passes, what fails, and that every checking verb's
--atol/--rtol/--check-error-stat reach its check."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError, parity
from rnnx.check import stack
from rnnx.formats.onnx_build import build_stack_model
from rnnx.tolerance import BY_DTYPE, STATS, Tolerance, Tolerances, compare_arrays, parse_tol_items
from tests.helpers import rnnx_in_process

EXAMPLE = Path(__file__).parents[1] / "examples" / "encoder.safetensors"
F32 = Tolerance(1e-4, 1e-3)


def run(*args: object) -> subprocess.CompletedProcess[str]:
    # in-process: these tests are about the options, not the process (each verb keeps a
    # subprocess test in its own module: tests/test_cli.py, graphs/test_lower.py, graphs/test_fuse.py, verify/test_verify.py)
    return rnnx_in_process(*args)


# Polygraphy's elementwise rule: an element fails only past atol AND past rtol.


def test_within_atol_but_outside_rtol_passes() -> None:
    stats = compare_arrays([1e-6 + 5e-5], [1e-6], F32)  # abs 5e-5 <= 1e-4; rel 50 > 1e-3
    assert stats.passed and stats.max_rel > 1 and stats.max_abs < F32.atol


def test_within_rtol_but_outside_atol_passes() -> None:
    stats = compare_arrays([1000.5], [1000.0], F32)  # abs 0.5 > 1e-4; rel 5e-4 <= 1e-3
    assert stats.passed and stats.max_abs == pytest.approx(0.5)


def test_outside_both_fails() -> None:
    stats = compare_arrays([1.0, 2.0, 3.01], [1.0, 2.0, 3.0], F32)
    assert not stats.passed and stats.max_abs == pytest.approx(0.01) and stats.max_rel == pytest.approx(0.01 / 3)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_where_the_reference_is_finite_fails(bad: float) -> None:
    stats = compare_arrays([0.5, bad], [0.5, 0.25], Tolerance(1e9, 1e9))  # whatever the tolerance
    assert not stats.passed and "non-finite" in stats.note


def test_nan_where_the_reference_has_nan_passes() -> None:
    assert compare_arrays([np.nan, 1.0], [np.nan, 1.0], F32).passed


def test_a_zero_in_the_reference_divides_by_epsilon() -> None:
    assert compare_arrays([5e-5], [0.0], F32).passed  # within atol
    stats = compare_arrays([1e-3], [0.0], F32)
    assert not stats.passed and stats.max_rel > 1e12


def test_shape_mismatch_fails_with_a_note() -> None:
    stats = compare_arrays(np.zeros((2, 3)), np.zeros((3, 2)), Tolerance(1.0, 1.0))
    assert not stats.passed and "shape [2, 3], expected [3, 2]" in stats.note


def test_max_and_mean_statistics_differ_on_one_outlier() -> None:
    """999 exact elements and one off by 1: max (and elemwise) fail, mean, median and p99 pass."""
    want = np.ones(1000)
    got = want.copy()
    got[17] += 1.0
    verdicts = {stat: compare_arrays(got, want, Tolerance(0.01, 0.01, stat)).passed for stat in STATS}
    assert verdicts == {"elemwise": False, "max": False, "mean": True, "median": True, "quantile": True}
    stats = compare_arrays(got, want, Tolerance(0.01, 0.01, "mean"))
    assert stats.max_abs == 1.0 and stats.mean_abs == pytest.approx(1e-3) and stats.quantile_abs < 0.01
    # a statistic needs both its absolute and its relative value past their tolerances
    assert compare_arrays(got, want, Tolerance(0.0, 2.0, "max")).passed and not compare_arrays(got, want, Tolerance(0.0, 0.5, "max")).passed


def test_quantile_is_the_99th_percentile() -> None:
    errors = np.arange(1000) / 1000.0
    stats = compare_arrays(errors, np.zeros(1000), Tolerance(0.995, 0.0, "quantile"))
    assert stats.quantile_abs == pytest.approx(np.quantile(errors, 0.99)) and stats.passed
    assert not compare_arrays(errors, np.zeros(1000), Tolerance(0.98, 0.0, "quantile")).passed
    assert str(Tolerance(1e-3, 1e-2, "quantile")) == "atol 0.001, rtol 0.01, p99"


# Tolerances: per output, per dtype, parsed from Polygraphy-style items.


def test_per_output_override_applies_to_that_output_only() -> None:
    tolerances = Tolerances.parse(["Y:0"], ["Y:0"])
    assert tolerances.get("Y") == Tolerance(0.0, 0.0) and tolerances.get("h_n") == BY_DTYPE["float32"]
    want = {"Y": np.full((3, 2, 4), 0.5), "h_n": np.full((1, 2, 4), 0.5)}
    got = {k: v + 1e-7 for k, v in want.items()}
    rows = {r.output: r for r in stack.compare("ort", got, want, 3, 2, tolerances=tolerances)}
    assert not rows["Y"].passed and rows["h_n"].passed
    assert (rows["Y"].atol, rows["h_n"].atol) == (0.0, BY_DTYPE["float32"].atol)
    assert all(r.passed for r in stack.compare("ort", got, want, 3, 2))  # the default lets 1e-7 through


def test_a_field_not_given_keeps_the_dtype_of_the_run() -> None:
    tolerances = Tolerances.parse(rtol=["0.5"], stat=["h_n:mean"])
    for dtype, base in BY_DTYPE.items():
        assert tolerances.get("Y", dtype) == Tolerance(base.atol, 0.5)
        assert tolerances.get("h_n", dtype) == Tolerance(base.atol, 0.5, "mean")
    assert Tolerances.parse(["2e-3"], dtype="float16").by_output == {"": Tolerance(2e-3, BY_DTYPE["float16"].rtol)}
    assert not Tolerances() and Tolerances.parse(["1"]) and Tolerances().get("Y", "bfloat16") == BY_DTYPE["bfloat16"]


def test_names_may_hold_colons() -> None:
    tolerances = Tolerances.parse(["encoder:out:0.5", "1e-3"])
    assert tolerances.get("encoder:out").atol == 0.5 and tolerances.get("other").atol == 1e-3


@pytest.mark.parametrize(
    ("atol", "rtol", "stat", "fragment"),
    [(["abc"], None, None, "atol: 'abc'"), (["Y:-1"], None, None, "non-negative"), (None, ["nan"], None, "rtol: 'nan'"),
     (None, ["inf"], None, "finite"), (None, None, ["p50"], "check_error_stat: 'p50'"), (None, None, ["Y:"], "elemwise, max")],
)
def test_bad_values_are_refused(atol, rtol, stat, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment.replace("(", r"\(")):
        Tolerances.parse(atol, rtol, stat)


def test_older_forms_read_the_one_table() -> None:
    assert parity.TOLERANCES == {name: (t.atol, t.rtol) for name, t in BY_DTYPE.items()}
    assert parse_tol_items(["ort=1e-3,1e-2", "torch=0,0"]) == {"ort": Tolerance(1e-3, 1e-2), "torch": Tolerance(0, 0)}
    for bad in ("ort=1e-3", "ort=a,b", "ort=-1,0", "ort=nan,0"):
        with pytest.raises(RNNXError, match="^backend_tolerances: "):
            parse_tol_items([bad])


@pytest.mark.parametrize("spec", ["lstm,input=8,hidden=16,layers=2", "lstm,input=4,hidden=5,layers=2,bidirectional", "gru,input=8,hidden=32",
                                  "lstm,input=8,hidden=16,proj=4"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_each_dtype_tolerance_lets_its_rounding_through_and_not_a_gate_swap(spec: str, dtype: str) -> None:
    """torch computing in float16 or bfloat16 passes its dtype's tolerance at lengths 1 to 64;
    held against the reference of the same weights with two gates swapped, it fails."""
    pytest.importorskip("torch")
    from rnnx.engines.torch import TorchRunner
    from rnnx.verify.run import round_to

    weights = RNNWeights.random(RNNSpec.parse(spec), seed=4)
    gates = weights.spec.gates
    swap = {gates[-1]: gates[-2], gates[-2]: gates[-1]}
    swapped = RNNWeights(weights.spec, {n: weights[".".join(n.split(".")[:3] + [swap.get(n.split(".")[3], n.split(".")[3])]) if n.count(".") == 3 and
                                                   n.split(".")[2] != "P" else n] for n in weights})
    runner = TorchRunner(weights, dtype=dtype)
    for T in (1, 17, 64):
        inputs = {k: round_to(v, dtype) for k, v in parity.random_inputs(weights, T, 4, seed=T).items()}
        got = runner(inputs)
        exact = {k: v.astype(np.float64) for k, v in inputs.items()}
        good = stack.compare("torch", got, parity.reference_outputs(weights, exact), T, 4, dtype)
        bad = stack.compare("torch", got, parity.reference_outputs(swapped, exact), T, 4, dtype)
        assert all(r.passed for r in good), stack.StackReport(good)
        assert not all(r.passed for r in bad), stack.StackReport(bad)
        assert {r.atol for r in good} == {BY_DTYPE[dtype].atol}


def test_round_to_bfloat16_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    from rnnx.verify.run import round_to

    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 10.0
    want = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(round_to(x, "bfloat16"), want)


# The options reach every checking verb's check.


def test_convert_with_zero_tolerance_fails_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "enc.onnx"
    result = run("convert", EXAMPLE, "-o", out, "--atol", "0", "--rtol", "0")
    assert result.returncode == 1, result.stderr
    assert "parity check failed: ort" in result.stderr and "atol 0, rtol 0, elemwise" in result.stderr
    assert list(tmp_path.iterdir()) == []
    loose = run("convert", EXAMPLE, "-o", out, "--atol", "1", "--json")
    assert loose.returncode == 0, loose.stderr
    check = json.loads(loose.stdout)["check"]
    assert check["passed"] and check["tolerances"] == {"*": {"atol": 1.0}}
    assert {(r["atol"], r["rtol"], r["stat"]) for r in check["rows"]} == {(1.0, BY_DTYPE["float32"].rtol, "elemwise")}
    assert all(r["mean_abs"] <= r["p99_abs"] <= r["max_abs"] for r in check["rows"])


def test_convert_per_output_and_statistic(tmp_path: Path) -> None:
    """Y alone at zero fails; with the mean as the statistic and a loose rtol it passes."""
    out = tmp_path / "enc.onnx"
    strict = run("convert", EXAMPLE, "-o", out, "--atol", "Y:0", "--rtol", "Y:0", "--json")
    assert strict.returncode == 1
    rows = json.loads(strict.stdout)["check"]["rows"]
    assert {r["output"] for r in rows if not r["passed"]} == {"Y"}
    mean = run("convert", EXAMPLE, "-o", out, "--atol", "Y:0", "--rtol", "Y:0.01", "--check-error-stat", "Y:mean", "--json")
    assert mean.returncode == 0, mean.stderr
    assert {r["stat"] for r in json.loads(mean.stdout)["check"]["rows"] if r["output"] == "Y"} == {"mean"}


def _stack(tmp_path: Path) -> tuple[Path, Path]:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=4,hidden=5,layers=2,bidirectional"), seed=3, scale=0.9)
    source, model = tmp_path / "w.safetensors", tmp_path / "m.onnx"
    rnnx.save(weights, source)
    onnx.save(build_stack_model(weights, sequence_lens=True), str(model))
    return source, model


def test_lower_with_zero_tolerance_fails_and_writes_nothing(tmp_path: Path) -> None:
    _, model = _stack(tmp_path)
    out = tmp_path / "lowered.onnx"
    strict = run("lower", model, "-o", out, "--atol", "0", "--rtol", "0")
    assert strict.returncode == 1 and "atol 0, rtol 0, elemwise" in strict.stderr and not out.exists(), strict.stderr
    loose = run("lower", model, "-o", out, "--atol", "1e-3", "--check-error-stat", "max", "--json")
    assert loose.returncode == 0, loose.stderr
    rows = json.loads(loose.stdout)["check"]["rows"]
    assert rows and {(r["backend"], r["atol"], r["stat"]) for r in rows} == {("ort", 1e-3, "max")} and out.exists()


def test_fuse_takes_the_options(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from tests.exporters.models import SteppedCell

    torch.manual_seed(1)
    src, out = tmp_path / "unrolled.onnx", tmp_path / "fused.onnx"
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        torch.onnx.export(SteppedCell().eval(), (torch.randn(4, 3, 4),), str(src), dynamo=False, opset_version=17)
    strict = run("fuse", src, "-o", out, "--atol", "0", "--rtol", "0")
    assert strict.returncode == 1 and "atol 0, rtol 0" in strict.stderr and not out.exists(), strict.stderr
    loose = run("fuse", src, "-o", out, "--rtol", "0.5", "--json")
    assert loose.returncode == 0, loose.stderr
    assert {r["rtol"] for r in json.loads(loose.stdout)["check"]["rows"]} == {0.5}


def test_export_takes_the_options(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "m.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        torch.manual_seed(0)\n"
        "        self.rnn = torch.nn.LSTM(4, 6, num_layers=2)\n"
        "    def forward(self, x):\n"
        "        return self.rnn(x)[0]\n"
    )
    out = tmp_path / "m.onnx"
    strict = run("export", f"{tmp_path / 'm.py'}:M", "-o", out, "--input", "x:5x3x4", "--atol", "0", "--rtol", "0", "--json")
    assert strict.returncode == 1 and not out.exists(), strict.stderr
    check = json.loads(strict.stdout)["check"]
    assert (check["atol"], check["rtol"], check["stat"]) == (0.0, 0.0, "elemwise") and not check["passed"]
    assert "atol 0, rtol 0, elemwise" in strict.stderr
    loose = run("export", f"{tmp_path / 'm.py'}:M", "-o", out, "--input", "x:5x3x4", "--atol", "1e-3", "--json")
    assert loose.returncode == 0 and out.exists(), loose.stderr
    outputs = [o for c in json.loads(loose.stdout)["check"]["cases"] for o in c["outputs"]]
    assert outputs and {o["atol"] for o in outputs} == {1e-3} and all(o["mean_abs"] <= o["max_abs"] for o in outputs)


def test_verify_takes_the_options_and_tol_overrides_per_backend(tmp_path: Path) -> None:
    source, model = _stack(tmp_path)
    common = (model, "--against", source, "--backends", "ort,torch,reference", "--seq-lens", "5", "--batch", "2", "--json")
    strict = run("verify", *common, "--atol", "0", "--rtol", "0")
    assert strict.returncode == 1
    report = json.loads(strict.stdout)
    assert report["tolerances"]["given"] == {"*": {"atol": 0.0, "rtol": 0.0}} and not any(r["passed"] for r in report["rows"] if r["backend"] == "ort")
    # --tol loosens ort alone: torch (against the reference) still fails at zero
    override = run("verify", *common, "--atol", "0", "--rtol", "0", "--tol", "onnxruntime=1e-3,1e-3")
    rows = json.loads(override.stdout)["rows"]
    assert all(r["passed"] for r in rows if r["backend"] == "ort") and not all(r["passed"] for r in rows if r["backend"] == "torch")
    assert override.returncode == 1
    text = run("verify", *common[:-1], "--rtol", "h_n:0.5")
    assert text.returncode == 0, text.stderr
    assert "fp32 atol 0.0001, rtol 0.001, elemwise" in text.stdout and "p99 abs" in text.stdout and "h_n: {'rtol': 0.5}" in text.stdout


@pytest.mark.parametrize("verb", ["convert", "export", "fuse", "lower", "verify"])
@pytest.mark.parametrize(("option", "value"), [("--atol", "x"), ("--rtol", "Y:-2"), ("--check-error-stat", "p95")])
def test_a_bad_tolerance_is_one_line_exit_2_for_every_verb(tmp_path: Path, verb: str, option: str, value: str) -> None:
    source, model = _stack(tmp_path)
    args: dict[str, list[object]] = {
        "convert": [source, "-o", tmp_path / "x.onnx"],
        "export": [f"{tmp_path / 'nothing.py'}:M", "-o", tmp_path / "x.onnx", "--input", "2x3"],
        "fuse": [model, "-o", tmp_path / "x.onnx"],
        "lower": [model, "-o", tmp_path / "x.onnx"],
        "verify": [model, "--against", source],
    }
    (tmp_path / "nothing.py").write_text("raise SystemExit('not to be imported')\n")
    result = run(verb, *args[verb], option, value)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "x.onnx").exists()
