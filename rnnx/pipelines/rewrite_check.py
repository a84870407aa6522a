"""Hold a rewritten ONNX model against the model it came from, in ONNX Runtime.

The check runs at shapes the input model itself takes, chosen as ``rnnx verify`` chooses them
(:mod:`rnnx.shapes.file_dims`, :mod:`rnnx.shapes.rewrite_plan`): each graph input's dimensions as the graph names them, what each
dynamic one is (a batch, a length or something else: by ``rnnx export``'s record, by its name,
or by the graph's wiring to a recurrence, in the input model or else in the rewrite), and
their sizes from the example ``rnnx export`` recorded, where there is one.

The cases: a first shape (the recorded example; else batch 3, lengths 16, other sizes 3),
batch 1, and every batch and length larger (batch + 2, lengths + 3). A dimension the graph
reads position by position at constant indices 0..n-1 (an unrolled loop: ``Gather``,
``SequenceAt``, one-element ``Slice``) means what it traced only at n, so it is held there;
a constant index k anywhere needs a size above k. The input model runs first at each case.
Where it refuses the first shape, other sizes are tried (lengths 16, 32, 64, ... 4096; batch
1 and 2; other sizes 1, 16, 32, ...); a later case it refuses is skipped, saying why: that is
a fact about the model, not about the rewrite. Where the input model runs, the rewrite must
run and match: each output within a multiple of the rounding floor (:mod:`rnnx.tolerance`'s
calibrated rule), the floor being how far the input model's own outputs move when every
floating input moves one unit in the last place; or within the tolerance the caller set. The
caller may set sizes (``dims``: a label's size; ``input_shapes``: an
input's whole shape); if no shape tried runs the input model, the one-line refusal names the
shapes tried and how to give one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits
from rnnx.check import Case, Row, worst_failure
from rnnx.check.report import NOTHING_CHECKED
from rnnx.check.runners import Subject, close, make
from rnnx.check.stack import ROW_FIELDS, compare, describe
from rnnx.engines.isolated import TimeBudget
from rnnx.errors import ParityError, RNNXError, shown
from rnnx.graphs.index import all_graphs
from rnnx.graphs.precision import computes_in_float16
from rnnx.pipelines.rewrite_feeds import make_feeds
from rnnx.shapes.rewrite_plan import MAX_ELEMENTS, ShapePlan, candidates, plan_shapes, shapes_at, variants
from rnnx.shapes.roles import BATCH, LENGTH
from rnnx.tolerance import Tolerances

# What a rewrite holds per node, measured: the input and its copy as Python protobuf objects
# (about 4 KiB a node), and for each lowered recurrence its Scan body and hoisted product.
NODE_BYTES = 4 << 10
LOWERED_BYTES = 256 << 10

# First sizes, where no recorded example gives one, and what is tried after a refusal.
_REFUSED = "ONNX Runtime could not run "  # IsolatedOnnxRuntime's prefix for a run that raised (its process lives on)


def check_rewrite_size(model: Any, source: Any, lowered: int = 0) -> None:
    """Refuse, before copying it, a graph whose rewrite would pass the memory budget
    (300,000 Identity nodes fit in 9 MB of protobuf and take a gigabyte as objects)."""
    nodes = sum(len(g.node) for g in all_graphs(model.graph))
    limits.check_claim(f"{source}: rewriting its {nodes} nodes", nodes * NODE_BYTES + lowered * LOWERED_BYTES, Path(source).stat().st_size)


# --- the shapes -----------------------------------------------------------------------------


#: A case's fields in the JSON (rnnx/cli/schema/fuse.json and lower.json): ``skipped`` where the input model
#: refuses the shape (not the rewrite's doing), ``error`` where the rewrite failed where it ran.
CASE_FIELDS = ("name", "sizes", "shapes", "where", "passed", "skipped", "error")


@dataclass
class RewriteCheck:
    """A rewrite against its input in ONNX Runtime, case by case; truthy when at least one
    case ran and none failed. ``dims`` holds each graph input's dimensions as the graph names
    them (a size, or a dynamic dimension's label), ``roles`` what each label is."""

    label: str
    dims: dict[str, list[int | str]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # shapes the input model refused while rnnx looked for one it runs
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [r for c in self.cases for r in c.rows]

    def worst(self) -> Row | None:
        """The row with the largest absolute error."""
        return max(self.rows, key=lambda r: r.max_abs, default=None)

    def __bool__(self) -> bool:
        ran = [c for c in self.cases if not c.skipped]
        return bool(ran) and all(c.passed for c in ran)

    def where(self, case: Case) -> str:
        """``x[batch=1, 80, seq=16], h[batch=1, 16]``: each input's shape, each dynamic size by its label."""
        return ", ".join(f"{shown(name, quoted=False)}[{', '.join(_dim_text(d, s) for d, s in zip(self.dims.get(name, shape), shape))}]"
                         for name, shape in case.shapes.items())

    def failure(self) -> str:
        """One line: the first case that failed, where, and what."""
        for case in self.cases:
            if case.skipped or case.passed:
                continue
            if case.error:
                return f"at {case.name} ({self.where(case)}): {case.error}"
            row = worst_failure(case.rows)
            return f"at {case.name} ({self.where(case)}): {describe(row) if row is not None else NOTHING_CHECKED}"
        return "" if self else NOTHING_CHECKED

    def to_json(self, tolerances: dict[str, Any] | None = None) -> dict[str, Any]:
        rows = []
        for case in self.cases:
            for r in case.rows:
                row = {k: v for k, v in r.to_json(ROW_FIELDS).items() if k not in ("seq_len", "batch")}
                rows.append({"case": case.name, "shapes": case.shapes, **row})
        return {
            "passed": bool(self), "tolerances": tolerances or {}, "dims": self.dims, "roles": self.roles,
            "cases": [c.to_json(CASE_FIELDS, absent=None, where=self.where(c)) for c in self.cases],
            "rows": rows, "refused": self.refused, "notes": self.notes,
        }

    def __str__(self) -> str:
        ran = [c for c in self.cases if not c.skipped]
        lines = [f"checked against {self.label} in ONNX Runtime at {len(ran)} shape(s) it runs:"]
        width = max((len(c.name) for c in self.cases), default=4)
        for c in self.cases:
            lines.append(f"  {c.name:<{width}}  {self.where(c)}" + (f"  skipped: {c.skipped}" if c.skipped else "")
                         + (f"  FAIL: {c.error}" if c.error else ""))
        rows = [(c, r) for c in ran for r in c.rows]
        if rows:
            out = max(6, *(len(shown(r.output, quoted=False)) for _, r in rows))
            lines.append(f"  {'case':<{width}}  {'output':<{out}} {'max abs':>10} {'mean abs':>10} {'p99 abs':>10} {'max rel':>10}  "
                         f"{'multiple x floor: ratio | atol, rtol, stat':<30} result")
            for c, r in rows:
                verdict = "ok" if r.passed else "FAIL" + (f" ({r.note})" if r.note else "")
                held = f"{r.multiple:g} x {r.floor:.2e}: {r.ratio:.3g}" if r.floor is not None else f"{r.atol:g}, {r.rtol:g}, {r.stat}"
                lines.append(f"  {c.name:<{width}}  {shown(r.output, quoted=False):<{out}} {r.max_abs:>10.3e} {r.mean_abs:>10.3e} {r.p99_abs:>10.3e} {r.max_rel:>10.3e}  "
                             f"{held:<30} {verdict}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _dim_text(dim: int | str, size: int) -> str:
    return str(size) if isinstance(dim, int) else f"{shown(dim, quoted=False)}={size}"


class RewriteDiffers(ParityError):
    """A rewrite (fuse, lower) differs from its input: one line, and ``check``, the case-by-case
    comparison the command line prints (its table, or its JSON with every case's numbers)."""

    def __init__(self, line: str, check: RewriteCheck) -> None:
        super().__init__(line)
        self.check = check


# --- the check --------------------------------------------------------------------------------


def compare_models(original: Any, rewritten: Any, seed: int = 0, label: str = "the input model",
                   tolerances: Tolerances | None = None, dims: dict[str, int] | None = None,
                   input_shapes: dict[str | None, list[int]] | None = None) -> RewriteCheck:
    """Every output of ``rewritten`` against ``original``'s on the same seeded inputs, at the
    shapes the module docstring describes; with boolean inputs (an If's condition, say) once with
    all of them true and once false. Each output is held to ``tolerances`` by its graph name
    (default: the tolerance of its dtype, :data:`rnnx.tolerance.BY_DTYPE`; integer and boolean
    outputs get float32's). Refuses (:class:`~rnnx.errors.RNNXError`) when the input model runs
    at none of the shapes tried."""
    plan = plan_shapes(original, rewritten, dims, input_shapes)
    check = RewriteCheck(label, {s.name: list(s.dims) for s in plan.specs}, dict(plan.roles))
    for name, (size, why) in plan.held.items():
        check.notes.append(f"{shown(name, quoted=False)} is held at {size}: {why}; at another size the input model computes something else")
    free = [k for k in plan.roles if k not in plan.fixed and k not in plan.held]
    if free and not any(plan.roles[k] in (BATCH, LENGTH) for k in free):
        check.notes.append(f"no dynamic dimension reads as a batch or a length ({', '.join(shown(k, quoted=False) for k in free)}): checked at one shape; "
                           "give other sizes with dims=LABEL=SIZE")
    # Both run in child processes under rnnx's time and memory limits: the input is a graph from
    # elsewhere, and the rewrite keeps whatever else it holds.
    size = original.ByteSize()  # what it serializes to, without serializing it a second time
    shared = TimeBudget(limits.time_limit(size))  # one limit for both sessions and all their runs
    budget = limits.memory_budget(size)
    before = make("ort", Subject(proto=original, label=label, time_budget=shared))
    try:
        found = _first_case(original, plan, check, before, seed, budget)
        cases = [found] + [_run_original(original, plan, before, name, sizes, seed + k + 1, budget)
                           for k, (name, sizes) in enumerate(variants(plan, found[0].sizes))]
    finally:
        close(before)
    after = make("ort", Subject(proto=rewritten, label=f"the rewritten {label}", time_budget=shared))
    try:
        for case, runs, want, honest in cases:
            _compare(check, case, runs, want, honest, after, tolerances, computes_in_float16(original))
    finally:
        close(after)
    return check


# a case, its feeds, the input model's outputs (or refusal) for each, and its outputs on the feeds
# nudged by one ulp (the rounding floor of the calibrated rule; None where that run failed)
_Run = tuple[Case, list[dict[str, np.ndarray]], list[Any], list[Any]]


def _too_large(plan: ShapePlan, shapes: dict[str, list[int]], budget: int) -> bool:
    elements = {s.name: float(np.prod(shapes[s.name], dtype=np.float64)) for s in plan.specs}
    nbytes = sum(elements[s.name] * np.dtype(s.dtype).itemsize for s in plan.specs)  # plan_shapes refuses an input with no dtype
    return sum(elements.values()) > MAX_ELEMENTS or nbytes * limits.WORKING_COPIES > budget


def _run_original(model: Any, plan: ShapePlan, runner: Any, name: str, sizes: dict[str, int], seed: int, budget: int) -> _Run:
    """The input model at ``sizes``: with boolean inputs twice (all true, all false). A run it
    refuses is the case's ``skipped``."""
    shapes = shapes_at(plan, sizes)
    case = Case(name, sizes, shapes)
    if _too_large(plan, shapes, budget):
        case.skipped = "its inputs would pass the memory budget"
        return case, [], [], []
    feeds = make_feeds(model, plan, sizes, shapes, seed)
    flags = [k for k, v in feeds.items() if v.dtype == np.bool_]
    runs = [feeds] + ([{k: (np.zeros_like(v) if k in flags else v) for k, v in feeds.items()}] if flags else [])
    want = [_run(runner, feed) for feed in runs]
    refusal = next((w for w in want if isinstance(w, str)), None)
    if refusal is not None:
        case.skipped = f"the input model refuses it (ONNX Runtime: {refusal})"
        return case, runs, want, []
    rng = np.random.default_rng(seed + 7919)
    # a float16 graph fed float32 (--keep-io-types) rounds a float32 ulp away at its first Cast:
    # its honest run moves its inputs by one float16 ulp
    half = computes_in_float16(model)
    honest = [_run(runner, nudged(feed, rng, np.float16 if half else None)) for feed in runs]
    return case, runs, want, [h if isinstance(h, dict) else None for h in honest]


def nudged(feeds: dict[str, np.ndarray], rng: np.random.Generator, computes_in: Any = None) -> dict[str, np.ndarray]:
    """The feeds with every floating value moved one unit in the last place, up or down at
    random: the input model on them is an honest run as far from its run on ``feeds`` as
    rounding carries (there is no float64 model to measure a rewrite's floor against). The
    unit is ``computes_in``'s (float16 for a graph that computes in it) where given."""
    out = {}
    for name, value in feeds.items():
        if value.dtype.kind == "f" and value.size:
            unit = np.dtype(computes_in) if computes_in is not None else value.dtype
            toward = np.where(rng.random(value.shape) < 0.5, -np.inf, np.inf).astype(unit)
            value = np.nextafter(value.astype(unit), toward).astype(value.dtype)
        out[name] = value
    return out


def _run(runner: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | str:
    """The outputs, or why the model refused these inputs (a run that raised; the process lives on)."""
    try:
        return runner(feeds)
    except RNNXError as exc:
        text = str(exc)
        if not text.startswith(_REFUSED):
            raise  # past the time or memory limit, or the process is gone: nothing more can run
        return _ort_message(text.split(": ", 1)[1] if ": " in text else text)


_ORT_CODE = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_ORT_NODE = re.compile(r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ")


def _ort_message(text: str) -> str:
    """ONNX Runtime's message without its boilerplate: ``Pad node 'node_pad': Pad reflect: ...``."""
    text = _ORT_NODE.sub(lambda m: f"{m.group(1)} node '{m.group(2)}': ", _ORT_CODE.sub("", text))
    return text[:200]


def _first_case(model: Any, plan: ShapePlan, check: RewriteCheck, runner: Any, seed: int, budget: int) -> _Run:
    """The first candidate shape the input model runs at; none: the one-line refusal."""
    tried: list[str] = []
    first_error = ""
    for name, sizes in candidates(plan):
        found = _run_original(model, plan, runner, name, sizes, seed, budget)
        case = found[0]
        if not case.skipped:
            if tried:
                case.name = "first shape it runs" if case.name == "first shape" else case.name
                check.refused = tried
                listed = "; ".join(tried[:3]) + (f"; and {len(tried) - 3} more" if len(tried) > 3 else "")
                check.notes.append(f"the input model itself refuses {'the first shape' if len(tried) == 1 else f'the first {len(tried)} shapes'} "
                                   f"tried ({listed}; ONNX Runtime: {first_error}): checked at shapes it runs")
            return found
        if not found[1]:  # too large to try
            continue
        tried.append(check.where(case))
        first_error = first_error or case.skipped.partition("(ONNX Runtime: ")[2].rstrip(")")
    if not tried:
        raise RNNXError(f"{check.label}: every shape rnnx would try needs more input than the memory budget or {MAX_ELEMENTS} elements allow; "
                        "give smaller sizes with dims=LABEL=SIZE or input_shapes=NAME:SHAPE")
    shown = "; ".join(tried[:6]) + (f"; and {len(tried) - 6} more" if len(tried) > 6 else "")
    given = " (with the sizes given)" if plan.fixed else ""
    raise RNNXError(f"{check.label}: the input model itself refuses every shape tried{given}: {shown} "
                    f"(ONNX Runtime: {first_error}); give shapes it takes with dims=LABEL=SIZE or input_shapes=NAME:SHAPE")


def _compare(check: RewriteCheck, case: Case, runs: list[dict[str, np.ndarray]], want: list[Any], honest: list[Any], after: Any,
             tolerances: Tolerances | None, half: bool = False) -> None:
    """``half``: the graph computes in float16 (float32 at its edges or not): its floating
    outputs are held at float16's floor, the precision they were computed in."""
    check.cases.append(case)
    if case.skipped:
        return
    flags = [k for k, v in runs[0].items() if v.dtype == np.bool_]
    for k, (feeds, expected, nudged_run) in enumerate(zip(runs, want, honest)):
        got = _run(after, feeds)
        which = f"boolean inputs {'true' if k == 0 else 'false'}" if flags else ""
        if isinstance(got, str):
            case.error = f"the rewritten model failed where the input model ran{f' ({which})' if which else ''}: {got}"
            return
        dtypes = {name: "float16" if half and np.asarray(v).dtype.kind == "f" else np.asarray(v).dtype.name for name, v in expected.items()}
        rows = compare("ort", got, expected, 0, 0, dtypes, tolerances, nudged_run)
        for stats in (r.stats for r in rows if which and r.stats is not None):
            stats.note = f"{stats.note}; {which}" if stats.note else which
        case.rows += rows
