"""Hold rnnx's cuDNN offset table against cuDNN and PyTorch on a real GPU.

Three independent witnesses, each compared offset by offset with
:func:`rnnx.layouts.cudnn.offset_table`:

- ``cudnnGetRNNWeightParams``: where cuDNN 9 itself says each matrix and bias lies;
- ``torch._cudnn_rnn_flatten_weight``: the flat buffer PyTorch builds for cuDNN, compared
  element by element with rnnx's packed blob of the same weights (for ``no_bias`` PyTorch
  appends a zero bias block, since it always uses double-bias mode);
- the storage offsets of a CUDA module's parameters after ``flatten_parameters()``.

Run ``python -m rnnx.engines.cudnn_check`` on a GPU machine for a JSON report.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from rnnx.engines.cudnn_lib import CudnnRNN
from rnnx.engines.torch import build_module
from rnnx.layouts import cudnn
from rnnx.layouts.torch import GATE_ORDER
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

#: The specs ``rnnx doctor`` and ``python -m rnnx.engines.cudnn_check`` hold against cuDNN:
#: every cell kind at 1 to 3 layers in both directions, projections with and without bias,
#: ``no_bias`` for each kind, and odd sizes (input 1, hidden 1 or 3) where an off-by-one in
#: a stride or a transposed block cannot hide behind a square matrix.
DEFAULT_SPECS: tuple[str, ...] = (
    "lstm,input=5,hidden=7,layers=2,bidirectional,proj=3",
    "lstm,input=6,hidden=8,layers=3",
    "lstm,input=4,hidden=6,layers=2,proj=2,no_bias",
    "gru,input=5,hidden=7,layers=2,bidirectional",
    "gru,input=3,hidden=4,no_bias",
    "rnn_tanh,input=3,hidden=5,layers=2",
    "rnn_relu,input=4,hidden=6,layers=2,bidirectional,no_bias",
    *(
        f"{cell},input={2 + layers},hidden={3 + 2 * layers}" + (f",layers={layers}" if layers > 1 else "") + direction
        for cell in ("lstm", "gru", "rnn_tanh", "rnn_relu")
        for layers in (1, 2, 3)
        for direction in ("", ",bidirectional")
    ),
    "lstm,input=3,hidden=5,proj=4",
    "lstm,input=3,hidden=5,layers=3,bidirectional,proj=1",
    "lstm,input=2,hidden=6,proj=3,no_bias,bidirectional",
    "lstm,input=4,hidden=4,layers=2,no_bias",
    "rnn_tanh,input=2,hidden=3,layers=3,no_bias",
    "lstm,input=1,hidden=3",
    "gru,input=1,hidden=3,layers=2,bidirectional",
    "rnn_relu,input=1,hidden=1",
    "lstm,input=1,hidden=3,layers=2,proj=1,bidirectional",
)


def _squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def against_cudnn(spec: RNNSpec) -> dict[str, Any]:
    import torch


    ours = {(e.pseudo_layer, e.lin_layer_id, "bias" if e.is_bias else "matrix"): e for e in cudnn.offset_table(spec)}
    with CudnnRNN(spec) as rnn:
        size = rnn.weight_space_size()
        space = torch.empty(size, dtype=torch.uint8, device="cuda")
        params = rnn.weight_params(space.data_ptr())
    mismatches = []
    for p in params:
        e = ours.pop((p.pseudo_layer, p.lin_layer_id, p.kind), None)
        if e is None or e.offset != p.offset or _squeeze(e.shape) != _squeeze(p.shape):
            mismatches.append({"cudnn": p.__dict__, "rnnx": None if e is None else {"offset": e.offset, "shape": e.shape}})
    mismatches += [{"cudnn": None, "rnnx": {"key": k, "offset": e.offset}} for k, e in ours.items()]
    return {
        "weight_space_bytes": size,
        "rnnx_bytes": cudnn.blob_size(spec) * 4,
        "params_compared": len(params),
        "mismatches": mismatches[:5],
        "passed": not mismatches and size == cudnn.blob_size(spec) * 4,
    }


def against_torch(spec: RNNSpec, seed: int = 0) -> dict[str, Any]:
    import torch


    weights = RNNWeights.random(spec, seed=seed)
    blob = cudnn.to_native(weights)
    module = build_module(weights).cuda()
    module.flatten_parameters()
    flat = module._flat_weights  # views into one buffer after flatten_parameters()
    base = {t.untyped_storage().data_ptr() for t in flat}
    offsets = {name: t.storage_offset() for name, t in zip(module._flat_weights_names, flat)}
    state_names = _torch_names(spec)
    table_offsets = {state_names[e.canonical_name]: e.offset for e in cudnn.offset_table(spec) if e.canonical_name in state_names}
    buffer = torch._cudnn_rnn_flatten_weight(
        flat,
        len(flat) // (spec.num_layers * spec.num_directions),
        spec.input_size,
        {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}[spec.cell],
        spec.hidden_size,
        spec.proj_size,
        spec.num_layers,
        False,
        spec.direction == "bidirectional",
    ).detach().cpu().numpy()
    # PyTorch runs bias=False modules in cuDNN's double-bias mode with zero biases (seen on
    # torch 2.11 / cuDNN 9.19): its buffer is rnnx's no-bias blob followed by a zero bias block.
    n_zero_biases = 0 if spec.bias else 2 * len(spec.gates) * spec.hidden_size * spec.num_layers * spec.num_directions
    buffer_ok = bool(
        buffer.size == blob.size + n_zero_biases and np.array_equal(buffer[: blob.size], blob) and not np.any(buffer[blob.size :])
    )
    return {
        "one_buffer": len(base) == 1,
        "storage_offsets_equal": offsets == table_offsets,
        "flatten_buffer_equal": buffer_ok,
        "torch_buffer_elements": int(buffer.size),
        "rnnx_blob_elements": int(blob.size),
        "passed": len(base) == 1 and offsets == table_offsets and buffer_ok,
    }


def _torch_names(spec: RNNSpec) -> dict[str, str]:
    """Canonical name of each gate-stack's *first* gate -> torch parameter name.

    A torch parameter (e.g. weight_ih_l0) starts where its first gate (in torch order) starts.
    """
    first = GATE_ORDER[spec.cell][0]
    names = {}
    for layer in range(spec.num_layers):
        for d in spec.directions:
            sfx = f"_l{layer}" + ("_reverse" if d == "reverse" else "")
            pairs = [("W", "weight_ih"), ("R", "weight_hh")] + ([("bW", "bias_ih"), ("bR", "bias_hh")] if spec.bias else [])
            for kind, torch_name in pairs:
                names[f"l{layer}.{d}.{kind}.{first}"] = f"{torch_name}{sfx}"
            if spec.proj_size:
                names[f"l{layer}.{d}.proj"] = f"weight_hr{sfx}"
    return names


def main(argv: list[str] | None = None) -> int:
    import torch

    specs = argv or list(DEFAULT_SPECS)
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "specs": {},
    }
    ok = True
    for text in specs:
        spec = RNNSpec.parse(text)
        row = {"cudnnGetRNNWeightParams": against_cudnn(spec), "torch": against_torch(spec)}
        ok &= row["cudnnGetRNNWeightParams"]["passed"] and row["torch"]["passed"]
        report["specs"][str(spec)] = row
    report["passed"] = ok
    print(json.dumps(report, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
