"""Recurrences rnnx lowered into Scans are still recurrences to its readers: convert reads
their weights back from the Scans' constants through the lowering record, inspect lists
them, and what comes back computes what the torch module computes."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

import rnnx
from rnnx.formats.onnx_read import load_model, recurrent_groups
from rnnx.graphs.inspect import inspect_model
from rnnx.pipelines.convert import convert
from rnnx.pipelines.lower import lower_file
from rnnx.reference import forward

torch = pytest.importorskip("torch")


def _torch_outputs(module: torch.nn.Module, x: np.ndarray) -> list[np.ndarray]:
    with torch.no_grad():
        y, state = module.double()(torch.from_numpy(x))
    module.float()
    states = state if isinstance(state, tuple) else (state,)
    return [y.numpy()] + [s.numpy() for s in states]


def _reference_outputs(weights: rnnx.RNNWeights, x: np.ndarray) -> list[np.ndarray]:
    out = forward(weights, x)
    return [out.y, out.h_n] + ([out.c_n] if out.c_n is not None else [])


@pytest.mark.parametrize("seq,batch", [(1, 1), (9, 3)])
def test_an_exported_projected_lstm_reads_back_as_the_torch_module(tmp_path, seq: int, batch: int) -> None:
    torch.manual_seed(3)
    module = torch.nn.LSTM(6, 10, num_layers=2, proj_size=4, bidirectional=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rnnx.export(module, (torch.randn(5, 2, 6),), tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert not any(n.op_type == "LSTM" for n in model.graph.node)
    weights = rnnx.load(tmp_path / "m.onnx")
    assert str(weights.spec) == "lstm,input=6,hidden=10,layers=2,bidirectional,proj=4"
    x = np.random.default_rng(seq * 10 + batch).standard_normal((seq, batch, 6))
    for got, want in zip(_reference_outputs(weights, x), _torch_outputs(module, x)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("make", [
    lambda: torch.nn.GRU(5, 7, num_layers=2, bidirectional=True),
    lambda: torch.nn.GRU(5, 7, bias=False),
    lambda: torch.nn.RNN(5, 7, nonlinearity="relu", num_layers=2),
    lambda: torch.nn.LSTM(5, 7, bidirectional=True),
], ids=["gru-bidir-2", "gru-no-bias", "rnn-relu-2", "lstm-bidir"])
def test_a_lowered_file_reads_back_as_the_torch_module(tmp_path, make) -> None:
    """`rnnx lower` turns native nodes into Scans; the biases come back summed into the input
    bias (a GRU's recurrent n bias apart), which computes the same."""
    torch.manual_seed(5)
    module = make().eval()
    relu = isinstance(module, torch.nn.RNN) and module.nonlinearity == "relu"  # a state_dict cannot say it
    spec = f"rnn_relu,input=5,hidden=7,layers={module.num_layers}" if relu else None
    rnnx.save(rnnx.from_format(module.state_dict(), "torch", spec=spec), tmp_path / "w.safetensors")
    convert(tmp_path / "w.safetensors", tmp_path / "native.onnx")
    lower_file(tmp_path / "native.onnx", tmp_path / "lowered.onnx")
    model = load_model(tmp_path / "lowered.onnx")
    assert not any(n.op_type in ("LSTM", "GRU", "RNN") for n in model.graph.node)
    groups = recurrent_groups(model)
    assert len(groups) == 1 and len(groups[0].nodes) == module.num_layers and all(n.lowered for n in groups[0].nodes)
    assert all(r.lowered for r in inspect_model(model))
    weights = rnnx.load(tmp_path / "lowered.onnx")
    x = np.random.default_rng(1).standard_normal((6, 2, 5))
    for got, want in zip(_reference_outputs(weights, x), _torch_outputs(module, x)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_a_swapped_gate_in_a_lowered_layer_changes_what_is_read_back(tmp_path) -> None:
    """The read-back follows the Scan's own layout: swapping two gates' columns in the stored
    input matrix gives weights that no longer compute what the module computes."""
    torch.manual_seed(7)
    module = torch.nn.LSTM(4, 5, proj_size=3).eval()
    rnnx.save(rnnx.from_format(module.state_dict(), "torch"), tmp_path / "w.safetensors")
    convert(tmp_path / "w.safetensors", tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    hoisted = next(n for n in model.graph.node if n.op_type == "Constant" and n.output[0].endswith("d0_Wt"))
    value = onnx.numpy_helper.to_array(hoisted.attribute[0].t).copy()
    value[:, :5], value[:, 5:10] = value[:, 5:10].copy(), value[:, :5].copy()
    hoisted.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(value, hoisted.output[0]))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    x = np.random.default_rng(2).standard_normal((4, 2, 4))
    good = _reference_outputs(rnnx.load(tmp_path / "m.onnx"), x)[0]
    bad = _reference_outputs(rnnx.load(tmp_path / "bad.onnx"), x)[0]
    want = _torch_outputs(module, x)[0]
    np.testing.assert_allclose(good, want, atol=1e-5, rtol=0)
    assert np.max(np.abs(bad - want)) > 1e-2
