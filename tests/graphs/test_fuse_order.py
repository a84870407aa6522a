"""Fuse's pass order is data and the runner reaches a fixed point: a partial or reordered order
changes what is fused (on a torch.onnx export of a cell stepped in Python), a later pass's
rewrite enables an earlier one's (chains of steps -> a bidirectional node, in a second sweep),
and passes that keep undoing each other stop at the bound."""

from __future__ import annotations

import collections
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.graphs.fuse_passes import CELLS, CHAINS, DIRECTIONS, FUSE_ORDER, LOOPS, run_fuse_passes
from rnnx.graphs.passes import GraphPass, default_rounds, run_passes
from rnnx.pass_result import PassResult
from rnnx.pipelines.fuse import fuse_file

torch = pytest.importorskip("torch")
nn = torch.nn

STEPS, N_IN, N_H = 5, 4, 6


class Tagger(nn.Module):
    """An LSTM cell stepped over ``x.unbind(0)`` and its states stacked, as hand-written taggers do."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(N_IN, N_H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.size(1), N_H)
        c = x.new_zeros(x.size(1), N_H)
        outs = []
        for x_t in x.unbind(0):
            h, c = self.cell(x_t, (h, c))
            outs.append(h)
        return torch.stack(outs)


@pytest.fixture(scope="module")
def tagger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tagger, onnx.ModelProto]:
    torch.manual_seed(11)
    model = Tagger().eval()
    path = tmp_path_factory.mktemp("order") / "tagger.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(STEPS, 2, N_IN),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {1: "batch"}})
    return model, onnx.load(str(path))


def _ops(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in model.graph.node)


def _agrees_with_torch(model: onnx.ModelProto, torch_model: Tagger, shapes: list[tuple[int, int]]) -> None:
    runner = OnnxRuntimeRunner(model)
    gen = torch.Generator().manual_seed(5)
    for T, B in shapes:
        x = torch.randn(T, B, N_IN, generator=gen)
        with torch.no_grad():
            want = torch_model(x).numpy()
        got = runner({runner.input_names[0]: x.numpy()})[runner.output_names[0]]
        np.testing.assert_allclose(got, want, atol=3e-5, err_msg=f"T={T} batch={B}")


def test_the_order_is_data(tagger: tuple[Tagger, onnx.ModelProto]) -> None:
    torch_model, exported = tagger
    full, passes = run_fuse_passes(onnx.ModelProto.FromString(exported.SerializeToString()))
    assert len(passes.cells.rewritten) == STEPS and len(passes.chains.rewritten) == 1 and passes.passes.rounds == 2
    assert _ops(full)["LSTM"] == 1
    _agrees_with_torch(full, torch_model, [(STEPS + 4, 3), (1, 1), (2, 2)])  # one node over any length

    cells_only, partial = run_fuse_passes(onnx.ModelProto.FromString(exported.SerializeToString()), (CELLS,))
    assert len(partial.cells.rewritten) == STEPS and not partial.chains and _ops(cells_only)["LSTM"] == STEPS
    _agrees_with_torch(cells_only, torch_model, [(STEPS, 1), (STEPS, 3)])  # one node per step: the traced length only

    untouched, none = run_fuse_passes(onnx.ModelProto.FromString(exported.SerializeToString()), (CHAINS, LOOPS))
    assert not none.changed and _ops(untouched) == _ops(exported)  # no pass that makes steps: nothing to chain

    # Reversed, chains run before the cells are steps: one sweep fuses the cells only, the
    # fixed point reaches the same graph in one sweep more than fuse's order takes.
    backwards = tuple(reversed(FUSE_ORDER))
    one_sweep, bounded = run_fuse_passes(onnx.ModelProto.FromString(exported.SerializeToString()), backwards, max_rounds=1)
    assert not bounded.passes.converged and not bounded.chains and _ops(one_sweep)["LSTM"] == STEPS
    assert [d.rule for d in bounded.left_alone] == ["passes.fixed_point"]
    fixed, reordered = run_fuse_passes(onnx.ModelProto.FromString(exported.SerializeToString()), backwards)
    assert reordered.passes.converged and reordered.passes.rounds == 3 and _ops(fixed) == _ops(full)


def _reversal(S: str, tag: str) -> list[onnx.NodeProto]:
    """``tag``_lengths: S's length for every batch entry, as tf2onnx computes it (Shape, Gather, Expand)."""
    return [helper.make_node("Shape", [S], [f"{tag}_shape"]),
            helper.make_node("Gather", [f"{tag}_shape", "zero"], [f"{tag}_T"], axis=0),
            helper.make_node("Slice", [f"{tag}_shape", "one1", "two1"], [f"{tag}_B"]),
            helper.make_node("Expand", [f"{tag}_T", f"{tag}_B"], [f"{tag}_lengths"])]


def _chain(S: str, tag: str, T: int, weights: list[str]) -> tuple[list[onnx.NodeProto], str, str]:
    """T one-step LSTM nodes over S (step t reads ``Gather(S, t)``), states carried by
    ``Unsqueeze(Squeeze(Y_h))``, the states stacked by Concat: the nodes, the stack, the last h."""
    nodes, stacked = [], []
    h, c = "h0", "c0"
    for t in range(T):
        s = f"{tag}{t}"
        nodes += [helper.make_node("Gather", [S, f"t{t}"], [f"{s}_x"], axis=0),
                  helper.make_node("Unsqueeze", [f"{s}_x", "axis0"], [f"{s}_X"]),
                  helper.make_node("Unsqueeze", [h, "axis0"], [f"{s}_h"]),
                  helper.make_node("Unsqueeze", [c, "axis0"], [f"{s}_c"]),
                  helper.make_node("LSTM", [f"{s}_X", *weights, "", f"{s}_h", f"{s}_c"], ["", f"{s}_Yh", f"{s}_Yc"], name=s, hidden_size=N_H),
                  helper.make_node("Squeeze", [f"{s}_Yh", "axis0"], [f"{s}_hn"]),
                  helper.make_node("Squeeze", [f"{s}_Yc", "axis0"], [f"{s}_cn"]),
                  helper.make_node("Unsqueeze", [f"{s}_hn", "axis0"], [f"{s}_stack"])]
        stacked.append(f"{s}_stack")
        h, c = f"{s}_hn", f"{s}_cn"
    nodes.append(helper.make_node("Concat", stacked, [f"{tag}_Y"], axis=0))
    return nodes, f"{tag}_Y", h


def _bidirectional_steps(T: int, rng: np.random.Generator) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """A bidirectional LSTM written as two chains of one-step nodes: one over S, one over
    ReverseSequence(S) whose stack is reversed back. Only chained do they read whole sequences,
    so the directions pass, which runs before chains, can join them only on a second sweep."""
    arrays = [rng.standard_normal(shape).astype(np.float32) * 0.5
              for _ in range(2) for shape in ((1, 4 * N_H, N_IN), (1, 4 * N_H, N_H), (1, 8 * N_H))]
    names = [f"{d}_{k}" for d in ("f", "b") for k in "WRB"]
    inits = [numpy_helper.from_array(a, n) for a, n in zip(arrays, names)]
    inits += [numpy_helper.from_array(np.array(t, np.int64), f"t{t}") for t in range(T)]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in ((0, "zero"), ([0], "axis0"), ([1], "one1"), ([2], "two1"))]
    nodes = _reversal("S", "in") + [helper.make_node("ReverseSequence", ["S", "in_lengths"], ["S_rev"], time_axis=0, batch_axis=1)]
    forward, y_f, h_f = _chain("S", "f", T, names[:3])
    backward, y_b, h_b = _chain("S_rev", "b", T, names[3:])
    nodes += forward + backward + _reversal("S", "out")
    nodes.append(helper.make_node("ReverseSequence", [y_b, "out_lengths"], ["Y_back"], time_axis=0, batch_axis=1))
    nodes += [helper.make_node("Identity", [y_f], ["Y_fwd"]), helper.make_node("Identity", [h_f], ["h_fwd"]),
              helper.make_node("Identity", [h_b], ["h_back"])]
    seq = helper.make_tensor_value_info("S", TensorProto.FLOAT, [T, "batch", N_IN])
    state = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", N_H]) for n in ("h0", "c0")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [T, "batch", N_H]) for n in ("Y_fwd", "Y_back")]
    outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", N_H]) for n in ("h_fwd", "h_back")]
    graph = helper.make_graph(nodes, "bidirectional_steps", [seq, *state], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), arrays


def _torch_bidirectional(arrays: list[np.ndarray], S: np.ndarray, h0: np.ndarray, c0: np.ndarray) -> list[np.ndarray]:
    """The same network as torch's bidirectional nn.LSTM in float64: ONNX's i,o,f,c gates in torch's i,f,g,o order."""
    lstm = nn.LSTM(N_IN, N_H, bidirectional=True).double()
    order = np.concatenate([np.arange(k * N_H, (k + 1) * N_H) for k in (0, 2, 3, 1)])
    with torch.no_grad():
        for d, suffix in enumerate(("", "_reverse")):
            W, R, B = arrays[3 * d: 3 * d + 3]
            getattr(lstm, f"weight_ih_l0{suffix}").copy_(torch.from_numpy(W[0][order].astype(np.float64)))
            getattr(lstm, f"weight_hh_l0{suffix}").copy_(torch.from_numpy(R[0][order].astype(np.float64)))
            getattr(lstm, f"bias_ih_l0{suffix}").copy_(torch.from_numpy(B[0][:4 * N_H][order].astype(np.float64)))
            getattr(lstm, f"bias_hh_l0{suffix}").copy_(torch.from_numpy(B[0][4 * N_H:][order].astype(np.float64)))
        state = tuple(torch.from_numpy(np.stack([a, a]).astype(np.float64)) for a in (h0, c0))
        Y, (h_n, _) = lstm(torch.from_numpy(S.astype(np.float64)), state)
    return [Y[..., :N_H].numpy(), Y[..., N_H:].numpy(), h_n[0].numpy(), h_n[1].numpy()]


@pytest.mark.parametrize("T", [3, 6])
def test_a_later_pass_enables_an_earlier_one(tmp_path: Path, T: int) -> None:
    rng = np.random.default_rng(T)
    model, arrays = _bidirectional_steps(T, rng)
    onnx.checker.check_model(model)
    _, passes = run_fuse_passes(onnx.ModelProto.FromString(model.SerializeToString()), (DIRECTIONS, CHAINS), max_rounds=1)
    assert len(passes.chains.rewritten) == 2 and not passes.directions  # one sweep: chained, not yet joined
    src, out = tmp_path / "steps.onnx", tmp_path / "fused.onnx"
    onnx.save(model, str(src))
    report = fuse_file(src, out)  # checked against the input in ONNX Runtime
    assert [c["steps"] for c in report.chains] == [T, T] and len(report.bidirectional) == 1 and report.check, str(report)
    fused = onnx.load(str(out))
    (node,) = [n for n in fused.graph.node if n.op_type == "LSTM"]
    assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "direction")) == b"bidirectional"
    runner = OnnxRuntimeRunner(out)
    for B in (1, 3):  # the export's batch was never fixed; batch 1 included
        feeds = {"S": rng.standard_normal((T, B, N_IN)).astype(np.float32),
                 "h0": rng.standard_normal((B, N_H)).astype(np.float32), "c0": rng.standard_normal((B, N_H)).astype(np.float32)}
        got = runner(feeds)
        for name, want in zip(("Y_fwd", "Y_back", "h_fwd", "h_back"), _torch_bidirectional(arrays, **feeds)):
            np.testing.assert_allclose(got[name], want, atol=2e-5, err_msg=f"{name} T={T} batch={B}")


def _renamer(to: str) -> GraphPass:
    def rename(model: Any) -> PassResult[str]:
        node = model.graph.node[0]
        if node.name == to:
            return PassResult()
        node.name = to
        return PassResult([to])
    return GraphPass(f"name_{to}", rename)


def test_passes_that_undo_each_other_stop_at_the_bound(tagger: tuple[Tagger, onnx.ModelProto]) -> None:
    model = onnx.ModelProto.FromString(tagger[1].SerializeToString())
    order = (_renamer("a"), _renamer("b"))
    passes = run_passes(model, order)
    assert passes.rounds == default_rounds(order) == 3 and not passes.converged
    assert [d.rule for d in passes.left_alone] == ["passes.fixed_point"]
    assert len(passes["name_a"].rewritten) == 3 and model.graph.node[0].name == "b"
    settled = run_passes(model, (_renamer("c"), _renamer("c2"))[:1])  # one pass that reaches its own fixed point
    assert settled.converged and settled.rounds == 2 and settled["name_c"].rewritten == ["c"]
    with pytest.raises(ValueError, match="distinct names"):
        run_passes(model, (CELLS, CELLS))
