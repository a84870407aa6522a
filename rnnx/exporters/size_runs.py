"""Which dynamic dimensions the torch model itself refuses at another size, and which it takes
only together with another: the model run at the self-check's sizes before the file is checked.
Each run is bounded by --time-limit and --max-memory (:mod:`rnnx.exporters.bounded`), and a run
stopped by a budget stops the export: it is never read as the model refusing the size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rnnx.errors import DETAIL_CHARS, one_line
from rnnx.exporters.bounded import STOPPED, Bounds, bounded
from rnnx.exporters.selfcheck import example_sizes, fresh_inputs, plan_cases, run_eager
from rnnx.exporters.shapes import Leaf, Naming
from rnnx.shapes.roles import BATCH, LENGTH, OTHER
from rnnx.shapes.sizes import GROWTH


def model_runs(model: Any, structure: Any, values: list[Any], bounds: Bounds, what: str, names: Sequence[str] = ()) -> str:
    """"" where the model runs on ``values`` (inputs ``names``, for the message), else what it
    raised; a stop by a budget is raised. ``what``: the run, as a stop's message names it."""
    def run() -> None:  # the outputs stay in the child: only whether the model runs is asked
        run_eager(model, values, structure)

    shapes = ", ".join(f"{n} {'x'.join(map(str, v.shape))}".strip() for n, v in zip(list(names) or [""] * len(values), values) if hasattr(v, "shape"))
    try:
        bounded(run, f"the run of the model {what} ({shapes})", bounds)
        return ""
    except STOPPED:
        raise
    except Exception as exc:  # noqa: BLE001  the user's model may raise anything at a shape it does not take
        return one_line(exc, DETAIL_CHARS, typed=True)


def refused_dimensions(model: Any, leaves: Sequence[Leaf], structure: Any, naming: Naming, seed: int = 0) -> dict[str, str]:
    """Dimensions torch kept dynamic that are neither a batch nor a length and that the torch
    model itself refuses to run at another size (a feature size reached through arithmetic
    torch could not pin): label -> the model's message. They belong static."""
    refused = {}
    bounds = Bounds.of(model, [leaf.value for leaf in leaves])
    for name, sizes in plan_cases(naming, leaves):
        label = name.partition("=")[0]
        if naming.roles.get(label) not in ("other", None) or label not in sizes or "=" not in name:
            continue
        why = model_runs(model, structure, fresh_inputs(leaves, naming, sizes, seed), bounds, f"at {name}", [leaf.name for leaf in leaves])
        if why:
            refused[label] = why
    return refused


def ties(model: Any, leaves: Sequence[Leaf], structure: Any, naming: Naming, refused: dict[str, str], seed: int = 0) -> dict[str, str]:
    """For each refused label, another dynamic label of the same example size (a batch or a
    length first) that the model runs with when both take a new size together: a mask's
    length that must equal the input's. label -> the label it is tied to."""
    base = example_sizes(naming, leaves)
    bounds = Bounds.of(model, [leaf.value for leaf in leaves])
    out: dict[str, str] = {}
    for label in refused:
        partners = sorted((m for m in base if m != label and m not in refused and base[m] == base[label]),
                          key=lambda m: naming.roles.get(m) not in (BATCH, LENGTH))
        for other in partners:
            grow = base[label] + GROWTH.get(naming.roles.get(other, ""), GROWTH[OTHER])
            values = fresh_inputs(leaves, naming, {**base, label: grow, other: grow}, seed)
            if not model_runs(model, structure, values, bounds, f"at {label}={grow} with {other}={grow}", [leaf.name for leaf in leaves]):
                out[label] = other
                break
    return out
