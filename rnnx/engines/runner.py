"""The one interface every runner has, and the zero initial states they share.

A runner takes named numpy inputs and returns named numpy outputs, with the names of an
rnnx stack: ``X`` (time-major unless the runner was built batch-major), optional ``h0``,
``c0`` (LSTM) and ``seq_lens``; ``Y``, ``h_n`` and ``c_n`` (LSTM) back. A state that is not
fed starts at zeros, as in PyTorch, cuDNN and ONNX, so every runner answers the same feed
the same way whichever states it was given.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from rnnx.errors import RNNXError
from rnnx.spec import RNNSpec

STACK_INPUTS = ("X", "h0", "c0", "seq_lens")


@runtime_checkable
class Runner(Protocol):
    """Named numpy inputs in, named numpy outputs out (see the module's docstring)."""

    # Read-only: a runner may hold each as a plain attribute or compute it (a property).
    @property
    def input_names(self) -> list[str]: ...
    @property
    def output_names(self) -> list[str]: ...
    @property
    def device(self) -> str: ...  # "cpu" or "cuda"
    @property
    def precision(self) -> str: ...  # what it computes in: "fp32", "fp64", ... or "as the model's tensors"

    def __call__(self, feeds: dict[str, np.ndarray], /) -> dict[str, np.ndarray]: ...  # positional: runners name it as they like


def stack_input_names(spec: RNNSpec, sequence_lens: bool = True) -> list[str]:
    """The inputs a runner of ``spec`` takes: X, h0, c0 for an LSTM, seq_lens."""
    names = ["X", "h0"] + (["c0"] if spec.cell == "lstm" else [])
    return names + (["seq_lens"] if sequence_lens else [])


def stack_output_names(spec: RNNSpec) -> list[str]:
    return ["Y", "h_n"] + (["c_n"] if spec.cell == "lstm" else [])


def state_shapes(spec: RNNSpec, batch: int) -> dict[str, tuple[int, int, int]]:
    """h0 (and c0) of a stack at ``batch``: (layers * directions, batch, output or hidden)."""
    n = spec.num_layers * spec.num_directions
    shapes = {"h0": (n, batch, spec.output_size)}
    if spec.cell == "lstm":
        shapes["c0"] = (n, batch, spec.hidden_size)
    return shapes


def with_zero_states(spec: RNNSpec, feeds: dict[str, np.ndarray], batch_first: bool = False) -> dict[str, np.ndarray]:
    """``feeds`` with each initial state it lacks set to zeros of X's dtype and batch."""
    if "X" not in feeds:
        raise RNNXError(f"a runner of {spec}: expected an input named X, found {sorted(feeds)}")
    x = np.asarray(feeds["X"])
    if x.ndim != 3:
        raise RNNXError(f"a runner of {spec}: expected X of rank 3 (time, batch, features), found shape {list(x.shape)}")
    batch = x.shape[0 if batch_first else 1]
    missing = {name: np.zeros(shape, x.dtype) for name, shape in state_shapes(spec, batch).items() if name not in feeds}
    return {**feeds, **missing} if missing else feeds
