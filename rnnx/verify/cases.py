"""verify's cases (:class:`rnnx.check.Case`) at the sizes :mod:`rnnx.shapes.cases` plans."""

from __future__ import annotations

from rnnx.check import Case
from rnnx.errors import RNNXError
from rnnx.shapes.cases import plan_sizes
from rnnx.shapes.file_dims import InputSpec, label_sizes


def plan_cases(specs: list[InputSpec], roles: dict[str, str], example: dict[str, list[int]], seq_lens: list[int] | None,
               batches: list[int] | None, dims: dict[str, int]) -> list[Case]:
    """Lengths x batches; other dynamic sizes fixed from ``dims`` or the example (:func:`plan_sizes`)."""
    return [Case.at(specs, name, sizes) for name, sizes in plan_sizes(specs, roles, example, seq_lens, batches, dims)]


def example_case(specs: list[InputSpec], shapes: dict[str, list[int]]) -> Case | None:
    """The case at the example's ``shapes`` (each label at its size there), run where nothing else
    is known; None where an input's example shape is not known."""
    try:
        case = Case.at(specs, "the example's shapes", label_sizes(specs, shapes))
    except RNNXError:
        return None
    case.at_example = True
    return case
