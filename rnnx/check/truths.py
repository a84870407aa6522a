"""What a run is held to: the float64 reference of a stack (and its arithmetic in a lower dtype,
the honest run of the calibrated rule), torch in its own dtype and in float64 with the fallback
when the float64 copy cannot run, and ONNX's reference evaluator on a file."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from rnnx.errors import NOTE_CHARS, one_line
from rnnx.parity import honest_outputs, reference_outputs
from rnnx.weights import RNNWeights

T = TypeVar("T")

#: What is compared instead when torch's float64 copy is missing (the default note's tail).
FIXED_INSTEAD = "outputs held to the fixed tolerance against torch in its own dtype"


def stack_reference(weights: RNNWeights, feed: dict[str, np.ndarray], batch_first: bool = False) -> dict[str, np.ndarray]:
    """The float64 reference of a stack on ``feed`` (Y, h_n and c_n for an LSTM)."""
    return reference_outputs(weights, feed, batch_first=batch_first)


def stack_honest(weights: RNNWeights, feed: dict[str, np.ndarray], dtype: str, batch_first: bool = False) -> dict[str, np.ndarray]:
    """The reference's arithmetic run in ``dtype``: the rounding floor's honest run (empty for a
    dtype with none: float64, bfloat16)."""
    return honest_outputs(weights, feed, dtype, batch_first) or {}


def float64_copy(model: Any, notes: list[str], without: str = FIXED_INSTEAD) -> Any:
    """A float64 copy of the torch model (the reference of the calibrated rule), or None, with
    a note saying ``without`` (what is compared instead), where it cannot be copied or cast."""
    try:
        return copy.deepcopy(model).double()
    except Exception as exc:  # noqa: BLE001  a model that cannot be copied or cast: the caller's fallback holds
        notes.append(f"no float64 copy of the torch model ({type(exc).__name__}): {without}")
        return None


def as_float64(values: Sequence[Any]) -> list[Any]:
    """Flattened inputs with every floating tensor in float64 (the same values, widened exactly)."""
    import torch

    return [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


class TorchTruth:
    """A torch model's answers: in its own dtype (the honest run), and from its float64 copy (the
    truth of the calibrated rule). The copy is made once; the first time it raises it is dropped,
    with a note saying ``without``, and every later case is held against torch in its own dtype.
    ``keep``: exceptions that stop the check rather than the copy (a budget that ran out)."""

    def __init__(self, model: Any, notes: list[str], without: str = FIXED_INSTEAD, keep: tuple[type[BaseException], ...] = ()) -> None:
        self.model, self.notes, self.without, self.keep = model, notes, without, keep
        self.model64 = float64_copy(model, notes, without)

    def float64(self, run: Callable[[Any], T]) -> T | None:
        """``run(the float64 copy)``; None where there is no copy, or it raised (said once, in the notes)."""
        if self.model64 is None:
            return None
        try:
            return run(self.model64)
        except self.keep:
            raise
        except Exception as exc:  # noqa: BLE001  e.g. a forward that makes float32 tensors of its own
            self.model64 = None
            self.notes.append(f"the float64 copy of the torch model raised {type(exc).__name__} ({one_line(exc, NOTE_CHARS)}); "
                              f"{self.without}")
            return None
