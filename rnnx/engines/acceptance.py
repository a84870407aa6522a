"""Which backends accept an ONNX recurrent node, as their documented rules predict (``rnnx inspect``).

The rules are each engine's own table (:mod:`rnnx.engines.rules`); this module only applies
them. Every verdict carries its basis: a prediction, never a claim that the backend ran.
"""

from __future__ import annotations

from rnnx.engines.cudnn import RNN_MODE_RULES
from rnnx.engines.onnxruntime import KERNEL_RULES
from rnnx.engines.rules import BackendRules
from rnnx.engines.tensorrt import PARSER_RULES
from rnnx.graphs.inspect import NodeReport

BACKEND_RULES: tuple[BackendRules, ...] = (KERNEL_RULES, PARSER_RULES, RNN_MODE_RULES)


def predict(node: NodeReport) -> dict[str, tuple[list[str], str]]:
    """backend -> (the reasons its rules refuse ``node``, [] if none; what that verdict rests on)."""
    return {table.backend: (table.refusals(node), table.basis) for table in BACKEND_RULES}
