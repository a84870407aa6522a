"""The fuse passes' typed results: each candidate left alone names the rule it broke, and
steps of one cell share one set of weights exactly when their weights are equal."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.graphs.fuse_steps import fuse_steps
from rnnx.pass_result import Declined, PassResult
from rnnx.pipelines.fuse import fuse_file
from tests.graphs.test_fuse import _hand_built_cell

torch = pytest.importorskip("torch")
from tests.exporters.models import SteppedCell, SteppedGRU  # noqa: E402


def _node(model: onnx.ModelProto, output: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if output in n.output)


def _two_tanh(model: onnx.ModelProto) -> None:
    _node(model, "o").op_type = "Tanh"


def _h_not_o_times_tanh_c(model: onnx.ModelProto) -> None:
    _node(model, "h_new").op_type = "Add"


def _weights_from_an_input(model: onnx.ModelProto) -> None:
    model.graph.input.append(helper.make_tensor_value_info("R_in", onnx.TensorProto.FLOAT, [4, 16]))
    _node(model, "hr").input[1] = "R_in"


def _i_used_outside(model: onnx.ModelProto) -> None:
    model.graph.output.append(helper.make_tensor_value_info("i", onnx.TensorProto.FLOAT, None))


@pytest.mark.parametrize(("damage", "rule"), [
    (_two_tanh, "lstm.activations"),
    (_h_not_o_times_tanh_c, "lstm.output"),
    (_weights_from_an_input, "lstm.linear_inputs"),
    (_i_used_outside, "lstm.private"),
])
def test_a_cell_left_alone_names_the_rule_it_breaks(damage, rule: str) -> None:
    model = _hand_built_cell("ifgo")
    damage(model)
    before = [n.op_type for n in model.graph.node]
    result = fuse_cells(model)
    assert isinstance(result, PassResult) and not result and not result.changed
    (declined,) = result.left_alone
    assert isinstance(declined, Declined) and declined.rule == rule and declined.node and declined.reason
    assert declined.to_json() == {"node": declined.node, "rule": rule, "reason": declined.reason}
    assert [n.op_type for n in model.graph.node] == before  # left alone means untouched


def test_an_intact_cell_is_rewritten_and_nothing_declined() -> None:
    model = _hand_built_cell("ogfi")
    result = fuse_cells(model)
    assert result.changed and len(result.rewritten) == 1 and result.left_alone == []


def _export(model: torch.nn.Module, path, steps: int = 3) -> onnx.ModelProto:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.randn(steps, 2, 4),), str(path), dynamo=False, opset_version=17)
    return onnx.load(str(path))


def _last_step_reads_copies(proto: onnx.ModelProto, scale: float) -> None:
    """The last step's products read their own copies of the weights (times ``scale``)."""
    gemms = [n for n in proto.graph.node if n.op_type == "Gemm"]
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    for gemm in gemms[-2:]:
        for k in (1, 2):
            copy = f"{gemm.input[k]}_copy"
            if copy not in {i.name for i in proto.graph.initializer}:
                proto.graph.initializer.append(numpy_helper.from_array(inits[gemm.input[k]] * np.float32(scale), copy))
            gemm.input[k] = copy


@pytest.mark.parametrize("make", [SteppedCell, SteppedGRU], ids=["lstmcell", "grucell"])
def test_steps_share_weights_by_value_not_by_name(tmp_path, make) -> None:
    proto = _export(make(), tmp_path / "unrolled.onnx")
    _last_step_reads_copies(proto, 1.0)
    onnx.save(proto, str(tmp_path / "copies.onnx"))
    report = fuse_file(tmp_path / "copies.onnx", tmp_path / "fused.onnx")
    assert len(report.cells) == 3 and report.chains[0]["steps"] == 3 and report.check


@pytest.mark.parametrize("make", [SteppedCell, SteppedGRU], ids=["lstmcell", "grucell"])
def test_steps_with_other_weights_keep_their_own_and_the_chain_is_declined(tmp_path, make) -> None:
    proto = _export(make(), tmp_path / "unrolled.onnx")
    _last_step_reads_copies(proto, 1.5)
    onnx.save(proto, str(tmp_path / "other.onnx"))
    report = fuse_file(tmp_path / "other.onnx", tmp_path / "fused.onnx")
    assert len(report.cells) == 3 and not report.chains and report.check  # ONNX Runtime agrees: each step kept its weights
    assert [d.rule for d in report.left_alone] == ["steps.stack_order"]
    fused = onnx.load(str(tmp_path / "fused.onnx"))
    weights = collections.Counter(i.name.rsplit("_", 1)[-1] for i in fused.graph.initializer if "_cell" in i.name)
    assert weights["W"] == 2 and weights["R"] == 2


def test_a_chain_left_alone_names_the_rule(tmp_path) -> None:
    proto = _export(SteppedCell(), tmp_path / "unrolled.onnx")
    fuse_cells(proto)
    step_h = [n for n in proto.graph.node if n.op_type == "Squeeze" and n.input[0].endswith("_Y_h")][0].output[0]
    proto.graph.output.append(helper.make_tensor_value_info(step_h, onnx.TensorProto.FLOAT, None))
    result = fuse_steps(proto)
    (declined,) = result.left_alone
    assert not result and declined.rule == "steps.h_private" and "graph output" in declined.reason


def test_a_gru_cell_whose_gate_is_a_graph_output_names_the_rule(tmp_path) -> None:
    proto = _export(SteppedGRU(), tmp_path / "unrolled.onnx", steps=2)
    gate = next(n for n in proto.graph.node if n.op_type == "Sigmoid").output[0]
    proto.graph.output.append(helper.make_tensor_value_info(gate, onnx.TensorProto.FLOAT, None))
    result = fuse_cells(proto)
    assert [d.rule for d in result.left_alone] == ["gru.private"] and gate in result.left_alone[0].reason
    assert len(result.rewritten) == 1  # the other step is still fused
