"""rnnx fuse on graphs written by both torch.onnx exporters and by hand."""

from __future__ import annotations

import collections
import hashlib
import json
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.graphs.fuse_cells import fuse_cells
from rnnx.pipelines.fuse import fuse_file

torch = pytest.importorskip("torch")
from tests.exporters.models import CalledOnce, SteppedCell, SteppedGRU  # noqa: E402


def _export(model, args, path, dynamo: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, str(path), dynamo=dynamo, opset_version=17)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("steps", [3, 8])
@pytest.mark.parametrize(("make", "op"), [(SteppedCell, "LSTM"), (SteppedGRU, "GRU")], ids=["lstmcell", "grucell"])
def test_unrolled_cell_becomes_one_node_with_dynamic_length(tmp_path, dynamo: bool, steps: int, make, op: str) -> None:
    torch.manual_seed(steps)
    model = make()
    src, out = tmp_path / "unrolled.onnx", tmp_path / "fused.onnx"
    _export(model, (torch.randn(steps, 3, 4),), src, dynamo)
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    report = fuse_file(src, out)
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert len(report.cells) == steps and report.chains[0]["steps"] == steps and report.chains[0]["dynamic_seq"]
    assert report.check
    ops = collections.Counter(n.op_type for n in onnx.load(str(out)).graph.node)
    assert ops[op] == 1 and not {"Sigmoid", "Tanh", "Gemm", "MatMul", "Split", "Sub"} & set(ops)
    # The fused graph takes other lengths (the export fixed the batch); the torch module is the judge.
    runner = OnnxRuntimeRunner(out)
    for T, B in ((steps + 5, 3), (1, 3)):
        x = torch.randn(T, B, 4)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(runner({runner.input_names[0]: x.numpy()})[runner.output_names[0]], want, atol=3e-5)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_a_cell_called_once_becomes_a_one_step_node(tmp_path, dynamo: bool) -> None:
    src, out = tmp_path / "once.onnx", tmp_path / "fused.onnx"
    _export(CalledOnce(), (torch.randn(3, 4), torch.randn(3, 6), torch.randn(3, 6)), src, dynamo)
    report = fuse_file(src, out)
    assert len(report.cells) == 1 and not report.chains and report.check
    ops = collections.Counter(n.op_type for n in onnx.load(str(out)).graph.node)
    assert ops["LSTM"] == 1 and "Sigmoid" not in ops


def _hand_built_cell(order: str, use_outside: bool = False, cut: str = "split", concat: bool = False) -> onnx.ModelProto:
    """One LSTM step as MatMul + bias Add, gates stacked in ``order`` (not torch's); cut by
    one Split or by four Slices; with ``concat``, TensorFlow-style: one MatMul over [x, h]."""
    rng = np.random.default_rng(0)
    I, H = 3, 4
    W, R, b = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((I, 4 * H), (H, 4 * H), (4 * H,)))
    inits = [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (R, "R"), (b, "b"))]
    act = {"i": "Sigmoid", "f": "Sigmoid", "o": "Sigmoid", "g": "Tanh"}
    if concat:
        inits.append(numpy_helper.from_array(np.concatenate([W, R]), "WR"))
        nodes = [helper.make_node("Concat", ["x", "h"], ["xh"], axis=1), helper.make_node("MatMul", ["xh", "WR"], ["s"])]
    else:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("MatMul", ["h", "R"], ["hr"]), helper.make_node("Add", ["xw", "hr"], ["s"])]
    nodes.append(helper.make_node("Add", ["s", "b"], ["pre"]))
    if cut == "split":
        nodes.append(helper.make_node("Split", ["pre"], [f"p_{g}" for g in order], axis=1))
    else:
        for k, g in enumerate(order):
            ends = [numpy_helper.from_array(np.array([v], np.int64), f"{n}_{g}") for v, n in ((k * H, "st"), ((k + 1) * H, "en"), (1, "ax"))]
            inits += ends
            nodes.append(helper.make_node("Slice", ["pre", f"st_{g}", f"en_{g}", f"ax_{g}"], [f"p_{g}"]))
    nodes += [helper.make_node(act[g], [f"p_{g}"], [g]) for g in order]
    nodes += [
        helper.make_node("Mul", ["c", "f"], ["fc"]), helper.make_node("Mul", ["g", "i"], ["ig"]),
        helper.make_node("Add", ["ig", "fc"], ["c_new"]), helper.make_node("Tanh", ["c_new"], ["tc"]),
        helper.make_node("Mul", ["tc", "o"], ["h_new"]),
    ]
    outputs = ["h_new", "c_new"] + (["i"] if use_outside else [])
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    graph = helper.make_graph(nodes, "cell", [vi("x", [2, I]), vi("h", [2, H]), vi("c", [2, H])], [vi(n, None) for n in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("order", ["ifgo", "ogfi", "gifo", "igfo"])
@pytest.mark.parametrize("cut", ["split", "slice"])
@pytest.mark.parametrize("concat", [False, True], ids=["two-products", "tf-concat"])
def test_gates_are_found_by_role_not_position(tmp_path, order: str, cut: str, concat: bool) -> None:
    src = tmp_path / "cell.onnx"
    onnx.save(_hand_built_cell(order, cut=cut, concat=concat), str(src))
    report = fuse_file(src, tmp_path / "fused.onnx")
    assert len(report.cells) == 1 and report.check and report.check.worst().max_abs < 1e-6


def test_a_cell_whose_gate_is_used_outside_is_left_alone(tmp_path) -> None:
    model = _hand_built_cell("ifgo", use_outside=True)
    result = fuse_cells(model)
    (declined,) = result.left_alone
    assert not result and declined.rule == "lstm.private" and "used outside the cell" in declined.reason and declined.node


def test_cli(tmp_path) -> None:
    src = tmp_path / "cell.onnx"
    onnx.save(_hand_built_cell("ifgo"), str(src))
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "fuse", str(src), "-o", str(tmp_path / "f.onnx"), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["check"]["passed"]
    bad = subprocess.run([sys.executable, "-m", "rnnx.cli", "fuse", str(src), "-o", str(src)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "overwrite the input" in bad.stderr


def test_cells_inside_if_branches_are_fused(tmp_path) -> None:
    """An unrolled LSTMCell loop moved into an If's then-branch, reading the outer input and weights."""
    from onnx import helper

    src = tmp_path / "flat.onnx"
    torch.manual_seed(1)
    model = SteppedCell()
    _export(model, (torch.randn(5, 3, 4),), src, dynamo=False)
    flat = onnx.load(str(src))
    x_name, y_name = flat.graph.input[0].name, flat.graph.output[0].name
    then = helper.make_graph(list(flat.graph.node), "then", [], [helper.make_tensor_value_info(y_name, TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Constant", [], ["zeros"], value=numpy_helper.from_array(np.zeros((5, 3, 6), np.float32), "zeros"))],
                              "else", [], [helper.make_tensor_value_info("zeros", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=other)], "outer",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []), flat.graph.input[0]],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], list(flat.graph.initializer),
    )
    wrapped = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=flat.opset_import), str(wrapped))
    report = fuse_file(wrapped, tmp_path / "fused.onnx")
    assert len(report.cells) == 5 and report.chains[0]["steps"] == 5 and report.check
    assert len(report.check.rows) == 2  # the condition true (the fused branch) and false
    fused = onnx.load(str(tmp_path / "fused.onnx"))
    branch = next(a.g for a in fused.graph.node[0].attribute if a.name == "then_branch")
    assert collections.Counter(n.op_type for n in branch.node)["LSTM"] == 1
    x = torch.randn(5, 3, 4)
    with torch.no_grad():
        want = model(x).numpy()
    runner = OnnxRuntimeRunner(tmp_path / "fused.onnx")
    got = runner({"cond": np.array(True), x_name: x.numpy()})["out"]
    np.testing.assert_allclose(got, want, atol=3e-5)
