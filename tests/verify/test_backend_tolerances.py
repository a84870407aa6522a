"""verify's per-backend tolerances from Python: a Tolerance or an (atol, rtol) pair; anything else is refused by name."""

from __future__ import annotations

import pytest

from rnnx.errors import RNNXError
from rnnx.tolerance import Tolerance
from rnnx.verify.run import _backend_tolerances


@pytest.mark.parametrize("value", [(1e-3,), (1e-3, 1e-3, 1e-3), "ab", 1e-3])
def test_anything_but_a_pair_is_refused_naming_the_backend(value: object) -> None:
    with pytest.raises(RNNXError, match=r"backend_tolerances\['ort'\]: expected a Tolerance or an \(atol, rtol\) pair"):
        _backend_tolerances({"ort": value})  # type: ignore[dict-item]


def test_a_pair_and_a_tolerance_are_taken() -> None:
    given = Tolerance(2e-3, 0.0)
    out = _backend_tolerances({"ort": (1e-3, 2e-3), "reference": given})
    assert (out["ort"].atol, out["ort"].rtol) == (1e-3, 2e-3) and out["reference"] is given
