"""The calibrated rule: each check holds a file to a multiple of this model's own rounding floor,
so a layout mistake that a fixed atol/rtol passes behind a head (a Linear and a log-softmax)
fails; and the export's layer-by-layer check fails a wrong layer that the outputs hide."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import rnnx
from rnnx import RNNSpec, RNNWeights, parity, reference
from rnnx.layouts import onnx as onnx_layout
from rnnx.tolerance import BY_DTYPE, CALIBRATED_MULTIPLE, Tolerances, compare_arrays, compare_calibrated, rounding_floor
from rnnx.weights import tensor_name
from tests.helpers import model_file

torch = pytest.importorskip("torch")

MODEL_CODE = '''
import torch

class Recognizer(torch.nn.Module):
    """A Conv1d front end, a 2-layer bidirectional LSTM, a Linear and a log-softmax (CTC-style)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(8, 16, 3, padding=1)
        self.rnn = torch.nn.LSTM(16, 32, num_layers=2, bidirectional=True)
        self.fc = torch.nn.Linear(64, 20)

    def forward(self, x):  # x: (batch, 8, time)
        y, _ = self.rnn(self.conv(x).permute(2, 0, 1))
        return torch.log_softmax(self.fc(y), -1)

    def example_inputs(self):
        return (torch.randn(2, 8, 30),)
'''


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, Path]:
    tmp = tmp_path_factory.mktemp("recognizer")
    code = tmp / "recognizer.py"
    namespace = model_file(code, MODEL_CODE)  # the model code above, as a user's file
    model = namespace["Recognizer"]().eval()  # type: ignore[operator]
    path = tmp / "good.onnx"
    report = rnnx.export(model, (torch.randn(2, 8, 30),), path)
    assert report.passed and path.exists()
    return code, model, path


def _with_fo_swapped(src: Path, dst: Path) -> None:
    """The issue's planted bug: the f and o rows of layer 1's forward W swapped (ONNX order i, o, f, c)."""
    proto = onnx.load(str(src))
    lstm = [n for n in proto.graph.node if n.op_type == "LSTM"][1]
    init = {i.name: i for i in proto.graph.initializer}
    w = numpy_helper.to_array(init[lstm.input[1]]).copy()
    H = w.shape[1] // 4
    w[0, H:2 * H], w[0, 2 * H:3 * H] = w[0, 2 * H:3 * H].copy(), w[0, H:2 * H].copy()
    init[lstm.input[1]].CopyFrom(numpy_helper.from_array(w, lstm.input[1]))
    onnx.save(proto, str(dst))


def test_the_issue_bug_behind_a_head_fails_verify_on_the_outputs(recognizer, tmp_path: Path) -> None:
    """Under 1e-4 / 1e-3 every output passed (1.4e-3 .. 2.3e-3 max abs, rel <= 6.7e-4); calibrated, it fails."""
    from rnnx.verify.models import verify_loaded

    _, model, good = recognizer
    bad = tmp_path / "bad.onnx"
    _with_fo_swapped(good, bad)
    report = verify_loaded(bad, model, None, "recognizer")
    judged = [r for r in report.rows if r.against == "torch float64"]
    assert judged and not report.passed
    assert all(r.stats.floor is not None and not r.stats.passed for r in judged)
    worst = max(judged, key=lambda r: r.stats.max_abs)
    assert worst.stats.ratio > 10 * CALIBRATED_MULTIPLE, worst.stats  # far outside honest arithmetic
    assert report.first_drift is not None and report.first_drift.truth.endswith("'rnn' layer 1")


def test_the_honest_file_passes_with_its_ratio_shown(recognizer) -> None:
    from rnnx.verify.models import verify_loaded

    _, model, good = recognizer
    report = verify_loaded(good, model, None, "recognizer")
    judged = [r for r in report.rows if r.against == "torch float64"]
    assert report.passed and judged
    assert all(r.stats.ratio is not None and r.stats.ratio <= CALIBRATED_MULTIPLE / 2 for r in judged), [r.stats.ratio for r in judged]
    assert all(la.status == "ok" and la.ratio is not None for la in report.layers)
    assert "rounding floor" in str(report) or "x allowed" in str(report) or report.passed


def test_verify_cli_prints_the_floor_and_fails(recognizer, tmp_path: Path) -> None:
    from rnnx.cli.main import main

    code_path, _, good = recognizer
    bad = tmp_path / "bad.onnx"
    _with_fo_swapped(good, bad)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["verify", str(bad), "--against", f"{code_path}:Recognizer"])
    assert code == 1, out.getvalue()
    assert "the rounding floor" in out.getvalue() and "FAIL" in out.getvalue()


def _planted_pieces(layer: int, direction: str, gate: str, scale: float):
    original = onnx_layout.layer_pieces

    def planted(weights: RNNWeights, k: int):
        if k == layer:
            name = tensor_name(layer, direction, "W", gate)
            weights = RNNWeights(weights.spec, {**weights.tensors, name: weights.tensors[name] * np.float32(scale)})
        return original(weights, k)
    return planted


def test_export_fails_a_one_percent_scale_on_its_outputs(recognizer, tmp_path: Path) -> None:
    _, model, _ = recognizer
    path = tmp_path / "scaled.onnx"
    with mock.patch.object(onnx_layout, "layer_pieces", _planted_pieces(1, "forward", "i", 1.01)):
        with pytest.raises(rnnx.ExportCheckFailed) as caught:
            rnnx.export(model, (torch.randn(2, 8, 30),), path)
    assert "the rounding floor" in str(caught.value) and not path.exists()


def test_export_layer_check_fails_a_wrong_layer_the_outputs_hide(recognizer, tmp_path: Path) -> None:
    """With the outputs' tolerance set loose (1e-1), only the layer check can see the mistake."""
    _, model, _ = recognizer
    path = tmp_path / "scaled.onnx"
    loose = Tolerances.parse(["1e-1"], ["1e-1"])
    with mock.patch.object(onnx_layout, "layer_pieces", _planted_pieces(1, "forward", "i", 1.01)):
        with pytest.raises(rnnx.ExportCheckFailed) as caught:
            rnnx.export(model, (torch.randn(2, 8, 30),), path, tolerances=loose)
    message = str(caught.value)
    assert "every output within tolerance, but layer check" in message, message
    assert "l1.forward.W.i (every row scaled by 1.01)" in message and not path.exists()
    report = caught.value.report
    assert [la["status"] for la in report.check.layers] == ["ok", "drifts"]
    assert report.check.to_json()["layer_failure"]


def test_export_layer_check_passes_honest_exports_and_is_off_without_check(recognizer, tmp_path: Path) -> None:
    _, model, _ = recognizer
    report = rnnx.export(model, (torch.randn(1, 8, 7),), tmp_path / "one.onnx")
    assert report.passed and [la["status"] for la in report.check.layers] == ["ok", "ok"]
    unchecked = rnnx.export(model, (torch.randn(1, 8, 7),), tmp_path / "unchecked.onnx", check=False)
    assert unchecked.check is None


# --- the rule itself -------------------------------------------------------------------------------


def test_rounding_floor_is_the_honest_distance_never_below_one_epsilon() -> None:
    want = np.array([0.5, -2.0, 3.0])
    assert rounding_floor(want + [0.0, 1e-6, 0.0], want, "float32") == pytest.approx(1e-6)
    assert rounding_floor(want, want, "float32") == pytest.approx(3.0 * 2.0 ** -23)  # the largest magnitude's epsilon
    assert rounding_floor(want * 1e-3, want * 1e-3, "float32") == pytest.approx(2.0 ** -23)  # never below epsilon at 1
    assert rounding_floor(want, want, "float64") is None  # no more exact run than float64
    assert rounding_floor(want[:2], want, "float32") is None and rounding_floor(want * np.inf, want, "float32") is None


def test_compare_calibrated_holds_to_the_multiple_and_falls_back_to_the_fixed_rule() -> None:
    rng = np.random.default_rng(3)
    want = rng.standard_normal(50)
    honest = want + rng.standard_normal(50) * 1e-7
    floor = rounding_floor(honest, want, "float32")
    inside = compare_calibrated(want + floor * (CALIBRATED_MULTIPLE - 1), want, honest, "float32", BY_DTYPE["float32"])
    outside = compare_calibrated(want + floor * (CALIBRATED_MULTIPLE + 1), want, honest, "float32", BY_DTYPE["float32"])
    assert inside.passed and not outside.passed and inside.floor == floor and outside.ratio > CALIBRATED_MULTIPLE
    # what the fixed rule passes, the calibrated one does not
    assert compare_arrays(want + 5e-5, want, BY_DTYPE["float32"]).passed
    assert not compare_calibrated(want + 5e-5, want, honest, "float32", BY_DTYPE["float32"]).passed
    fixed = compare_calibrated(want + 5e-5, want, None, "float32", BY_DTYPE["float32"])
    assert fixed.passed and fixed.floor is None


def test_a_tolerance_the_user_sets_turns_the_rule_off_for_those_outputs() -> None:
    assert Tolerances().calibrates("Y")
    per_output = Tolerances.parse(["Y:1e-3"])
    assert not per_output.calibrates("Y") and per_output.calibrates("h_n")
    assert not Tolerances.parse(None, ["1e-2"]).calibrates("h_n")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_reference_runs_its_arithmetic_in_a_lower_dtype(dtype: type) -> None:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=5,hidden=7,layers=2,bidirectional"), seed=1)
    feed = parity.random_inputs(weights, 9, 3, seed=2)
    exact = reference.forward(weights, feed["X"], feed["h0"], feed["c0"])
    low = reference.forward(weights, feed["X"], feed["h0"], feed["c0"], dtype=dtype)
    assert low.y.dtype == dtype and low.c_n is not None and low.c_n.dtype == dtype
    gap = np.abs(low.y.astype(np.float64) - exact.y).max()
    assert 0 < gap < 50 * np.finfo(dtype).eps  # rounded, and by rounding only


def test_convert_reports_the_floor_for_onnx(tmp_path: Path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=6,hidden=8,layers=2"), seed=4)
    source = tmp_path / "gru.safetensors"
    rnnx.save(weights, source)
    from rnnx.pipelines.convert import convert

    result = convert(source, tmp_path / "gru.onnx")
    rows = [r for r in result.report.rows if r.backend == "ort"]
    assert result.written and rows and all(r.floor is not None and r.ratio <= CALIBRATED_MULTIPLE for r in rows)
