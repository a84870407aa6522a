"""Keras runner: a written ``.weights.h5`` loaded by Keras itself into the model it is for.

``model.load_weights`` reads the file into a ``Sequential`` made of exactly the spec's
layers (what rnnx's writer promises); each layer's weights are then run by an equal layer
that also returns its states, with rnnx's initial states. Keras is batch-major and returns
states per direction; the answers are brought to rnnx's time-major roles.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.engines.runner import stack_input_names, stack_output_names, with_zero_states
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.spec import RNNSpec


def _keras() -> Any:
    if "KERAS_BACKEND" not in os.environ:
        import importlib.util

        if importlib.util.find_spec("tensorflow") is None and importlib.util.find_spec("torch") is not None:
            os.environ["KERAS_BACKEND"] = "torch"  # Keras's default backend is not installed; torch is
    try:
        import keras
    except ImportError as exc:
        raise RNNXError(f"Keras cannot be imported ({exc})") from None
    return keras


class KerasRunner:
    device = "cpu"
    precision = "fp32"

    def __init__(self, path: Path, spec: RNNSpec) -> None:
        if spec.direction == "reverse":
            raise RNNXError("a reverse layer is go_backwards in Keras, which a .weights.h5 cannot say")
        self.keras, self.spec = _keras(), spec
        # Keras layers take no per-sequence lengths: seq_lens is not among its inputs.
        self.input_names, self.output_names = stack_input_names(spec, sequence_lens=False), stack_output_names(spec)
        keras = self.keras
        model = keras.Sequential([keras.Input((None, spec.input_size))] + [self._layer(False) for _ in range(spec.num_layers)])
        try:
            model.load_weights(str(path))
        except Exception as exc:  # noqa: BLE001  Keras's own refusal of the file is the finding
            raise RNNXError(f"Keras could not load {path.name}: {one_line(exc, CAUSE_CHARS)}") from None
        self.layers = []
        width = spec.input_size
        for loaded in model.layers:
            layer = self._layer(True)
            layer.build((None, None, width))
            layer.set_weights(loaded.get_weights())
            self.layers.append(layer)
            width = spec.output_size * spec.num_directions

    def _layer(self, states: bool) -> Any:
        keras, spec = self.keras, self.spec
        common: dict[str, Any] = dict(units=spec.hidden_size, return_sequences=True, return_state=states, use_bias=spec.bias)
        if spec.cell == "lstm":
            inner = keras.layers.LSTM(**common)
        elif spec.cell == "gru":
            inner = keras.layers.GRU(reset_after=spec.reset_after, **common)
        else:
            inner = keras.layers.SimpleRNN(activation=spec.cell[4:], **common)
        return keras.layers.Bidirectional(inner) if spec.direction == "bidirectional" else inner

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        spec, dirs = self.spec, self.spec.num_directions
        inputs = with_zero_states(spec, inputs)
        x = inputs["X"].astype(np.float32).transpose(1, 0, 2)
        h_n, c_n = [], []
        for k, layer in enumerate(self.layers):
            states = []
            for d in range(dirs):
                states.append(inputs["h0"][k * dirs + d].astype(np.float32))
                if spec.cell == "lstm":
                    states.append(inputs["c0"][k * dirs + d].astype(np.float32))
            outs = [self.keras.ops.convert_to_numpy(o) for o in layer(x, initial_state=states)]
            x = outs[0]
            per_dir = 2 if spec.cell == "lstm" else 1
            for d in range(dirs):
                h_n.append(outs[1 + d * per_dir])
                if spec.cell == "lstm":
                    c_n.append(outs[2 + d * per_dir])
        got = {"Y": x.transpose(1, 0, 2), "h_n": np.stack(h_n)}
        if spec.cell == "lstm":
            got["c_n"] = np.stack(c_n)
        return got
