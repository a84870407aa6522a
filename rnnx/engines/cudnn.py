"""cuDNN runner: rnnx's packed blob straight into ``cudnnRNNForward`` (cuDNN 9, via ctypes).

GPU memory comes from PyTorch's allocator (torch is only the memory manager here; the
RNN itself is cuDNN's, called by rnnx). float32, inference mode, padded sequence-major
I/O with per-sequence lengths.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from rnnx.engines.cudnn_lib import DATA_FLOAT, CudnnRNN, _check
from rnnx.engines.rules import BackendRules, Rule, default_activations, same_activations
from rnnx.engines.runner import stack_input_names, stack_output_names, with_zero_states
from rnnx.errors import RNNXError
from rnnx.layouts import cudnn as cudnn_format
from rnnx.weights import RNNWeights

FWD_MODE_INFERENCE = 0
SEQ_MAJOR_UNPACKED = 0


def _other_activations(node: Any) -> bool:
    default = default_activations(node)
    return bool(node.activations) and (default is None or not same_activations(node.activations, default))


#: What cuDNN's RNN modes (cudnnRNNMode_t, cudnnSetRNNDescriptor_v8) cannot express in an
#: ONNX LSTM/GRU/RNN node. A prediction: cuDNN does not run in ``rnnx inspect``.
RNN_MODE_RULES = BackendRules(
    "cudnn",
    "predicted from cuDNN's documented RNN modes; not run",
    (
        Rule(lambda n: n.peepholes, lambda n: "peepholes: cuDNN LSTMs have none"),
        Rule(lambda n: n.op_type == "GRU" and n.linear_before_reset != 1, lambda n: "linear_before_reset=0: cuDNN GRUs reset after the recurrent product"),
        Rule(lambda n: n.clip is not None, lambda n: f"clip={n.clip}: cuDNN has no cell clipping"),
        Rule(_other_activations, lambda n: f"activations {n.activations}: cuDNN has only the defaults"),
        Rule(lambda n: n.direction == "reverse", lambda n: "reverse-only: cuDNN has unidirectional and bidirectional modes only"),
        Rule(lambda n: bool(n.input_forget), lambda n: "input_forget=1: cuDNN has no coupled gates"),
    ),
)


class CudnnRunner:
    """Named numpy inputs (X, h0, c0, seq_lens) in, named outputs (Y, h_n, c_n) out."""

    device = "cuda"
    precision = "fp32"

    def __init__(self, weights: RNNWeights) -> None:
        try:
            import torch
        except ImportError:
            raise RNNXError("the cuDNN runner allocates GPU memory through PyTorch; pip install a CUDA build of torch") from None
        if not torch.cuda.is_available():
            raise RNNXError("the cuDNN runner needs a CUDA GPU; none is visible")
        self.torch = torch
        self.spec = weights.spec
        self.input_names, self.output_names = stack_input_names(self.spec), stack_output_names(self.spec)
        self.rnn = CudnnRNN(self.spec)
        blob = cudnn_format.to_native(weights.astype(np.float32))
        if self.rnn.weight_space_size() != blob.nbytes:
            raise RNNXError(f"cuDNN wants {self.rnn.weight_space_size()} bytes of weights for {self.spec}, rnnx packed {blob.nbytes}")
        self.weights = torch.from_numpy(blob).cuda()

    def _data_desc(self, T: int, B: int, size: int, lens: np.ndarray) -> ctypes.c_void_p:
        lib, desc = self.rnn.lib, ctypes.c_void_p()
        _check(lib.cudnnCreateRNNDataDescriptor(ctypes.byref(desc)), "cudnnCreateRNNDataDescriptor", lib)
        fill = ctypes.c_float(0.0)
        lens_c = (ctypes.c_int * B)(*lens.tolist())
        status = lib.cudnnSetRNNDataDescriptor(desc, DATA_FLOAT, SEQ_MAJOR_UNPACKED, T, B, size, lens_c, ctypes.byref(fill))
        _check(status, "cudnnSetRNNDataDescriptor", lib)
        return desc

    def _tensor_desc(self, dims: tuple[int, int, int]) -> ctypes.c_void_p:
        lib, desc = self.rnn.lib, ctypes.c_void_p()
        _check(lib.cudnnCreateTensorDescriptor(ctypes.byref(desc)), "cudnnCreateTensorDescriptor", lib)
        strides = (dims[1] * dims[2], dims[2], 1)
        status = lib.cudnnSetTensorNdDescriptor(desc, DATA_FLOAT, 3, (ctypes.c_int * 3)(*dims), (ctypes.c_int * 3)(*strides))
        _check(status, "cudnnSetTensorNdDescriptor", lib)
        return desc

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch, spec, lib = self.torch, self.spec, self.rnn.lib
        inputs = with_zero_states(spec, inputs)
        x = np.ascontiguousarray(inputs["X"], dtype=np.float32)
        T, B, _ = x.shape
        n = spec.num_layers * spec.num_directions
        out_size = spec.num_directions * spec.output_size
        lens = np.asarray(inputs.get("seq_lens", np.full(B, T)), dtype=np.int32)
        h0 = inputs["h0"]
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).cuda()  # noqa: E731
        x_d, h0_d = dev(x), dev(h0)
        y_d = torch.zeros((T, B, out_size), dtype=torch.float32, device="cuda")
        hy_d = torch.zeros((n, B, spec.output_size), dtype=torch.float32, device="cuda")
        is_lstm = spec.cell == "lstm"
        c0_d = dev(inputs["c0"]) if is_lstm else None
        cy_d = torch.zeros((n, B, spec.hidden_size), dtype=torch.float32, device="cuda") if is_lstm else None
        lens_d = torch.from_numpy(lens).cuda()
        x_desc = self._data_desc(T, B, spec.input_size, lens)
        y_desc = self._data_desc(T, B, out_size, lens)
        h_desc = self._tensor_desc((n, B, spec.output_size))
        c_desc = self._tensor_desc((n, B, spec.hidden_size))
        try:
            work, reserve = ctypes.c_size_t(), ctypes.c_size_t()
            status = lib.cudnnGetRNNTempSpaceSizes(self.rnn.handle, self.rnn.rnn, FWD_MODE_INFERENCE, x_desc, ctypes.byref(work), ctypes.byref(reserve))
            _check(status, "cudnnGetRNNTempSpaceSizes", lib)
            work_d = torch.empty(max(work.value, 1), dtype=torch.uint8, device="cuda")
            ptr = lambda t: ctypes.c_void_p(t.data_ptr() if t is not None else 0)  # noqa: E731
            torch.cuda.synchronize()
            status = lib.cudnnRNNForward(
                self.rnn.handle, self.rnn.rnn, FWD_MODE_INFERENCE, ptr(lens_d),
                x_desc, ptr(x_d), y_desc, ptr(y_d),
                h_desc, ptr(h0_d), ptr(hy_d),
                c_desc, ptr(c0_d), ptr(cy_d),
                ctypes.c_size_t(self.weights.numel() * 4), ptr(self.weights),
                ctypes.c_size_t(work.value), ptr(work_d),
                ctypes.c_size_t(0), ctypes.c_void_p(0),
            )
            _check(status, "cudnnRNNForward", lib)
            torch.cuda.synchronize()
        finally:
            for d in (x_desc, y_desc):
                lib.cudnnDestroyRNNDataDescriptor(d)
            for d in (h_desc, c_desc):
                lib.cudnnDestroyTensorDescriptor(d)
        result: dict[str, Any] = {"Y": y_d.cpu().numpy(), "h_n": hy_d.cpu().numpy()}
        if is_lstm:
            result["c_n"] = cy_d.cpu().numpy()  # type: ignore[union-attr]
        return result

    def close(self) -> None:
        self.rnn.close()
