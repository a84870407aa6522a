"""The cuDNN blob on a real GPU: cuDNN's own offsets, torch's own buffer, cuDNN's outputs.

Run on a GPU machine with ``pytest -m gpu tests/gpu``. Without a CUDA device every test
here skips with that reason.
"""

from __future__ import annotations

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights, parity
from rnnx.check import stack

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU with cuDNN (none found)"),
]

from rnnx.engines import cudnn_check  # noqa: E402

SPECS = [RNNSpec.parse(s) for s in cudnn_check.DEFAULT_SPECS]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_offsets_match_cudnnGetRNNWeightParams(spec: RNNSpec) -> None:
    result = cudnn_check.against_cudnn(spec)
    assert result["passed"], result


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_blob_equals_torchs_flattened_cudnn_buffer(spec: RNNSpec) -> None:
    result = cudnn_check.against_torch(spec)
    assert result["passed"], result


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_cudnn_forward_matches_reference(spec: RNNSpec, ragged: bool) -> None:
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from rnnx.engines.torch import build_module

    torch.backends.cudnn.allow_tf32 = False
    weights = RNNWeights.random(spec, seed=4)
    module = build_module(weights).cuda()
    for k, (T, B) in enumerate([(1, 1), (13, 4), (64, 9)]):
        inputs = parity.random_inputs(weights, T, B, seed=k, ragged=ragged)
        x = torch.from_numpy(inputs["X"]).cuda()
        h0 = torch.from_numpy(inputs["h0"]).cuda()
        state = (h0, torch.from_numpy(inputs["c0"]).cuda()) if spec.cell == "lstm" else h0
        with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            if ragged:
                packed = pack_padded_sequence(x, torch.from_numpy(inputs["seq_lens"].astype(np.int64)), enforce_sorted=False)
                y, final = module(packed, state)
                y, _ = pad_packed_sequence(y, total_length=T)
            else:
                y, final = module(x, state)
        got = {"Y": y.cpu().numpy()}
        if spec.cell == "lstm":
            got["h_n"], got["c_n"] = final[0].cpu().numpy(), final[1].cpu().numpy()
        else:
            got["h_n"] = final.cpu().numpy()
        rows = stack.compare("torch-cudnn", got, parity.reference_outputs(weights, inputs), T, B)
        assert all(r.passed for r in rows), rows


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
def test_rnnx_blob_in_cudnnRNNForward_matches_reference(spec: RNNSpec, ragged: bool) -> None:
    """rnnx's own blob, handed to cuDNN directly (no torch RNN code involved)."""
    from rnnx.engines.cudnn import CudnnRunner

    weights = RNNWeights.random(spec, seed=9)
    runner = CudnnRunner(weights)
    try:
        report = stack.check("cudnn", runner, weights, shapes=[(1, 1), (13, 4), (64, 9)], ragged=ragged)
    finally:
        runner.close()
    assert report, str(report)
