"""A whole-model report prints every row it holds, a row whose truth did not run included."""

from __future__ import annotations

import numpy as np

from rnnx.check import Case, Rule, judge
from rnnx.tolerance import Tolerance
from rnnx.verify.model_report import WholeModelReport


def test_a_row_without_statistics_prints_as_a_failure_with_its_reason() -> None:
    rule = Rule(Tolerance(1e-5, 1e-5))
    ran = judge(np.ones(3), np.ones(3), rule, case="seq 4", output="y", against="torch float32")
    missing = judge(np.ones(3), None, rule, case="seq 4", output="y", against="torch float64")
    assert missing.stats is None  # the row this test is about: judge's own, for a truth that did not run
    report = WholeModelReport("model.onnx", "Net", cases=[Case("seq 4")], rows=[missing, ran])
    text = str(report)
    assert "FAIL: the truth was not run" in text
    assert "max abs 0.00e+00" in text  # the float32 row beside it still reads
    assert text.endswith("FAIL") and not report.passed
