"""verify's drive checks every graph output of a stack's file or refuses it by name: an output no
role reaches, or a second output of the same role, would otherwise go unchecked (issue 49)."""

from __future__ import annotations

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights
from rnnx.errors import RNNXError

onnx = pytest.importorskip("onnx")

from onnx import helper, numpy_helper  # noqa: E402

from rnnx.formats.onnx_build import build_stack_model  # noqa: E402
from rnnx.verify.drive import plan  # noqa: E402

WEIGHTS = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=1)


def _model_with(node: object, output: str) -> object:
    model = build_stack_model(WEIGHTS)
    model.graph.node.append(node)
    model.graph.output.append(helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None))
    return model


def test_the_plain_file_maps_every_output() -> None:
    assert sorted(plan(build_stack_model(WEIGHTS), WEIGHTS.spec).outputs.values()) == ["Y", "c_n", "h_n"]


def test_an_output_no_role_reaches_is_refused_by_name_and_checked_once_mapped() -> None:
    model = _model_with(helper.make_node("Mul", ["Y", "nan"], ["head"]), "head")
    model.graph.initializer.append(numpy_helper.from_array(np.array(np.nan, np.float32), "nan"))
    with pytest.raises(RNNXError, match="graph output 'head' could not be mapped.*--input-map head=ROLE"):
        plan(model, WEIGHTS.spec)
    del model.graph.output[0]  # Y itself: once 'head' is named Y, it is the output checked as Y
    assert plan(model, WEIGHTS.spec, {"head": "Y"}).outputs == {"h_n": "h_n", "c_n": "c_n", "head": "Y"}


def test_two_outputs_of_one_role_are_refused_not_one_dropped() -> None:
    model = _model_with(helper.make_node("Identity", ["Y"], ["Y_copy"]), "Y_copy")
    with pytest.raises(RNNXError, match=r"graph outputs \['Y', 'Y_copy'\] each carry the recurrence's Y"):
        plan(model, WEIGHTS.spec)
