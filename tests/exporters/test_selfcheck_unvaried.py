"""Export's self-check holds verify's rule on dimensions it never varied, and a skipped case's
JSON never reads as passed (issue 49: a check that can pass without checking)."""

from __future__ import annotations

import numpy as np
import pytest

from rnnx.check import Case, Rule, judge
from rnnx.errors import RNNXError
from rnnx.exporters.selfcheck import EXAMPLE_CASE, SelfCheck, refuse_unvaried
from rnnx.exporters.shapes import Naming
from rnnx.tolerance import Tolerance

NAMING = Naming({}, {"batch": "batch", "seq": "length", "x_dim2": "other"}, {"x": ["batch", "seq", "x_dim2"]}, {})
NAN = "the torch model's own output is NaN or infinite on these inputs"


def _ran(name: str, sizes: dict[str, int]) -> Case:
    case = Case(name, sizes, {"x": [sizes["batch"], sizes["seq"], sizes["x_dim2"]]})
    row = judge(np.ones(3, np.float32), np.ones(3), Rule(Tolerance(1e-4, 1e-3)))
    row.labels = {"output": "y", "dtype": "float32"}
    case.rows.append(row)
    return case


def _skipped(name: str, sizes: dict[str, int]) -> Case:
    return Case(name, sizes, {}, skipped=NAN)


EXAMPLE = {"batch": 1, "seq": 5, "x_dim2": 3}


def test_a_length_that_only_skipped_cases_varied_is_refused_naming_it() -> None:
    cases = [_ran(EXAMPLE_CASE, EXAMPLE), _ran("batch=3", {**EXAMPLE, "batch": 3}), _skipped("seq=8", {**EXAMPLE, "seq": 8})]
    assert SelfCheck(cases=cases)  # every case that ran passed ...
    with pytest.raises(RNNXError, match=r"seq at 8 \(the torch model's own output is NaN.*--static x:1"):
        refuse_unvaried(cases, NAMING)  # ... but seq was never checked at another size


def test_a_dimension_varied_by_one_case_that_ran_is_checked() -> None:
    cases = [_ran(EXAMPLE_CASE, EXAMPLE), _skipped("all larger", {"batch": 3, "seq": 8, "x_dim2": 5}), _ran("seq=8", {**EXAMPLE, "seq": 8}),
             _ran("batch=3", {**EXAMPLE, "batch": 3}), _skipped("x_dim2=5", {**EXAMPLE, "x_dim2": 5})]
    refuse_unvaried(cases, NAMING)  # an unvaried dimension that is neither a batch nor a length is verify's business neither


def test_a_skipped_case_is_written_passed_null_beside_no_outputs() -> None:
    cases = [_ran(EXAMPLE_CASE, EXAMPLE), _skipped("seq=8", {**EXAMPLE, "seq": 8})]
    written = SelfCheck(cases=cases).to_json()["cases"]
    assert [(c["passed"], len(c["outputs"]), c["skipped"]) for c in written] == [(True, 1, None), (None, 0, NAN)]
