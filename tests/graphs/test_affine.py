"""rnnx.graphs.affine folds constants cut by shape ops; a cut it cannot read is not a constant."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rnnx.graphs.affine import const_value
from rnnx.graphs.index import GraphIndex


def _sliced(inputs: list[str], extra: tuple = ()) -> GraphIndex:
    W = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    node = helper.make_node("Slice", inputs, ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [W, *extra])
    return GraphIndex(helper.make_model(graph).graph)


def test_a_slice_of_a_constant_folds() -> None:
    bounds = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("s", 1), ("e", 3))]
    assert np.array_equal(const_value(_sliced(["W", "s", "e"], bounds), "y"), np.arange(12, dtype=np.float32).reshape(4, 3)[1:3])


@pytest.mark.parametrize("inputs", [["W", "", ""], ["W"]], ids=["empty-starts-and-ends", "no-starts-or-ends"])
def test_a_slice_without_its_starts_or_ends_is_no_constant(inputs: list[str]) -> None:
    # Before: int(None) raised TypeError (empty names), or unpacking raised ValueError (no inputs).
    assert const_value(_sliced(inputs), "y") is None
