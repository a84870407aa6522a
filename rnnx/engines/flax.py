"""Flax runner: a written ``.msgpack`` file loaded by ``flax.serialization.from_bytes`` into
the flax.linen module it is for, and run by Flax.

The module is an ``RNN`` (``reverse=True, keep_order=True`` for a reverse spec) or a
``Bidirectional`` of the spec's cell (``LSTMCell``, ``GRUCell``, ``SimpleCell`` with relu
for ``rnn_relu``): what rnnx's writer promises the file fits. ``from_bytes`` refuses a tree
that does not match the module's, and a wrong gate order shows up as Flax's outputs
differing from the reference. Flax is batch-major, with the LSTM carry as ``(c, h)``; the
answers are brought to rnnx's time-major roles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnx.engines.runner import stack_input_names, stack_output_names, with_zero_states
from rnnx.errors import DETAIL_CHARS, RNNXError, one_line
from rnnx.spec import RNNSpec

#: The flax.linen cell class run for each canonical cell kind.
CELL_CLASSES = {"lstm": "LSTMCell", "gru": "GRUCell", "rnn_tanh": "SimpleCell", "rnn_relu": "SimpleCell"}


class FlaxRunner:
    device = "cpu"
    precision = "fp32"

    def __init__(self, path: Path, spec: RNNSpec) -> None:
        try:
            import jax
            from flax import linen as nn, serialization
        except ImportError:
            raise RNNXError("flax is not installed; pip install 'rnnx[flax]'") from None
        if spec.num_layers != 1:
            raise RNNXError(f"a Flax file holds one layer, found spec {spec}")
        jax.config.update("jax_platforms", "cpu")
        self.spec, self.jnp = spec, jax.numpy

        def cell() -> Any:
            extra = {"activation_fn": nn.relu} if spec.cell == "rnn_relu" else {}
            return getattr(nn, CELL_CLASSES[spec.cell])(features=spec.hidden_size, **extra)

        if spec.direction == "bidirectional":
            self.module = nn.Bidirectional(nn.RNN(cell()), nn.RNN(cell()))
        else:
            self.module = nn.RNN(cell(), reverse=spec.direction == "reverse", keep_order=True)
        template = self.module.init(jax.random.PRNGKey(0), np.zeros((1, 1, spec.input_size), np.float32))
        try:
            self.variables = serialization.from_bytes(template, Path(path).read_bytes())
        except (ValueError, KeyError, TypeError) as exc:
            raise RNNXError(f"{path}: flax.serialization.from_bytes cannot load it into a {type(self.module).__name__} "
                            f"of {CELL_CLASSES[spec.cell]} ({one_line(exc, DETAIL_CHARS)})") from None
        self.input_names, self.output_names = stack_input_names(spec, sequence_lens=False), stack_output_names(spec)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        spec, jnp = self.spec, self.jnp
        inputs = with_zero_states(spec, inputs)
        carries = []
        for d in range(spec.num_directions):
            h = jnp.asarray(inputs["h0"][d].astype(np.float32))
            carries.append((jnp.asarray(inputs["c0"][d].astype(np.float32)), h) if spec.cell == "lstm" else h)
        initial = tuple(carries) if spec.direction == "bidirectional" else carries[0]
        x = jnp.asarray(inputs["X"].astype(np.float32).transpose(1, 0, 2))
        carry, y = self.module.apply(self.variables, x, initial_carry=initial, return_carry=True)
        finals = carry if spec.direction == "bidirectional" else (carry,)
        out = {"Y": np.asarray(y).transpose(1, 0, 2),
               "h_n": np.stack([np.asarray(c[1] if spec.cell == "lstm" else c) for c in finals])}
        if spec.cell == "lstm":
            out["c_n"] = np.stack([np.asarray(c[0]) for c in finals])
        return out
