from __future__ import annotations

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.weights import expected_shapes, split_gates


def test_gates_are_addressed_by_name() -> None:
    spec = RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional,proj=2,peepholes")
    w = RNNWeights.random(spec, seed=1)
    f = w.gate("f", layer=1, direction="reverse")
    assert f.W.shape == (4, 4) and f.R.shape == (4, 2) and f.bW.shape == (4,) and f.P.shape == (4,)
    assert f.W is w["l1.reverse.W.f"]
    assert w.proj(1, "reverse").shape == (2, 4)
    assert w.gate("g").P is None  # the cell candidate has no peephole
    with pytest.raises(RNNXError, match="expected one of"):
        w.gate("z")


def test_shape_errors_name_tensor_expected_and_found() -> None:
    spec = RNNSpec.parse("gru,input=3,hidden=4")
    tensors = dict(RNNWeights.random(spec).tensors)
    tensors["l0.forward.W.z"] = np.zeros((3, 4), np.float32)
    with pytest.raises(RNNXError, match=r"tensor l0.forward.W.z: expected shape \(4, 3\), found \(3, 4\)"):
        RNNWeights(spec, tensors)


def test_missing_and_unexpected_tensors_are_refused() -> None:
    spec = RNNSpec.parse("rnn_tanh,input=2,hidden=2")
    tensors = dict(RNNWeights.random(spec).tensors)
    del tensors["l0.forward.bR.h"]
    with pytest.raises(RNNXError, match="l0.forward.bR.h: expected shape"):
        RNNWeights(spec, tensors)
    with pytest.raises(RNNXError, match="not part of spec"):
        RNNWeights(spec.with_(bias=False), RNNWeights.random(spec).tensors)


def test_mixed_dtypes_and_integers_are_refused() -> None:
    spec = RNNSpec.parse("rnn_tanh,input=2,hidden=2")
    tensors = dict(RNNWeights.random(spec).tensors)
    tensors["l0.forward.W.h"] = tensors["l0.forward.W.h"].astype(np.float64)
    with pytest.raises(RNNXError, match="dtype"):
        RNNWeights(spec, tensors)
    tensors["l0.forward.W.h"] = np.zeros((2, 2), np.int32)
    with pytest.raises(RNNXError, match="floating"):
        RNNWeights(spec, tensors)


def test_parameter_count_matches_torch_formula() -> None:
    spec = RNNSpec.parse("lstm,input=8,hidden=16,layers=2,bidirectional,proj=4")
    H, I, P = 16, 8, 4
    assert sum(int(np.prod(s)) for s in expected_shapes(spec).values()) == 8 * H * I + 36 * H * P + 32 * H


def test_split_gates_refuses_uneven_stacks() -> None:
    with pytest.raises(RNNXError, match="divisible by 4"):
        split_gates(np.zeros((10, 2)), "ifgo")
