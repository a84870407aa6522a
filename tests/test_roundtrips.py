"""Every format: to the format and back is bit-exact, over generated specs (hypothesis).

Round trips prove nothing about gate order (the per-format tests that run each framework
do); they prove that no conversion loses, reorders inconsistently or copies wrongly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from tests.test_spec import specs

# What each format can express; the rest must be refused, never silently altered.
EXPRESSIBLE = {
    "rnnx": lambda s: True,
    "torch": lambda s: not s.peepholes and s.reset_after and s.direction != "reverse",
    "onnx": lambda s: not s.proj_size,
    "cudnn": lambda s: not s.peepholes and s.reset_after and s.direction != "reverse",
    "jax": lambda s: s.cell == "lstm" and s.bias and not s.proj_size and not s.peepholes and s.direction != "reverse",
    "keras": lambda s: not s.proj_size and not s.peepholes,
}
NATIVE_SPEC_ARG = {"rnnx", "cudnn", "jax", "keras"}  # formats whose native object does not carry its spec


@pytest.mark.parametrize("name", sorted(EXPRESSIBLE))
@given(spec=specs(), seed=st.integers(0, 2**16), dtype=st.sampled_from([np.float32, np.float64, np.float16]))
def test_native_round_trip(name: str, spec: RNNSpec, seed: int, dtype: type) -> None:
    if name == "torch":
        pytest.importorskip("torch")
    weights = RNNWeights.random(spec, seed=seed, dtype=dtype)
    if not EXPRESSIBLE[name](spec):
        with pytest.raises(RNNXError):
            rnnx.to_format(weights, name)
        return
    native = rnnx.to_format(weights, name)
    # A torch state_dict cannot say tanh or relu, so plain RNNs need their spec there too.
    needs_spec = name in NATIVE_SPEC_ARG or (name == "torch" and spec.cell.startswith("rnn"))
    back = rnnx.from_format(native, name, spec=spec if needs_spec else None)
    if name == "keras":
        # Keras keeps one bias where we keep two: exact from Keras's side, the sum from ours.
        again = rnnx.to_format(back, name)
        assert len(again) == len(native) and all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(again, native))
        return
    assert back.equal(weights)


FILE_SUFFIX = {"rnnx": ".safetensors", "torch": ".pt", "onnx": ".onnx", "cudnn": ".safetensors", "jax": ".npz"}


@pytest.mark.parametrize("name", sorted(FILE_SUFFIX))
@given(spec=specs(), seed=st.integers(0, 2**16))
def test_file_round_trip(tmp_path_factory: pytest.TempPathFactory, name: str, spec: RNNSpec, seed: int) -> None:
    if name == "torch":
        pytest.importorskip("torch")
    if not EXPRESSIBLE[name](spec):
        return
    weights = RNNWeights.random(spec, seed=seed)
    path = tmp_path_factory.mktemp(name) / f"w{FILE_SUFFIX[name]}"
    rnnx.save(weights, path, format=name)
    back = rnnx.load(path, format=name, spec=spec if name == "torch" and spec.cell.startswith("rnn") else None)
    assert back.equal(weights)
