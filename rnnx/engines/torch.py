"""PyTorch runner: builds the nn module a spec describes, loads canonical weights, runs it."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.formats import torch as torch_format
from rnnx.weights import RNNWeights


def build_module(weights: RNNWeights, batch_first: bool = False) -> Any:
    """An nn.LSTM / nn.GRU / nn.RNN in eval mode holding ``weights`` (float32 or float64)."""
    torch = torch_format._import_torch("building a torch module")
    spec = weights.spec
    common = dict(
        input_size=spec.input_size,
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        bias=spec.bias,
        batch_first=batch_first,
        bidirectional=spec.direction == "bidirectional",
    )
    if spec.cell == "lstm":
        module = torch.nn.LSTM(proj_size=spec.proj_size, **common)
    elif spec.cell == "gru":
        module = torch.nn.GRU(**common)
    else:
        module = torch.nn.RNN(nonlinearity=spec.cell.removeprefix("rnn_"), **common)
    module = module.to(torch.float64 if weights.dtype == np.float64 else torch.float32)
    module.load_state_dict(torch_format.to_native(weights), strict=True)
    return module.eval()


class TorchRunner:
    """Runs the module with X, h0, c0 (and seq_lens as a packed sequence) like the ONNX stack."""

    device = "cpu"

    def __init__(self, weights: RNNWeights, batch_first: bool = False) -> None:
        self.precision = "fp64" if weights.dtype == np.float64 else "fp32"
        self.spec = weights.spec
        self.batch_first = batch_first
        self.module = build_module(weights, batch_first)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        want = np.float64 if self.precision == "fp64" else np.float32
        if inputs["X"].dtype != want:
            raise RNNXError(f"the torch runner holds {np.dtype(want).name} weights; found {inputs['X'].dtype} inputs")
        x = torch.from_numpy(np.ascontiguousarray(inputs["X"]))
        state: Any = None  # no states given: torch starts from zeros, as ONNX does
        if "h0" in inputs:
            h0 = torch.from_numpy(inputs["h0"])
            state = (h0, torch.from_numpy(inputs["c0"])) if self.spec.cell == "lstm" else h0
        with torch.no_grad():
            if "seq_lens" in inputs:
                total = x.shape[1 if self.batch_first else 0]
                packed = pack_padded_sequence(x, torch.from_numpy(inputs["seq_lens"].astype(np.int64)), batch_first=self.batch_first, enforce_sorted=False)
                y, final = self.module(packed, state)
                y, _ = pad_packed_sequence(y, batch_first=self.batch_first, total_length=total)
            else:
                y, final = self.module(x, state)
        out = {"Y": y.numpy()}
        if self.spec.cell == "lstm":
            out["h_n"], out["c_n"] = final[0].numpy(), final[1].numpy()
        else:
            out["h_n"] = final.numpy()
        return out
