"""Which backends accept an ONNX recurrent node, as their rules predict (``rnnx inspect``).

ONNX Runtime's and cuDNN's rules are their engines' tables (:mod:`rnnx.engines.rules`);
TensorRT's is :mod:`rnnx.engines.tensorrt_parser`, read from onnx-tensorrt's source, per
TensorRT version, each verdict with the file, function and condition it rests on. This module
only applies them. Every verdict carries its basis: a prediction, never a claim that the
backend ran.
"""

from __future__ import annotations

from typing import Any

from rnnx.engines.cudnn import RNN_MODE_RULES
from rnnx.engines.onnxruntime import KERNEL_RULES
from rnnx.engines.rules import BackendRules
from rnnx.engines.tensorrt_parser import DEFAULT_VERSION, ParserTable
from rnnx.graphs.inspect import NodeReport

#: TensorRT's parser table at the default version (10.x), beside the other backends' rules.
TENSORRT_PARSER = ParserTable(DEFAULT_VERSION)
BACKEND_RULES: tuple[BackendRules | ParserTable, ...] = (KERNEL_RULES, TENSORRT_PARSER, RNN_MODE_RULES)


class Predictor:
    """The judge ``rnnx inspect`` passes to :func:`rnnx.graphs.inspect.inspect_model`: per
    backend (reasons, basis), and for TensorRT also the verdict and its citations.
    ``inspect_model`` binds it to the model (:meth:`for_model`), so that TensorRT's table sees
    the graph: element types, and the Scans of a recurrence rnnx lowered."""

    def __init__(self, tensorrt: str | None = DEFAULT_VERSION, model: Any = None) -> None:
        self.tensorrt = ParserTable(tensorrt, model)

    def for_model(self, model: Any) -> Predictor:
        bound = Predictor.__new__(Predictor)
        bound.tensorrt = self.tensorrt.for_model(model)
        return bound

    def with_tensorrt(self, version: str | None) -> Predictor:
        """The same judge for another TensorRT version (``rnnx inspect --tensorrt VERSION``)."""
        return Predictor(version, self.tensorrt.model)

    def __call__(self, node: NodeReport) -> dict[str, tuple[Any, ...]]:
        """backend -> (the reasons its rules refuse ``node``, [] if none; what that verdict rests on),
        and for TensorRT two more: the verdict (accepted / refused / builds but computes
        differently / unknown) and the source citations it rests on."""
        trt = self.tensorrt.judge(node)
        return {
            KERNEL_RULES.backend: (KERNEL_RULES.refusals(node), KERNEL_RULES.basis),
            self.tensorrt.backend: (trt.reasons, self.tensorrt.basis, trt.verdict, trt.citations),
            RNN_MODE_RULES.backend: (RNN_MODE_RULES.refusals(node), RNN_MODE_RULES.basis),
        }


predict = Predictor()
