"""jax runner: a written jax weight vector run by ``jax.experimental.rnn`` itself.

The vector is taken from the file as written and unpacked by jax's own
``unpack_lstm_weights``, so a wrong block or gate order in the file shows up as jax's
outputs differing from the float64 reference. ``lstm_ref`` is jax's portable LSTM (the
cuDNN path needs a GPU); it is batch-major, and rnnx's roles are time-major.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rnnx.engines.runner import stack_input_names, stack_output_names, with_zero_states
from rnnx.errors import RNNXError
from rnnx.spec import RNNSpec


class JaxRunner:
    device = "cpu"
    precision = "fp32"

    def __init__(self, path: Path, spec: RNNSpec) -> None:
        try:
            import jax
            from jax.experimental import rnn
        except ImportError:
            raise RNNXError("jax is not installed; pip install 'rnnx[jax]'") from None
        jax.config.update("jax_platforms", "cpu")
        with np.load(path, allow_pickle=False) as npz:
            self.vector = np.asarray(npz["weights"], np.float32)
        self.spec, self.rnn = spec, rnn
        self.input_names, self.output_names = stack_input_names(spec), stack_output_names(spec)
        self.bidirectional = spec.direction == "bidirectional"
        self.unpacked = rnn.unpack_lstm_weights(self.vector, spec.input_size, spec.hidden_size, spec.num_layers, self.bidirectional)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        spec = self.spec
        inputs = with_zero_states(spec, inputs)
        x = inputs["X"].astype(np.float32).transpose(1, 0, 2)
        lengths = inputs.get("seq_lens", np.full(x.shape[0], x.shape[1])).astype(np.int32)
        h0, c0 = inputs["h0"].astype(np.float32), inputs["c0"].astype(np.float32)
        y, h, c = self.rnn.lstm_ref(x, h0, c0, *self.unpacked, lengths, spec.input_size, spec.hidden_size, spec.num_layers, 0.0, self.bidirectional)
        return {"Y": np.asarray(y).transpose(1, 0, 2), "h_n": np.asarray(h), "c_n": np.asarray(c)}
