"""``rnnx verify``: every available backend on the same seeded inputs, against the float64
reference and the source framework, per output and per time step, with a diagnosis when
they disagree."""

from rnnx.verify.run import verify
from rnnx.verify.stack_report import BackendResult, VerifyReport

__all__ = ["BackendResult", "VerifyReport", "verify"]
