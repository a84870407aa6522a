"""An ONNX value's dims, read once (rnnx.formats.onnx_read.value_dims): each kind of dim, each
choice for an unnamed one, and the same reading as ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from rnnx.formats.onnx_read import INVENTED, invented_label, value_dims
from rnnx.shapes.file_dims import read_file_dims

# a fixed size, a named one, one with nothing set, -1 (tools' "any size"), 0 (an empty axis)
_KINDS = [2, "b", None, -1, 0]


def _model(dims: list[int | str | None]) -> object:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_each_kind_of_dim_under_each_choice_for_an_unnamed_one() -> None:
    x = _model(_KINDS).graph.input[0]  # type: ignore[attr-defined]
    assert value_dims(x, unnamed=None) == [2, "b", None, None, 0]
    assert value_dims(x, unnamed=0) == [2, "b", 0, 0, 0]
    assert value_dims(x, unnamed=INVENTED) == [2, "b", "x_dim2", "x_dim3", 0]
    assert invented_label("x", 2) == "x_dim2"
    rankless = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    assert value_dims(rankless, unnamed=None) == []


def test_the_reading_is_onnx_runtime_s() -> None:
    """ONNX Runtime names the same dims the same way, and takes any size where the reading says
    unnamed, only the fixed size where it says fixed."""
    import onnxruntime as ort

    model = _model(_KINDS)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
    assert session.get_inputs()[0].shape == value_dims(model.graph.input[0], unnamed=None)  # type: ignore[attr-defined]
    for sizes in ([2, 1, 5, 7, 0], [2, 3, 1, 1, 0]):
        assert session.run(None, {"x": np.ones(sizes, np.float32)})[0].shape == tuple(sizes)
    for wrong in ([3, 1, 5, 7, 0], [2, 1, 5, 7, 1]):  # the fixed sizes, 2 and 0, are held
        with pytest.raises(Exception, match="dimensions"):
            session.run(None, {"x": np.ones(wrong, np.float32)})


def test_verify_s_reading_of_a_file_invents_labels_for_unnamed_dims() -> None:
    read = read_file_dims(_model(_KINDS))
    assert read.specs[0].dims == [2, "b", "x_dim2", "x_dim3", 0]
