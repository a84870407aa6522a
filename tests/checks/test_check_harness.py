"""rnnx.check, the one harness: runners from the registry run real files, the judge holds them to
the float64 reference under the calibrated or the fixed rule, and the report's verdict. Each way a
check could pass without checking fails: no rows, an empty output, a truncated one, a truth that
was not run, NaN; and a planted mistake fails where the honest file passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rnnx.check import Case, Report, Rule, judge, judge_outputs
from rnnx.check.runners import RUNNERS, Subject, make, running
from rnnx.check.truths import TorchTruth, stack_honest, stack_reference
from rnnx.engines.runner import Runner
from rnnx.errors import RNNXError
from rnnx.formats.onnx_build import build_stack_model, save_model
from rnnx.parity import random_inputs
from rnnx.spec import RNNSpec
from rnnx.tolerance import BY_DTYPE, Tolerance, Tolerances
from rnnx.weights import RNNWeights

SHAPES = ((1, 1), (6, 3), (13, 2))  # (seq_len, batch): batch 1, and lengths the file was never built at


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> tuple[RNNWeights, Path]:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=5,layers=2"), seed=4)
    path = tmp_path_factory.mktemp("harness") / "stack.onnx"
    save_model(build_stack_model(weights), path)
    return weights, path


def _check(weights: RNNWeights, path: Path, truth_weights: RNNWeights, trusted: bool, tolerances: Tolerances | None = None) -> Report:
    """The file run by the registry's ONNX Runtime, each case against the float64 reference of ``truth_weights``."""
    report = Report()
    with running("ort", Subject(weights, path, trusted=trusted)) as runner:
        for k, (T, B) in enumerate(SHAPES):
            case = Case.of(f"T={T}, B={B}", random_inputs(weights, T, B, seed=100 + k))
            want = stack_reference(truth_weights, case.feeds)
            honest = stack_honest(truth_weights, case.feeds, "float32")
            rules = {name: Rule.of(tolerances, name, "float32", honest.get(name)) for name in want}
            report.rows += judge_outputs(runner(case.feeds), want, rules, case=case.name)
    return report


@pytest.mark.parametrize("trusted", [True, False], ids=["in process", "isolated"])
def test_the_file_passes_against_the_reference_and_a_planted_mistake_fails(stack: tuple[RNNWeights, Path], trusted: bool) -> None:
    weights, path = stack
    report = _check(weights, path, weights, trusted)
    assert report.passed, report.failure()
    assert len(report.rows) == 3 * len(SHAPES) and all(r.floor is not None for r in report.rows)  # calibrated: nobody set a tolerance
    assert all(r.compared > 0 for r in report.rows)
    planted = RNNWeights(weights.spec, {**weights.tensors, "l1.forward.bW.f": np.zeros_like(weights.tensors["l1.forward.bW.f"])})  # one bias dropped
    wrong = _check(weights, path, planted, trusted)
    assert not wrong.passed and wrong.first_failure() is not None and wrong.first_failure().ratio > 16


def test_a_tolerance_set_holds_instead_of_the_floor(stack: tuple[RNNWeights, Path]) -> None:
    weights, path = stack
    report = _check(weights, path, weights, True, Tolerances.parse(atol=["Y:0.5"]))
    y = [r for r in report.rows if r.output == "Y"]
    assert y and all(r.floor is None and r.atol == 0.5 for r in y)  # fixed: the caller set Y's
    assert all(r.floor is not None for r in report.rows if r.output != "Y")  # the others stay calibrated
    exact = _check(weights, path, weights, True, Tolerances({"": Tolerance(0.0, 0.0)}))
    assert not exact.passed  # float32 against float64 with no room at all: the fixed rule was applied


def test_a_report_with_no_rows_fails() -> None:
    report = Report()
    assert not report.passed and not report and report.failure() == "nothing was compared"


def test_an_empty_output_fails() -> None:
    row = judge(np.zeros((0, 3), np.float32), np.zeros((0, 3)), Rule.of(None, "Y", "float32", np.zeros((0, 3), np.float32)), output="Y")
    assert not row.passed and row.compared == 0 and "nothing was compared" in row.note
    assert not Report([row]).passed


def test_a_truncated_output_fails() -> None:
    rng = np.random.default_rng(0)
    want = rng.standard_normal((7, 2, 4))
    row = judge(want[:5].astype(np.float32), want, Rule(BY_DTYPE["float32"]), output="Y")  # two steps missing
    assert not row.passed and "shape" in row.note
    missing = judge_outputs({"Y": want}, {"Y": want, "h_n": want[-1]}, Rule(BY_DTYPE["float32"]))
    assert [r.passed for r in missing] == [True, False] and missing[1].note == "the run did not return this output"


def test_a_truth_that_did_not_run_fails() -> None:
    got = np.ones((3, 1, 2), np.float32)
    row = judge(got, None, Rule(BY_DTYPE["float32"]), output="Y")
    assert not row.passed and "truth was not run" in row.error
    rows = judge_outputs({"Y": got}, None, Rule(BY_DTYPE["float32"]))
    assert len(rows) == 1 and not Report(rows).passed and "truth was not run" in Report(rows).failure()


def test_nan_fails_in_the_run_and_in_the_truth() -> None:
    rng = np.random.default_rng(1)
    want = rng.standard_normal((4, 3))
    got = want.astype(np.float32)
    got[2, 1] = np.nan
    assert not judge(got, want, Rule(BY_DTYPE["float32"])).passed
    assert not judge(got, want, Rule.of(None, "", "float32", want.astype(np.float32))).passed  # calibrated too
    nan_truth = np.full((4, 3), np.nan)
    row = judge(np.full((4, 3), np.nan, np.float32), nan_truth, Rule(BY_DTYPE["float32"]))
    assert not row.passed and row.compared == 0  # NaN against NaN compares nothing


def test_the_report_names_the_worst_failure_and_dumps_atomically(tmp_path: Path) -> None:
    want = np.linspace(-1, 1, 12).reshape(3, 4)
    rows = [judge(want + 1e-9, want, Rule(BY_DTYPE["float32"]), output="a"),
            judge(want + 0.5, want, Rule(BY_DTYPE["float32"]), output="b"),
            judge(want + 0.1, want, Rule(BY_DTYPE["float32"]), output="c")]
    report = Report(rows)
    assert not report.passed and report.first_failure() is rows[1]
    report.dump(tmp_path / "r.json")
    found = json.loads((tmp_path / "r.json").read_text())
    assert found["passed"] is False and [r["output"] for r in found["rows"]] == ["a", "b", "c"]
    assert found["rows"][1]["stats"]["max_abs"] == pytest.approx(0.5)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left beside it
    assert rows[0].to_json(["output", "p99_abs", "stat", "passed"]) == {"output": "a", "p99_abs": pytest.approx(1e-9), "stat": "elemwise",
                                                                         "passed": True}


def test_the_registry_makes_each_backend_and_refuses_an_unknown_one(stack: tuple[RNNWeights, Path]) -> None:
    weights, path = stack
    feed = random_inputs(weights, 4, 1, seed=9)
    want = stack_reference(weights, feed)
    for backend in ("reference", "onnx-reference"):
        with running(backend, Subject(weights, path, trusted=True)) as runner:
            assert Report(judge_outputs(runner(feed), want, Rule(BY_DTYPE["float32"]))).passed, backend
    with pytest.raises(RNNXError, match="unknown backend 'nope'"):
        make("nope", Subject(weights))
    with pytest.raises(RNNXError, match="expected a model file"):
        make("ort", Subject(weights))
    assert {"ort", "trt", "torch", "cudnn", "reference", "onnx-reference", "jax", "flax", "keras"} <= set(RUNNERS)


@pytest.mark.parametrize("trusted", [True, False], ids=["in process", "isolated"])
def test_onnx_reference_is_a_runner_in_process_as_in_its_child(stack: tuple[RNNWeights, Path], trusted: bool) -> None:
    # In process it was ONNX's bare evaluator: no input_names, device or precision to read.
    weights, path = stack
    with running("onnx-reference", Subject(weights, path, trusted=trusted)) as runner:
        assert isinstance(runner, Runner), type(runner).__name__
        assert runner.input_names == ["X", "h0", "c0"] and runner.output_names == ["Y", "h_n", "c_n"]


def test_the_isolated_runner_is_closed_when_the_block_ends(stack: tuple[RNNWeights, Path]) -> None:
    weights, path = stack
    with running("ort", Subject(weights, path)) as runner:
        child = runner._child  # type: ignore[attr-defined]
        assert child.poll() is None
    assert child.wait(timeout=10) is not None


def test_torch_in_float64_falls_back_with_a_note() -> None:
    torch = pytest.importorskip("torch")

    class MakesFloat32(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) @ torch.ones(2, 2)  # a float32 matrix of its own: its float64 copy raises

    notes: list[str] = []
    truth = TorchTruth(MakesFloat32(), notes, "held to torch in float32")
    x = torch.randn(2, 3, dtype=torch.float64)
    assert truth.float64(lambda m: m(x)) is None and truth.model64 is None
    assert len(notes) == 1 and "float64 copy of the torch model raised RuntimeError" in notes[0] and notes[0].endswith("held to torch in float32")
    assert truth.float64(lambda m: m(x)) is None and len(notes) == 1  # said once
    fine = TorchTruth(torch.nn.Linear(3, 2), notes)
    assert fine.float64(lambda m: m(x)).dtype == torch.float64
