"""PyTorch runner: builds the nn module a spec describes, loads canonical weights, runs it."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnx.engines.runner import stack_input_names, stack_output_names, with_zero_states
from rnnx.errors import RNNXError
from rnnx.formats import torch as torch_format
from rnnx.weights import RNNWeights


def build_module(weights: RNNWeights, batch_first: bool = False) -> Any:
    """An nn.LSTM / nn.GRU / nn.RNN in eval mode holding ``weights`` (float32 or float64)."""
    torch = torch_format._import_torch("building a torch module")
    spec = weights.spec
    common: dict[str, Any] = dict(
        input_size=spec.input_size,
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        bias=spec.bias,
        batch_first=batch_first,
        bidirectional=spec.direction == "bidirectional",
    )
    # Made on the meta device and given the weights' own tensors (assign=True): a large model
    # is held once, not initialised at random and then copied over.
    common["device"] = "meta"
    common["dtype"] = torch.float64 if weights.dtype == np.float64 else torch.float32
    if spec.cell == "lstm":
        module = torch.nn.LSTM(proj_size=spec.proj_size, **common)
    elif spec.cell == "gru":
        module = torch.nn.GRU(**common)
    else:
        module = torch.nn.RNN(nonlinearity=spec.cell.removeprefix("rnn_"), **common)
    module.load_state_dict(torch_format.to_native(weights), strict=True, assign=True)
    return module.eval()


#: What the runner computes in -> (its ``precision``, the numpy dtype that carries its inputs
#: and outputs). numpy has no bfloat16: bfloat16 values travel in float32 arrays (exactly).
DTYPES = {"float32": ("fp32", np.float32), "float64": ("fp64", np.float64), "float16": ("fp16", np.float16), "bfloat16": ("bf16", np.float32)}


class TorchRunner:
    """Runs the module with X, h0, c0 (and seq_lens as a packed sequence) like the ONNX stack;
    a state not fed starts at zeros.

    ``dtype`` (``float32``, ``float64``, ``float16`` or ``bfloat16``; default: the weights'
    float32 or float64) is what the module computes in, on the CPU: weights and inputs are
    rounded to it. Inputs must come in the carrier of :data:`DTYPES` (float16 arrays for
    float16, float32 arrays for bfloat16), so that a caller never runs a dtype it did not ask for.
    """

    device = "cpu"

    def __init__(self, weights: RNNWeights, batch_first: bool = False, dtype: str | None = None) -> None:
        dtype = dtype or ("float64" if weights.dtype == np.float64 else "float32")
        if dtype not in DTYPES:
            raise RNNXError(f"the torch runner computes in {', '.join(DTYPES)}; found {dtype!r}")
        self.dtype = dtype
        self.precision, self.carrier = DTYPES[dtype]
        self.spec = weights.spec
        self.batch_first = batch_first
        self.input_names, self.output_names = stack_input_names(self.spec), stack_output_names(self.spec)
        torch = torch_format._import_torch("building a torch module")
        held = np.dtype(np.float64 if dtype == "float64" else np.float32)
        self.module = build_module(weights if weights.dtype == held else weights.astype(held), batch_first).to(getattr(torch, dtype))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        # torch takes an LSTM's h0 and c0 together or not at all: fill the one not fed with zeros.
        inputs = with_zero_states(self.spec, inputs, self.batch_first)
        if inputs["X"].dtype != self.carrier:
            raise RNNXError(f"the torch runner computes in {self.dtype} and takes {np.dtype(self.carrier).name} inputs; found {inputs['X'].dtype}")
        kind = getattr(torch, self.dtype)
        tensor = lambda name: torch.from_numpy(np.ascontiguousarray(inputs[name])).to(kind)  # noqa: E731
        x = tensor("X")
        state: Any = (tensor("h0"), tensor("c0")) if self.spec.cell == "lstm" else tensor("h0")
        with torch.no_grad():
            if "seq_lens" in inputs:
                total = x.shape[1 if self.batch_first else 0]
                packed = pack_padded_sequence(x, torch.from_numpy(inputs["seq_lens"].astype(np.int64)), batch_first=self.batch_first, enforce_sorted=False)
                y, final = self.module(packed, state)
                y, _ = pad_packed_sequence(y, batch_first=self.batch_first, total_length=total)
            else:
                y, final = self.module(x, state)
        carry = lambda t: t.to(torch.float32).numpy() if t.dtype == torch.bfloat16 else t.numpy()  # noqa: E731
        out = {"Y": carry(y)}
        if self.spec.cell == "lstm":
            out["h_n"], out["c_n"] = carry(final[0]), carry(final[1])
        else:
            out["h_n"] = carry(final)
        return out
