"""A backend's documented limits on an ONNX recurrent node, written as data.

Each engine module holds its own table (:data:`rnnx.engines.onnxruntime.KERNEL_RULES`,
:data:`rnnx.engines.tensorrt_parser`'s table, :data:`rnnx.engines.cudnn.RNN_MODE_RULES`);
:mod:`rnnx.engines.acceptance` applies them for ``rnnx inspect``. A table predicts: it says
what the backend's documentation (or a pinned test) says it does, and its ``basis`` says so,
so that nobody reads "accepts" as "was built and ran".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rnnx.graphs.inspect import NodeReport
from rnnx.layouts.onnx import DEFAULT_ACTIVATIONS


@dataclass(frozen=True)
class Rule:
    """One limit: when ``refuses(node)`` holds, the backend refuses the node for ``reason(node)``."""

    refuses: Callable[[NodeReport], bool]
    reason: Callable[[NodeReport], str]


@dataclass(frozen=True)
class BackendRules:
    backend: str
    basis: str  # what a verdict from these rules rests on, shown beside it
    rules: tuple[Rule, ...]

    def refusals(self, node: NodeReport) -> list[str]:
        return [rule.reason(node) for rule in self.rules if rule.refuses(node)]


def directions(node: NodeReport) -> int:
    return 2 if node.direction == "bidirectional" else 1


def default_activations(node: NodeReport) -> list[str] | None:
    """The activations ONNX implies for the node's op (an RNN's from its first), per direction; None if not an LSTM/GRU/tanh/relu RNN."""
    if node.op_type == "RNN":
        first = str((node.activations or ["Tanh"])[0]).lower()
        cell = {"tanh": "rnn_tanh", "relu": "rnn_relu"}.get(first)
    else:
        cell = node.op_type.lower()
    default = DEFAULT_ACTIVATIONS.get(cell) if cell else None
    return None if default is None else default * directions(node)


def same_activations(given: list[str], expected: list[str]) -> bool:
    return [a.lower() for a in given] == [a.lower() for a in expected]
