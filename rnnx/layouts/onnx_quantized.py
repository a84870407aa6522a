"""The recurrent ops ONNX Runtime's quantization tool writes, written once (pure numpy).

``onnxruntime.quantization.quantize_dynamic`` (its ``IntegerOps`` registry) rewrites one
recurrent op: ``LSTM`` becomes ``com.microsoft.DynamicQuantizeLSTM``; GRU and RNN nodes are
left in float. The op's schema (ONNX Runtime's contrib ops, domain ``com.microsoft``,
version 1): LSTM's eight inputs, then ``W_scale``, ``W_zero_point``, ``R_scale`` and
``R_zero_point``. Unlike ONNX's LSTM, its 8-bit W and R are stored transposed:
W ``[num_directions, input_size, 4*hidden]`` and R ``[num_directions, hidden, 4*hidden]``,
gates in ONNX's ``i, o, f, c`` order along the last axis. Scales (float) and zero points
(the weights' int8 or uint8) are ``[num_directions]`` per tensor or
``[num_directions, 4*hidden]`` per output channel. The real value of a weight is
``(q - zero_point) * scale``. X and the hidden state stay float: the kernel quantizes them
to uint8 on each call (dynamic quantization). B, P and the initial states stay float too.
"""

from __future__ import annotations

import numpy as np

from rnnx.errors import RNNXError

DOMAIN = "com.microsoft"
#: quantized op -> the float ONNX op it stands for
QUANTIZED_OPS = {"DynamicQuantizeLSTM": "LSTM"}
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P", "W_scale", "W_zero_point", "R_scale", "R_zero_point")
#: the quantized weights: name -> (position of the 8-bit tensor, of its scale, of its zero point)
QUANTIZED_WEIGHTS = {"W": (1, 8, 9), "R": (2, 10, 11)}
FLOAT_INPUTS = ("B", "initial_c", "P")  # stored or fed in float and used in float, as in ONNX's LSTM
DYNAMIC_INPUTS = ("X", "h (initial_h, then each step's)")  # float, quantized to uint8 by the kernel on each call
WEIGHT_TYPES = ("int8", "uint8")
GATES = 4  # LSTM: i, o, f, c


def granularity(scale: np.ndarray) -> str:
    """``per-tensor`` (one scale per direction) or ``per-channel`` (one per output row)."""
    return "per-tensor" if scale.ndim == 1 else "per-channel"


def dequantize(name: str, q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, where: str) -> np.ndarray:
    """The float weights ``(q - zero_point) * scale`` of an 8-bit W or R, in ONNX LSTM's layout
    ``[num_directions, 4*hidden, columns]`` (float32, the type the kernel computes in)."""
    q, scale, zero_point = np.asarray(q), np.asarray(scale), np.asarray(zero_point)
    if q.ndim != 3 or q.dtype.name not in WEIGHT_TYPES or q.shape[2] % GATES:
        raise RNNXError(f"{where}: {name} must be int8 or uint8 of shape [num_directions, columns, 4*hidden], found {q.dtype} {list(q.shape)}")
    dirs, rows = q.shape[0], q.shape[2]
    if scale.shape not in ((dirs,), (dirs, rows)) or zero_point.shape != scale.shape:
        raise RNNXError(f"{where}: {name}_scale and {name}_zero_point must both be [{dirs}] (per tensor) or [{dirs}, {rows}] (per channel), "
                        f"found {list(scale.shape)} and {list(zero_point.shape)}; the file is damaged")
    if zero_point.dtype != q.dtype or scale.dtype.kind != "f":
        raise RNNXError(f"{where}: {name}_zero_point must have {name}'s type {q.dtype} and {name}_scale must be float, "
                        f"found {zero_point.dtype} and {scale.dtype}; the file is damaged")
    if not np.all(np.isfinite(scale)):
        bad = scale[~np.isfinite(scale)]
        kind = "NaN" if np.isnan(bad).any() else "infinity"
        raise RNNXError(f"{where}: {name}_scale must be finite, found {kind} in {bad.size} of its {scale.size} value(s); the file is damaged")
    per_row = scale.reshape(dirs, 1, -1).astype(np.float64)
    offset = zero_point.reshape(dirs, 1, -1).astype(np.int32)
    real = (q.astype(np.int32) - offset) * per_row  # [dirs, columns, 4*hidden]
    return np.ascontiguousarray(real.transpose(0, 2, 1)).astype(np.float32)


def row_scales(scale: np.ndarray, rows: int) -> np.ndarray:
    """Each output row's scale, ``[num_directions, 4*hidden]``, per tensor or per channel."""
    scale = np.asarray(scale, np.float64)
    return np.repeat(scale[:, None], rows, axis=1) if scale.ndim == 1 else scale
