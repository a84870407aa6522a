"""Whether this machine's ONNX Runtime saturates its int8 LSTM, found by running it.

ONNX Runtime's ``DynamicQuantizeLSTM`` multiplies uint8 activations by int8 weights in
MLAS's u8 x s8 kernels. Which kernel runs is chosen from CPUID at run time: on an x86 CPU
with AVX2 but no VNNI, ``vpmaddubsw`` sums each pair of adjacent products into int16 with
saturation, so two products of 255 x 127 (64770) come out as 32767. With AVX512-VNNI or
AVX-VNNI (``vpdpbusd``) the sums are 32-bit and exact; on ARM the kernel is exact too.
Reading ``/proc/cpuinfo`` only guesses at that choice (and cannot see a masked CPUID or a
build without the VNNI kernels), so the behaviour itself is measured, once per process:
one DynamicQuantizeLSTM step whose exact and saturated results differ by about 0.04.
"""

from __future__ import annotations

import functools

import numpy as np

from rnnx.engines.ort_options import session_options

INPUT_SIZE = 8
# W = 127 * W_SCALE on every column of the cell gate (ONNX order i, o, f, c); x = 1.0, which
# the kernel quantizes to 255. Exact pre-activation: 8 * 1.0 * 0.25 = 2.0; saturated pair
# sums give 4 * 32767 / (255 * 127) * 2 * 0.25 ~= 1.01. The other gates' pre-activation is 0.
W_SCALE = 0.25 / 127


def _probe_model() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = np.zeros((1, INPUT_SIZE, 4), np.int8)  # [dirs, input_size, 4*hidden], hidden 1
    w[0, :, 3] = 127
    r = np.zeros((1, 1, 4), np.int8)
    inits = [
        numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
        numpy_helper.from_array(np.array([W_SCALE], np.float32), "W_scale"), numpy_helper.from_array(np.zeros(1, np.int8), "W_zp"),
        numpy_helper.from_array(np.array([1.0], np.float32), "R_scale"), numpy_helper.from_array(np.zeros(1, np.int8), "R_zp"),
    ]
    node = helper.make_node("DynamicQuantizeLSTM", ["X", "W", "R", "", "", "", "", "", "W_scale", "W_zp", "R_scale", "R_zp"],
                            ["", "Y_h"], domain="com.microsoft", hidden_size=1)
    graph = helper.make_graph([node], "int8_probe", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, INPUT_SIZE])],
                              [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _h(pre_activation: float) -> float:
    """h after one step from zero states, i = f = o = sigmoid(0), c = i * tanh(pre)."""
    c = 0.5 * np.tanh(pre_activation)
    return float(0.5 * np.tanh(c))


@functools.lru_cache(maxsize=1)
def int8_pair_sums_saturate() -> bool | None:
    """True where this ONNX Runtime's int8 LSTM saturates int16 pair sums, False where its
    products are summed exactly, None where it cannot be told (no ONNX Runtime, or the
    probe lands on neither)."""
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(_probe_model(), session_options(), providers=["CPUExecutionProvider"])
        got = float(session.run(None, {"X": np.ones((1, 1, INPUT_SIZE), np.float32)})[0].ravel()[0])
    except Exception:  # no ONNX Runtime, or one without the contrib op: nothing to say
        return None
    exact = _h(INPUT_SIZE * 255 * 127 * W_SCALE / 255)
    saturated = _h(INPUT_SIZE // 2 * 32767 * W_SCALE / 255)
    if abs(got - exact) < 1e-3:
        return False
    if abs(got - saturated) < 1e-3:
        return True
    return None
