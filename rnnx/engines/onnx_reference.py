"""An ONNX file run by ONNX's own reference evaluator in another float precision.

ONNX Runtime's CPU provider has no float64 kernels for LSTM, GRU, RNN or Conv, so the float64
reference of a whole file (a Conv front end, a recurrence, a head) is run by
``onnx.reference.ReferenceEvaluator``, the format's own numpy implementation of every
operator, on a copy of the graph whose floating tensors are all float64: initializers,
constants, Cast targets, inputs and outputs, in subgraphs too. Its recurrences are ONNX's
reference definitions (gate orders i,o,f,c and z,r,h), which rnnx's tests pin against torch.
ONNX's reference LSTM, GRU and RNN ignore ``sequence_lens`` (onnx 1.23's op_lstm.py marks it
unused), so here each sequence of a batch given lengths runs alone, over its own frames: its
outputs past its end are zeros and its final states are those at its last frame, as the
operators define and as ONNX Runtime and torch's packed sequences compute.

The same copy in float16 is an honest float16 computation of the file (numpy rounds every
operator's result to float16): the rounding floor of an engine built in fp16. In ``tf32`` the
file computes in float32 with every matrix product's and convolution's inputs rounded to TF32's
10-bit mantissa, the recurrences' per-step products included (their state at each step): the
rounding floor of an engine TensorRT builds with TF32 on an Ampere or later GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnx.errors import CAUSE_CHARS, RNNXError, one_line

_FLOATS = (1, 10, 11, 16)  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_TYPES = {"float64": (11, np.float64), "float16": (10, np.float16), "float32": (1, np.float32), "tf32": (1, np.float32)}


def retyped(proto: Any, dtype: str) -> Any:
    """A copy of ``proto`` whose floating tensors are all ``dtype`` (``float64``, ``float16``)."""
    import onnx

    elem, np_type = _TYPES[dtype]
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    _retype_graph(copy.graph, elem, np_type)
    return copy


def _retype_graph(graph: Any, elem: int, np_type: Any) -> None:
    from onnx import AttributeProto, numpy_helper

    for tensor in graph.initializer:
        if tensor.data_type in _FLOATS:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np_type), tensor.name))
    del graph.value_info[:]  # shape inference would hold the old types
    for value in (*graph.input, *graph.output):
        if value.type.tensor_type.elem_type in _FLOATS:
            value.type.tensor_type.elem_type = elem
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i in _FLOATS:
                attribute.i = elem
            elif attribute.type == AttributeProto.TENSOR and attribute.t.data_type in _FLOATS:
                attribute.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attribute.t).astype(np_type), attribute.t.name))
            elif attribute.type == AttributeProto.GRAPH:
                _retype_graph(attribute.g, elem, np_type)
            elif attribute.type == AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    _retype_graph(sub, elem, np_type)


class ReferenceRun:
    """Runs a file in ``dtype`` through ONNX's reference evaluator: ``run(feed) -> {output: array}``,
    floating inputs cast to ``dtype`` (integers as given). A :class:`~rnnx.engines.runner.Runner`."""

    device = "cpu"

    def __init__(self, proto: Any, dtype: str = "float64") -> None:
        from onnx.reference import ReferenceEvaluator

        self.dtype = np.dtype(_TYPES[dtype][1])
        self.precision = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "tf32": "tf32"}[dtype]
        initializers = {t.name for t in proto.graph.initializer}
        self.input_names = [i.name for i in proto.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in proto.graph.output]
        try:
            self.evaluator = ReferenceEvaluator(retyped(proto, dtype), new_ops=list(_tf32_ops() if dtype == "tf32" else _with_lengths()))
        except Exception as exc:  # noqa: BLE001  onnx raises what its operators raise
            raise RNNXError(f"ONNX's reference evaluator cannot run this file in {dtype}: {type(exc).__name__}: "
                            f"{one_line(exc, CAUSE_CHARS)}") from None

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cast = {k: v.astype(self.dtype) if v.dtype.kind == "f" else v for k, v in feed.items()}
        try:
            outs = self.evaluator.run(None, cast)
        except Exception as exc:  # noqa: BLE001
            raise RNNXError(f"ONNX's reference evaluator failed in {self.dtype}: {one_line(exc, CAUSE_CHARS, typed=True)}") from None
        return {name: np.asarray(value) for name, value in zip(self.output_names, outs)}


@functools.cache
def _with_lengths() -> tuple[type, ...]:
    """ONNX's reference LSTM, GRU and RNN, honouring ``sequence_lens`` (see the module docstring)."""
    from onnx.reference.ops import op_gru, op_lstm, op_rnn

    return tuple(type(name, (base,), {"op_domain": "", "_run": _lengths_run(base)}) for name, base in
                 (("LSTM", op_lstm.LSTM), ("GRU", op_gru.GRU), ("RNN", op_rnn.RNN_14)))


def _lengths_run(base: Any) -> Any:  # an onnx.reference op class (onnx reaches mypy as Any)
    """``base``'s ``_run``, each sequence of a batch given lengths run alone over its frames."""

    def _run(self: Any, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Any = None, sequence_lens: Any = None, *rest: Any, **attrs: Any) -> Any:
        def run(*args: Any, **kw: Any) -> Any:
            return base._run(self, *args, **kw)

        steps = X.shape[1 if self.layout else 0]
        if sequence_lens is None or np.size(sequence_lens) == 0 or bool(np.all(np.asarray(sequence_lens) >= steps)):
            return run(X, W, R, B, None, *rest, **attrs)
        batch_axis, out_batch_axis = (0, 0) if self.layout else (1, 2)  # X and states; Y
        states = len(rest) if type(self).__name__ != "LSTM" else min(len(rest), 2)  # LSTM's P (peepholes) holds no batch
        outputs: list[np.ndarray] | None = None
        for b, length in enumerate(np.asarray(sequence_lens).reshape(-1)):
            length = int(min(max(length, 0), steps))
            x = X[b:b + 1, :length] if self.layout else X[:length, b:b + 1]
            given = [np.take(v, [b], axis=batch_axis) if k < states and v is not None else v for k, v in enumerate(rest)]
            got = run(x, W, R, B, None, *given, **attrs)
            if outputs is None:  # every output at the whole batch's shape, zeros past each sequence's end
                outputs = [np.zeros(_whole(np.shape(v), k, steps, X.shape[batch_axis], self.layout, out_batch_axis), np.asarray(v).dtype)
                           for k, v in enumerate(got)]
            for k, value in enumerate(got):
                where: tuple[slice, ...]
                if k == 0:  # Y: (T, D, B, H), or (B, T, D, H) with layout 1
                    where = (slice(b, b + 1), slice(0, length)) if self.layout else (slice(0, length), slice(None), slice(b, b + 1))
                else:  # Y_h, Y_c: (D, B, H), or (B, D, H)
                    where = (slice(b, b + 1),) if self.layout else (slice(None), slice(b, b + 1))
                outputs[k][where] = value
        return tuple(outputs or ())

    return _run


def _whole(shape: tuple[int, ...], k: int, steps: int, batch: int, layout: int, out_batch_axis: int) -> tuple[int, ...]:
    """One sequence's output shape at the whole batch (and, for Y, every step)."""
    whole = list(shape)
    if k == 0:
        whole[1 if layout else 0] = steps
        whole[out_batch_axis] = batch
    else:
        whole[0 if layout else 1] = batch
    return tuple(whole)


def round_to_tf32(value: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (8-bit exponent, 10-bit mantissa), to nearest, ties to even;
    non-finite values as they are. Returns a plain float32 array."""
    value = np.ascontiguousarray(value, np.float32)
    bits = value.view(np.uint32)
    rounded = ((bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(value), rounded, value).astype(np.float32)


class _TF32Operand(np.ndarray):
    """A weight whose products round both operands to TF32. ONNX's reference recurrences take
    their per-step products with ``np.dot`` on views of W and R (transposed, split, joined); this
    marker survives those and rounds the state ``H_t`` too, at every step, as a TF32 engine does."""

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        plain = _strip(args)
        if func in (np.dot, np.matmul, np.inner):
            return func(*[round_to_tf32(a) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a for a in plain],
                        **_strip(kwargs))
        return _mark(func(*plain, **_strip(kwargs)))


def _strip(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_strip(v) for v in value)
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()}
    return value


def _mark(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.view(_TF32Operand)
    if isinstance(value, (list, tuple)):
        return type(value)(_mark(v) for v in value)
    return value


@functools.cache
def _tf32_ops() -> tuple[type, ...]:
    """ONNX's reference operators computing as TensorRT does with TF32 on: MatMul, Gemm, Conv and
    ConvTranspose on inputs rounded to TF32 (their products are then exact in float32 and summed
    in float32), and LSTM, GRU and RNN (honouring ``sequence_lens``) with their input, weights and
    per-step state rounded likewise."""
    from onnx.reference.ops import op_conv, op_conv_transpose, op_gemm, op_matmul

    def products(base: Any) -> Any:
        def _run(self: Any, *inputs: Any, **attrs: Any) -> Any:  # the first two inputs are the product's (a bias is added in float32)
            return base._run(self, *[round_to_tf32(v) if k < 2 and _is_float32(v) else v for k, v in enumerate(inputs)], **attrs)
        return _run

    def recurrent(base: Any) -> Any:
        def _run(self: Any, X: np.ndarray, W: np.ndarray, R: np.ndarray, *rest: Any, **attrs: Any) -> Any:
            outs = base._run(self, round_to_tf32(X), _mark(round_to_tf32(W)), _mark(round_to_tf32(R)), *rest, **attrs)
            return tuple(None if v is None else np.asarray(v).view(np.ndarray) for v in outs)
        return _run

    rounded = [type(name, (base,), {"op_domain": "", "_run": products(base)}) for name, base in
               (("MatMul", op_matmul.MatMul), ("Gemm", op_gemm.Gemm_7), ("Conv", op_conv.Conv), ("ConvTranspose", op_conv_transpose.ConvTranspose))]
    return (*rounded, *(type(base.__name__, (base,), {"op_domain": "", "_run": recurrent(base)}) for base in _with_lengths()))


def _is_float32(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == np.float32
