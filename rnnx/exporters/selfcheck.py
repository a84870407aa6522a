"""The export's self-check: ONNX Runtime against the torch module, varying what is dynamic.

Cases: the user's example exactly as given, then, each on fresh seeded inputs (static
dimensions always keep the example's size):
- ``batch=1``: every batch dimension at 1;
- ``all larger``: every dynamic dimension larger than in the example (batch +2, lengths
  +3, others +2);
- ``shorter``: every dynamic dimension but the batch at half the example's size (where that
  is more than 2);
- one case per dynamic dimension, varied on its own (for a batch that is not 1 in the
  example, ``batch=1`` is that case).

Lengths inputs (those that reach a recurrence's sequence lengths) get sorted lengths whose
longest fills the sequence; integer inputs stay within the example's range, without a value
it uses only as trailing padding (token ids); floats are standard normal, folded to the
example's sign where it had one (:mod:`rnnx.exporters.example_values`). A case where torch's own
output is NaN or infinite (on inputs the model does not take) is skipped, saying so. A case where the torch module itself raises is listed as
skipped with the model's message; one where ONNX Runtime fails or disagrees fails the
check, naming the case and every input's shape.

Each output is held to the caller's ``tolerances`` by graph output name where set. Else it is
held to the calibrated rule (:data:`rnnx.tolerance.CALIBRATED_MULTIPLE`): against a float64
copy of the torch model, within a multiple of how far torch's own output (in the dtype the
model returned it: a float16 model is checked in float16) lies from that float64 output. Where
no float64 copy runs, :data:`rnnx.tolerance.BY_DTYPE`'s entry for that dtype holds, with a note.
An output the model itself moves between two runs (:mod:`rnnx.exporters.determinism`) is held to
the max abs error the caller gave for it (``given``), never to a floor its own move would widen.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import progress
from rnnx.check import Case, Row, Rule, judge, worst_failure
from rnnx.check.case import unvaried
from rnnx.check.runners import Subject, make
from rnnx.check.truths import TorchTruth, as_float64
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters.bounded import STOPPED, Bounds, Run, bounded_each
from rnnx.exporters.example_values import draw_floats, draw_integers, integer_summary, value_summary
from rnnx.exporters.shapes import Leaf, Naming
from rnnx.shapes.roles import BATCH, LENGTH, OTHER
from rnnx.shapes.sizes import GROWTH, shrunk
from rnnx.tolerance import CALIBRATED_MULTIPLE, Tolerance, Tolerances

# The layer-by-layer check of the file about to be written, where a layer above sets one
# (rnnx.api.export sets verify's: exporters cannot import verify, which imports them): it takes
# the file's path and returns (the first drifting layer's one line or "", the layers as JSON,
# notes). A layer that is wrong fails the export even when the outputs hide it.
LayerCheckHook = Callable[[Path], tuple[str, list[dict[str, Any]], list[str]]]
LAYER_CHECK: ContextVar[LayerCheckHook | None] = ContextVar("rnnx_layer_check", default=None)

EXAMPLE_CASE = "the example as given"


#: An output's fields in a case's JSON (rnnx/cli/schema/export.json): its labels (the output, the
#: dtype torch returned it in), then its statistics.
OUTPUT_FIELDS = ("output", "max_abs", "max_rel", "passed", "mean_abs", "p99_abs", "atol", "rtol", "stat", "dtype", "note", "floor", "multiple",
                 "ratio")


def held_to(row: Row) -> str:
    """The rule an output was held to, as the self-check's lines say it."""
    if row.floor is not None:
        return f"{row.ratio:.3g}x the rounding floor {row.floor:.2e}, {row.multiple:g}x allowed"
    return f"atol {row.atol:g}, rtol {row.rtol:g}, {row.stat}"


#: A case's fields in the JSON (rnnx/cli/schema/export.json): its rows (one per output, labelled
#: output and dtype) under "outputs", and what ONNX Runtime returned, by graph output.
CASE_FIELDS = ("name", "sizes", "shapes", "outputs:rows", "error", "skipped", "output_shapes", "passed")


@dataclass
class SelfCheck:
    """Truthy when at least one case ran and none failed."""

    cases: list[Case] = field(default_factory=list)
    tolerances: Tolerances = field(default_factory=Tolerances)
    notes: list[str] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)  # the layer-by-layer check, where it ran
    layer_failure: str = ""  # its one line where a layer drifts
    hint: str = ""  # what the failing cases together point to, added to the failure's line
    dims: list[dict[str, Any]] = field(default_factory=list)  # the dimension audit's verdicts (rnnx.exporters.audit)
    audit_failure: str = ""  # its one line where the file fixes what the model leaves free
    nondeterministic: dict[str, Any] | None = None  # outputs the model itself moves, held to the caller's tolerance (determinism.Variation)

    @property
    def default(self) -> Tolerance:
        """The tolerance of a float32 output the caller did not name."""
        return self.tolerances.get("", "float32")

    @property
    def atol(self) -> float:
        return self.default.atol

    @property
    def rtol(self) -> float:
        return self.default.rtol

    def __bool__(self) -> bool:
        ran = [c for c in self.cases if not c.skipped]
        return bool(ran) and all(c.passed for c in ran) and not self.layer_failure and not self.audit_failure

    def failure(self) -> str:
        """One line: the first failing case, what failed, and the shapes (and the hint, if any)."""
        line = self._first_failure()
        return f"{line}; {self.hint}" if self.hint else line

    def _first_failure(self) -> str:
        if self.audit_failure:
            return f"dimension audit: {self.audit_failure}"
        for case in self.cases:
            if not case.passed:
                if case.error:
                    return f"self-check at {case.where()}: {case.error}"
                worst = worst_failure(case.rows)
                if worst is None:  # no output compared at all
                    return f"self-check at {case.where()}: nothing was compared"
                return (f"self-check at {case.where()}: output {worst.output!r} differs from torch by {worst.max_abs:.3e} "
                        f"(mean {worst.mean_abs:.3e}, p99 {worst.p99_abs:.3e}; {worst.dtype}, {held_to(worst)})"
                        + (f": {worst.note}" if worst.note else ""))
        if self.layer_failure:
            return f"self-check: every output within tolerance, but {self.layer_failure}"
        return "self-check: no case could run (the model raised at every shape tried)"

    def to_json(self) -> dict[str, Any]:
        return {"passed": bool(self), "atol": self.atol, "rtol": self.rtol, "stat": self.default.stat_label,
                "calibrated_multiple": CALIBRATED_MULTIPLE, "tolerances": self.tolerances.to_json(), "notes": self.notes,
                "layers": self.layers, "layer_failure": self.layer_failure or None,
                "dimensions": self.dims, "audit_failure": self.audit_failure or None, "nondeterministic": self.nondeterministic,
                # a skipped case was not judged: passed is null beside its empty outputs, never true
                "cases": [c.to_json(CASE_FIELDS, OUTPUT_FIELDS, absent=None, **({"passed": None} if c.skipped else {})) for c in self.cases]}

    def __str__(self) -> str:
        given = f"; set: {', '.join(f'{k}: {v}' for k, v in self.tolerances.to_json().items())}" if self.tolerances else ""
        rule = (f"max abs error within {CALIBRATED_MULTIPLE:g}x the rounding floor, torch's own output against its float64 copy; "
                f"where nothing gives a floor, {self.default} for float32 outputs, each dtype its own{given}")
        lines = [f"self-check against torch in ONNX Runtime ({rule}):"] + [f"  note: {n}" for n in self.notes]
        if self.dims:
            lines.append("  dimensions, asked of the torch model:")
            lines += [f"    {d['input']} dim {d['dim']} ({d['size']} in the example): {d['verdict']}" + (f" as {d['label']}" if d.get("label") else "")
                      + (f" ({d['why']})" if d.get("why") else "") for d in self.dims]
        if self.audit_failure:
            lines.append(f"  FAIL: {self.audit_failure}")
        for c in self.cases:
            if c.skipped:
                verdict = f"skipped: {c.skipped}"
            elif c.error:
                verdict = f"FAIL: {c.error}"
            else:
                worst = max(c.rows, key=lambda o: (np.isnan(o.max_abs), o.max_abs), default=None)
                verdict = "ok" if c.passed else "FAIL"
                if worst is not None:
                    ratio = f", {worst.ratio:.2g}x its floor" if worst.ratio is not None and c.passed else ""
                    verdict += (f" (max abs err {worst.max_abs:.1e}, mean {worst.mean_abs:.1e}, p99 {worst.p99_abs:.1e}{ratio}"
                                f"{'' if c.passed else f' in {worst.output!r}, {held_to(worst)}'})")
            lines.append(f"  {c.where()}: {verdict}")
        for la in self.layers:
            if la["status"] == "not checked":
                lines.append(f"  layer {la['name']} ({la['op']}): not checked ({la['reason']})")
            else:
                lines.append(f"  layer {la['name']} ({la['op']}, {la['truth']}): max abs {la['max_abs']:.1e} {'ok' if la['status'] == 'ok' else 'DRIFTS'}")
        return "\n".join(lines)


def example_sizes(naming: Naming, leaves: Sequence[Leaf]) -> dict[str, int]:
    """Each dynamic dimension's label -> its size in the example."""
    base: dict[str, int] = {}
    for leaf in leaves:
        for d, v in enumerate(naming.input_dims.get(leaf.name, [])):
            if isinstance(v, str) and v.isidentifier() and v not in base:
                base[v] = int(leaf.value.shape[d])
    return base


def plan_cases(naming: Naming, leaves: Sequence[Leaf]) -> list[tuple[str, dict[str, int]]]:
    """(name, sizes by label) for every case, duplicates dropped."""
    base = example_sizes(naming, leaves)
    grow = {label: base[label] + GROWTH.get(naming.roles.get(label, ""), GROWTH[OTHER]) for label in base}
    cases: list[tuple[str, dict[str, int]]] = []
    batches = [label for label in base if naming.roles.get(label) == BATCH]
    if batches:
        cases.append(("batch=1", {**base, **{label: 1 for label in batches}}))
    if base:
        cases.append(("all larger", grow))
    # Shorter too: a size torch guarded loosely (a length turned into Python ints inside the
    # model) can pass at the example's size and a little above it and still be wrong below.
    shrink = {label: shrunk(base[label]) for label in base if naming.roles.get(label) != BATCH and base[label] > 2}
    if shrink:
        cases.append(("shorter", {**base, **shrink}))
    for label in base:
        if naming.roles.get(label) == BATCH and base[label] != 1 and len(batches) == 1:
            continue  # batch=1 already varied it alone
        cases.append((f"{label}={grow[label]}", {**base, label: grow[label]}))
    if not cases:
        cases.append(("example shapes", {}))
    seen, unique = set(), []
    for name, sizes in cases:
        key = tuple(sorted(sizes.items()))
        if key not in seen:
            seen.add(key)
            unique.append((name, sizes))
    return unique


def _size(dim: int | str, sizes: dict[str, int], example: int) -> int:
    if isinstance(dim, int):
        return dim
    if dim in sizes:
        return sizes[dim]
    try:  # a derived dimension, such as 2*seq
        import sympy

        return int(sympy.sympify(dim, locals={k: sympy.Symbol(k) for k in sizes}).subs(sizes))
    except Exception:  # sympy raises many types for text it cannot parse; keep the example's size
        return example


def fresh_inputs(leaves: Sequence[Leaf], naming: Naming, sizes: dict[str, int], seed: int) -> list[Any]:
    import torch

    rng = np.random.default_rng(seed)
    out = []
    for leaf in leaves:
        x = leaf.value
        if not leaf.is_tensor:
            out.append(x)
            continue
        dims = naming.input_dims.get(leaf.name, list(x.shape))
        shape = [_size(dim, sizes, int(x.shape[d])) for d, dim in enumerate(dims)]
        if x.is_floating_point():
            out.append(torch.from_numpy(draw_floats(rng, shape, value_summary(x.detach().float().cpu().numpy()), np.float64)).to(x.dtype))
        elif leaf.name in naming.lengths_inputs:
            longest = sizes.get(naming.lengths_inputs[leaf.name], int(x.max()) if x.numel() else 1)
            lens = np.sort(rng.integers(1, longest + 1, size=shape))[::-1].copy()
            if lens.size:
                lens.flat[0] = longest
            out.append(torch.from_numpy(lens).to(x.dtype))
        elif x.dtype == torch.bool:
            out.append(torch.from_numpy(np.asarray(rng.random(shape) < 0.5)))  # asarray: a scalar flag (shape []) compares to a numpy bool
        else:  # token ids and flags: the example's range, its padding value left out
            out.append(torch.from_numpy(draw_integers(rng, shape, integer_summary(x.numpy()), np.int64)).to(x.dtype))
    return out


def run_eager(model: Any, values: Sequence[Any], structure: Any) -> Any:
    """The torch model's outputs on these flattened inputs: in eval mode (restored after),
    without gradients, warnings or anything it prints. Raises whatever the model raises."""
    import contextlib
    import io

    import torch
    from torch.utils._pytree import tree_unflatten

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            return model(*tree_unflatten(list(values), structure))
    finally:
        model.train(was_training)


@dataclass
class Truth:
    """One case's inputs and the torch model's answer on them, got before the file exists (a
    forward that ends the process then leaves nothing behind): its outputs and its float64
    copy's, or why the case is skipped (the model raised)."""

    name: str
    sizes: dict[str, int]
    values: list[Any]
    want: list[Any] = field(default_factory=list)
    want64: list[Any] | None = None
    skipped: str | None = None


def torch_truths(model: Any, leaves: Sequence[Leaf], structure: Any, naming: Naming, seed: int = 0, notes: list[str] | None = None) -> list[Truth]:
    """Every planned case (the example as given first) run in the torch model and its float64
    copy, each run bounded by --time-limit and --max-memory (:mod:`rnnx.exporters.bounded`);
    ``notes`` gets what the float64 copy could not do."""
    import torch
    from torch.utils._pytree import tree_flatten

    def tensors(m: Any, values: list[Any]) -> list[Any]:
        return [w for w in tree_flatten(run_eager(m, values, structure))[0] if isinstance(w, torch.Tensor)]

    def tensors_in_float64(values: list[Any]) -> list[Any]:  # the float64 inputs made in the child, one case at a time
        return tensors(torch64.model64, as_float64(values))

    notes = [] if notes is None else notes
    bounds = Bounds.of(model, [leaf.value for leaf in leaves])
    torch64 = TorchTruth(model, notes, keep=STOPPED)
    truths, runs = [], []
    for k, (name, sizes) in enumerate([(EXAMPLE_CASE, example_sizes(naming, leaves))] + plan_cases(naming, leaves)):
        truth = Truth(name, sizes, [leaf.value for leaf in leaves] if name == EXAMPLE_CASE else fresh_inputs(leaves, naming, sizes, seed + k))
        truths.append(truth)
        shapes = ", ".join(f"{leaf.name} {'x'.join(map(str, v.shape))}" for leaf, v in zip(leaves, truth.values) if isinstance(v, torch.Tensor))
        runs.append(Run(f"the self-check's run of the model at {name} ({shapes})", partial(tensors, model, truth.values)))
        if torch64.model64 is not None:
            runs.append(Run(f"the self-check's run of the model's float64 copy at {name} ({shapes})",
                            partial(tensors_in_float64, truth.values), after=len(runs) - 1))
    # Every case's runs in one bounded child (a fork per run cost more than the runs themselves).
    progress.step(f"running the torch model at {len(truths)} sizes")
    outcomes = iter(bounded_each(runs, bounds))
    for truth in truths:
        outcome = next(outcomes)
        progress.step(f"running the torch model at {truth.name}")  # where a sys.exit in that run is said to be
        try:
            truth.want = outcome.get()
        except STOPPED:
            raise
        except Exception as exc:  # the user's model may raise anything at a shape it does not take
            truth.skipped = f"the torch model itself raised {one_line(exc, CAUSE_CHARS, typed=True)}"
        if len(runs) > len(truths):  # the float64 copy's run of this case, where the copy was made
            copy = next(outcomes)
            if copy.ran and truth.skipped is None:
                truth.want64 = torch64.float64(lambda _: copy.get())
    return truths


def run_self_check(model: Any, leaves: Sequence[Leaf], structure: Any, naming: Naming, path: Path, seed: int = 0,
                   tolerances: Tolerances | None = None, given: Mapping[int, float] | None = None,
                   truths: Sequence[Truth] | None = None) -> SelfCheck:
    """Run every planned case in ONNX Runtime against the torch model's answers (``truths``, from
    :func:`torch_truths` before the file was written; run here where not given). Outputs are held
    to ``tolerances`` by graph output name (default: each output's dtype's); those the model itself
    moves between runs to the max abs error the caller gave for them (``given``, by output index)."""
    import torch

    check = SelfCheck(tolerances=tolerances or Tolerances())
    if truths is None:
        truths = torch_truths(model, leaves, structure, naming, seed, check.notes)
    try:
        runner = make("ort", Subject(model=path, trusted=True))  # the file rnnx just wrote
    except RNNXError as exc:  # rnnx wrote a graph ONNX Runtime cannot load: the check has failed
        check.cases.append(Case("loading", {}, {leaf.name: list(leaf.value.shape) for leaf in leaves if leaf.is_tensor}, error=str(exc) or repr(exc)))
        return check
    check.notes += getattr(runner, "notes", [])
    # The user's own example exactly as given comes first: a file that refuses it (a size-1
    # column that a grown trace made 2) is never written, whatever the other shapes show.
    for truth in truths:
        name, values, want, want64 = truth.name, truth.values, truth.want, truth.want64
        progress.step(f"checking in ONNX Runtime at {name}")
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        case = Case(name, truth.sizes, {leaf.name: list(v.shape) for leaf, v in zip(leaves, values) if isinstance(v, torch.Tensor)})
        check.cases.append(case)
        if truth.skipped is not None:
            case.skipped = truth.skipped
            continue
        if name != EXAMPLE_CASE and not all(bool(torch.isfinite(w).all()) for w in want if w.is_floating_point()) and example_finite(check):
            case.skipped = "the torch model's own output is NaN or infinite on these inputs (it does not take them), where it is finite on the example"
            continue
        try:
            got = runner(dict(zip(runner.input_names, (t.numpy() for t in tensors))))
        except RNNXError as exc:
            case.error = str(exc) or repr(exc)  # "" would read as no error
            continue
        case.output_shapes = {name: [int(n) for n in np.shape(value)] for name, value in got.items()}
        if len(got) != len(want):
            case.error = f"the ONNX model has {len(got)} outputs, the torch model returned {len(want)} tensors"
            continue
        if want64 is not None and len(want64) != len(want):
            want64 = None
        for i, (out_name, g) in enumerate(got.items()):
            case.rows.append(compare_output(out_name, np.asarray(g), want[i], check, want64[i] if want64 is not None else None,
                                            (given or {}).get(i)))
    return check


def refuse_unvaried(cases: Sequence[Case], naming: Naming) -> None:
    """Verify's rule (:func:`rnnx.check.case.unvaried`), held by export too: a dynamic batch or
    length that the cases set out to vary, and that every case that ran held at the example's
    size (the others skipped: the model raised, or its own output was NaN there), was never
    checked, and a PASS would rest on one size. Refused (exit 2), unless the check failed anyway."""
    dynamic = {label: role for label, role in naming.roles.items() if role in (BATCH, LENGTH)}
    skipped_all, _held = unvaried(list(cases), dynamic, set())
    if not skipped_all:
        return
    label = skipped_all[0].split(" ", 1)[0]
    where = next((f"{name}:{d}" for name, dims in naming.input_dims.items() for d, v in enumerate(dims) if v == label), label)
    raise RNNXError(f"the self-check checked nothing at other sizes of what the file declares dynamic: every case with {'; '.join(skipped_all)} was skipped, "
                    f"so a PASS would rest on one size; give an example the model takes at other sizes too, or --static {where} (static= "
                    "in Python) to write that dimension at the example's size")


def example_finite(check: SelfCheck) -> bool:
    """Whether the example's case ran, with every output finite in torch (the example's torch
    outputs are compared first, so a non-finite one shows as a NaN error there)."""
    first = check.cases[0] if check.cases else None
    return first is not None and first.name == EXAMPLE_CASE and not first.skipped and all(np.isfinite(o.max_abs) for o in first.rows)


def compare_output(name: str, got: np.ndarray, want: Any, check: SelfCheck, want64: Any = None, given: float | None = None) -> Row:
    """ONNX Runtime's output against torch's (a tensor, in whatever dtype the model returned):
    against the float64 model's under the calibrated rule, torch's own output the honest run
    that sets the rounding floor, where the float64 model ran and nobody set a tolerance; else
    against torch's own output under the tolerance. An output the model itself moves between runs
    is held to ``given``, the caller's max abs error, never to a floor its own move would widen."""
    import torch

    want = want.detach().cpu()
    dtype = str(want.dtype).removeprefix("torch.")
    want = want.float().numpy() if want.dtype == torch.bfloat16 else want.numpy()  # numpy has no bfloat16; widening is exact
    if given is not None:
        row = judge(got, want, Rule(Tolerance(given, 0.0, "max")))
        if row.stats is not None:
            row.stats.note = row.stats.note or "held to the tolerance given for an output the model itself moves (nondeterministic_atol)"
    else:
        rule = Rule.of(check.tolerances, name, dtype, want if want64 is not None and want.dtype.kind == "f" else None)
        row = judge(got, want64.detach().cpu().numpy() if rule.honest is not None else want, rule)
    label = name if got.shape == want.shape else f"{name} (shape {list(got.shape)}, torch {list(want.shape)})"
    if got.shape != want.shape and row.stats is not None:
        row.stats.note = ""  # the label says it
    row.labels = {"output": label, "dtype": dtype}
    return row
