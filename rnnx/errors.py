"""The one error class meant for users.

Anything raised as :class:`RNNXError` is a problem with the input (a bad file, a wrong
shape, an unsupported variant). The CLI prints it as one line and exits with status 2.
Every other exception is a bug in rnnx and keeps its traceback.
"""

from __future__ import annotations


class RNNXError(Exception):
    """A user-facing error: what was expected, what was found, and what to do."""


class ParityError(RNNXError):
    """Outputs of two backends disagree beyond tolerance (CLI exit status 1)."""


def shape_error(tensor: str, expected: tuple[int, ...], found: tuple[int, ...], hint: str = "") -> RNNXError:
    """Build the standard message for a tensor whose shape does not fit the spec."""
    msg = f"tensor {tensor}: expected shape {tuple(expected)}, found {tuple(found)}"
    return RNNXError(msg + (f"; {hint}" if hint else ""))
