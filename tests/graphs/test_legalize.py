"""drop_newer_attributes: attributes a newer opset added are dropped where they mean what the
older op does anyway, in the main graph and in subgraphs, and refused otherwise."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.errors import RNNXError
from rnnx.graphs.legalize import drop_newer_attributes


def _split_model(in_branch: bool, noop: int = 0) -> onnx.ModelProto:
    """Opset 17, with the opset-18 attributes the version converter leaves behind: Split's
    num_outputs and ReduceMean's noop_with_empty_axes; with ``in_branch``, inside an If."""
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
        helper.make_node("ReduceMean", ["a"], ["m"], axes=[1], keepdims=1, noop_with_empty_axes=noop),
        helper.make_node("Sub", ["b", "m"], ["y"]),
    ]
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    if in_branch:
        then = helper.make_graph(nodes, "then", [], [vi("y", [2, 2])])
        zeros = helper.make_tensor("zeros", TensorProto.FLOAT, [2, 2], [0.0] * 4)
        other = helper.make_graph([helper.make_node("Constant", [], ["z"], value=zeros)], "else", [], [vi("z", [2, 2])])
        graph = helper.make_graph([helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)], "g",
                                  [helper.make_tensor_value_info("c", TensorProto.BOOL, []), vi("x", [2, 4])], [vi("out", [2, 2])])
    else:
        graph = helper.make_graph(nodes, "g", [vi("x", [2, 4])], [vi("y", [2, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _attrs(model: onnx.ModelProto) -> dict[str, set[str]]:
    from rnnx.graphs.index import all_graphs

    return {n.op_type: {a.name for a in n.attribute} for g in all_graphs(model.graph) for n in g.node}


@pytest.mark.parametrize("in_branch", [False, True], ids=["main-graph", "if-branch"])
def test_newer_attributes_with_their_old_meaning_are_dropped(tmp_path, in_branch: bool) -> None:
    model = _split_model(in_branch)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model, full_check=True)
    drop_newer_attributes(model)
    attrs = _attrs(model)
    assert "num_outputs" not in attrs["Split"] and "noop_with_empty_axes" not in attrs["ReduceMean"] and "axes" in attrs["ReduceMean"]
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    feeds = {"x": x, **({"c": np.array(True)} if in_branch else {})}
    got = next(iter(OnnxRuntimeRunner(tmp_path / "m.onnx")(feeds).values()))
    np.testing.assert_allclose(got, x[:, 2:] - x[:, :2].mean(axis=1, keepdims=True))


def test_a_newer_attribute_that_changes_the_meaning_is_refused_or_kept() -> None:
    model = _split_model(in_branch=True, noop=1)
    with pytest.raises(RNNXError, match=r"ReduceMean node .* needs attribute noop_with_empty_axes, which opset 17 lacks; export with a newer"):
        drop_newer_attributes(model)
    model = _split_model(in_branch=True, noop=1)
    drop_newer_attributes(model, strict=False)
    assert "noop_with_empty_axes" in _attrs(model)["ReduceMean"] and "num_outputs" not in _attrs(model)["Split"]
