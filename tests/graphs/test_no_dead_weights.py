"""Every rewrite rnnx writes leaves no initializer, node or value_info that nothing reads: a
lowered stack is not its weights twice (it was 2x the file on a 2-layer LSTM)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from rnnx import RNNSpec, RNNWeights
from rnnx.formats.onnx_build import build_stack_model
from rnnx.formats.onnx_prune import prune
from rnnx.graphs.index import all_graphs
from rnnx.pipelines.fuse import fuse_file
from rnnx.pipelines.lower import lower_file

torch = pytest.importorskip("torch")


def _dead(path: Path) -> list[str]:
    model = onnx.load(str(path))
    graphs = list(all_graphs(model.graph))
    read = {o.name for g in graphs for o in g.output} | {i for g in graphs for n in g.node for i in n.input}
    dead = [f"initializer {t.name}" for g in graphs for t in g.initializer if t.name not in read]
    dead += [f"node {n.name}" for g in graphs for n in g.node if not any(o in read for o in n.output if o)]
    return dead


@pytest.mark.parametrize("spec", ["lstm,input=64,hidden=128,layers=2", "gru,input=8,hidden=16,bidirectional", "lstm,input=8,hidden=16,proj=8"])
def test_lower_writes_each_weight_once(spec: str, tmp_path: Path) -> None:
    source = tmp_path / "stack.onnx"
    onnx.save(build_stack_model(RNNWeights.random(RNNSpec.parse(spec), seed=0)), str(source))
    out = tmp_path / "low.onnx"
    report = lower_file(source, out)
    assert report.check is None or report.check
    assert _dead(out) == []
    if source.stat().st_size > 500_000:  # where the weights, not the graph's structure, make the file
        assert out.stat().st_size < 1.2 * source.stat().st_size  # the Scans' form, not both


def test_fuse_of_an_unrolled_cell_leaves_nothing_dead(tmp_path: Path) -> None:
    class Unrolled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.cell = torch.nn.LSTMCell(4, 8)

        def forward(self, x):  # (6, batch, 4)
            h = c = torch.zeros(x.shape[1], 8)
            out = []
            for t in range(6):
                h, c = self.cell(x[t], (h, c))
                out.append(h)
            return torch.stack(out)

    source = tmp_path / "unrolled.onnx"
    torch.onnx.export(Unrolled().eval(), (torch.randn(6, 2, 4),), str(source), dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {1: "batch"}})
    out = tmp_path / "fused.onnx"
    report = fuse_file(source, out)
    assert report.check is not None and report.check
    assert _dead(out) == []


def test_prune_removes_dead_chains_and_keeps_what_a_body_reads() -> None:
    import numpy as np
    from onnx import TensorProto, numpy_helper

    body = helper.make_graph([helper.make_node("Add", ["s", "outer_w"], ["s2"]), helper.make_node("Identity", ["s2"], ["y"])], "body",
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                             [helper.make_tensor_value_info("s2", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["sN", "ys"], body=body, num_scan_inputs=1, name="scan"),
             helper.make_node("Relu", ["xs"], ["dead1"], name="dead_relu"), helper.make_node("Neg", ["dead1"], ["dead2"], name="dead_neg")]
    inits = [numpy_helper.from_array(np.ones(1, np.float32), n) for n in ("outer_w", "unused")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s0", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("xs", TensorProto.FLOAT, [3, 1])],
                              [helper.make_tensor_value_info("ys", TensorProto.FLOAT, [3, 1])], inits,
                              value_info=[helper.make_tensor_value_info("dead2", TensorProto.FLOAT, [3, 1])])
    model = helper.make_model(graph)
    pruned = prune(model)
    assert sorted(pruned.nodes) == ["dead_neg", "dead_relu"] and pruned.initializers == ["unused"] and pruned.value_info == ["dead2"]
    assert [t.name for t in model.graph.initializer] == ["outer_w"]  # a Scan body reads it by name
    assert prune(model) is not None and not prune(model)  # nothing left the second time
