"""cuDNN 9 through ctypes: ask cuDNN itself where each weight lives in its weight space.

No compiled extension: the libcudnn that the nvidia-cudnn wheels (or torch) bring is
loaded with ctypes, and only the v8 RNN API that cuDNN 9 kept is used
(cudnnSetRNNDescriptor_v8, cudnnGetRNNWeightSpaceSize, cudnnGetRNNWeightParams).
"""

from __future__ import annotations

import ctypes
import glob
import os
from dataclasses import dataclass
from typing import Any

from rnnx.errors import RNNXError
from rnnx.layouts.cudnn import LIN_LAYER_IDS, PROJ_LIN_LAYER_ID, check_expressible
from rnnx.spec import RNNSpec

# Enum values from cudnn_adv.h / cudnn_graph.h (cuDNN 9).
CELL_MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
BIAS_NONE, BIAS_DOUBLE = 0, 2
DIR_UNI, DIR_BI = 0, 1
LINEAR_INPUT = 0
DATA_FLOAT = 0
DEFAULT_MATH = 0
# FMA only: no TF32 tensor-core conversion of float32 (cuDNN's default allows it on Ampere and later).
FMA_MATH = 3
ALGO_STANDARD = 0
PADDED_IO_ENABLED = 1


def _candidates() -> list[str]:
    paths = []
    try:
        import nvidia.cudnn  # the nvidia-cudnn wheels

        for root in nvidia.cudnn.__path__:
            paths += sorted(glob.glob(os.path.join(root, "lib", "libcudnn.so*")))
    except ImportError:
        pass
    try:
        import torch

        paths += sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudnn.so*")))
    except ImportError:
        pass
    return paths + ["libcudnn.so.9", "libcudnn.so"]


def load_libcudnn() -> ctypes.CDLL:
    errors = []
    for name in _candidates():
        try:
            lib = ctypes.CDLL(name)
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            if lib.cudnnGetVersion() < 90000:
                errors.append(f"{name}: version {lib.cudnnGetVersion()} is older than 9")
                continue
            return lib
        except OSError as exc:
            errors.append(str(exc))
    raise RNNXError("cuDNN 9 not found: install nvidia-cudnn-cu12 (or cu13) or a CUDA build of torch; tried " + "; ".join(errors[:3]))


def _check(status: int, call: str, lib: ctypes.CDLL) -> None:
    if status != 0:
        lib.cudnnGetErrorString.restype = ctypes.c_char_p
        raise RNNXError(f"{call} failed: {lib.cudnnGetErrorString(status).decode()} (status {status})")


@dataclass(frozen=True)
class CudnnParam:
    pseudo_layer: int
    lin_layer_id: int
    kind: str  # "matrix" or "bias"
    offset: int  # in elements
    shape: tuple[int, ...]


class CudnnRNN:
    """A cuDNN RNN descriptor for a spec (float32), with a handle; free with close()."""

    def __init__(self, spec: RNNSpec, lib: ctypes.CDLL | None = None, math_type: int = FMA_MATH) -> None:
        check_expressible(spec)
        self.spec = spec
        self.lib = lib = lib or load_libcudnn()
        self.handle, self.rnn, self.dropout = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.cudnnCreate(ctypes.byref(self.handle)), "cudnnCreate", lib)
        _check(lib.cudnnCreateRNNDescriptor(ctypes.byref(self.rnn)), "cudnnCreateRNNDescriptor", lib)
        _check(lib.cudnnCreateDropoutDescriptor(ctypes.byref(self.dropout)), "cudnnCreateDropoutDescriptor", lib)
        _check(
            lib.cudnnSetDropoutDescriptor(self.dropout, self.handle, ctypes.c_float(0.0), None, ctypes.c_size_t(0), ctypes.c_ulonglong(0)),
            "cudnnSetDropoutDescriptor",
            lib,
        )
        status = lib.cudnnSetRNNDescriptor_v8(
            self.rnn,
            ALGO_STANDARD,
            CELL_MODES[spec.cell],
            BIAS_DOUBLE if spec.bias else BIAS_NONE,
            DIR_BI if spec.direction == "bidirectional" else DIR_UNI,
            LINEAR_INPUT,
            DATA_FLOAT,
            DATA_FLOAT,
            math_type,
            ctypes.c_int32(spec.input_size),
            ctypes.c_int32(spec.hidden_size),
            ctypes.c_int32(spec.output_size),
            ctypes.c_int32(spec.num_layers),
            self.dropout,
            ctypes.c_uint32(PADDED_IO_ENABLED),
        )
        _check(status, "cudnnSetRNNDescriptor_v8", lib)

    def weight_space_size(self) -> int:
        size = ctypes.c_size_t()
        _check(self.lib.cudnnGetRNNWeightSpaceSize(self.handle, self.rnn, ctypes.byref(size)), "cudnnGetRNNWeightSpaceSize", self.lib)
        return size.value

    def weight_params(self, weight_space_ptr: int) -> list[CudnnParam]:
        """Every matrix and bias cuDNN reports, as element offsets into the weight space."""
        lib, spec = self.lib, self.spec
        size = self.weight_space_size()
        ids = sorted(set(LIN_LAYER_IDS[spec.cell]["W"].values()) | set(LIN_LAYER_IDS[spec.cell]["R"].values()))
        if spec.proj_size:
            ids.append(PROJ_LIN_LAYER_ID)
        m_desc, b_desc = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.cudnnCreateTensorDescriptor(ctypes.byref(m_desc)), "cudnnCreateTensorDescriptor", lib)
        _check(lib.cudnnCreateTensorDescriptor(ctypes.byref(b_desc)), "cudnnCreateTensorDescriptor", lib)
        params = []
        try:
            for p in range(spec.num_layers * spec.num_directions):
                for lin_id in ids:
                    m_addr, b_addr = ctypes.c_void_p(), ctypes.c_void_p()
                    status = lib.cudnnGetRNNWeightParams(
                        self.handle, self.rnn, ctypes.c_int32(p), ctypes.c_size_t(size), ctypes.c_void_p(weight_space_ptr),
                        ctypes.c_int32(lin_id), m_desc, ctypes.byref(m_addr), b_desc, ctypes.byref(b_addr),
                    )
                    _check(status, f"cudnnGetRNNWeightParams(pseudo_layer={p}, linLayerID={lin_id})", lib)
                    for kind, addr, desc in (("matrix", m_addr, m_desc), ("bias", b_addr, b_desc)):
                        if addr.value:
                            params.append(CudnnParam(p, lin_id, kind, (addr.value - weight_space_ptr) // 4, self._dims(desc)))
        finally:
            lib.cudnnDestroyTensorDescriptor(m_desc)
            lib.cudnnDestroyTensorDescriptor(b_desc)
        return params

    def _dims(self, desc: Any) -> tuple[int, ...]:
        dtype, nb = ctypes.c_int(), ctypes.c_int()
        dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
        _check(self.lib.cudnnGetTensorNdDescriptor(desc, 8, ctypes.byref(dtype), ctypes.byref(nb), dims, strides), "cudnnGetTensorNdDescriptor", self.lib)
        return tuple(dims[i] for i in range(nb.value))

    def close(self) -> None:
        self.lib.cudnnDestroyDropoutDescriptor(self.dropout)
        self.lib.cudnnDestroyRNNDescriptor(self.rnn)
        self.lib.cudnnDestroy(self.handle)

    def __enter__(self) -> CudnnRNN:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
