"""The audit frees only the dimensions of an input the file never reads, values or shape: one read
by Shape alone (zeros_like(x) feeding a recurrence) is still bound by where that shape goes."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from rnnx.exporters.audit_file import shape_read, values_read  # noqa: E402


def test_an_input_read_by_shape_alone_is_read_but_not_its_values() -> None:
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 5, 3]) for n in ("x", "unused")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph)
    assert values_read(proto) == set()
    assert shape_read(proto) == {"x"}  # "unused" alone takes any size
