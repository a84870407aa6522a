"""Name the mistake behind a mismatch: rerun the reference on deliberately wrong copies of the
correct weights (gates permuted, matrices transposed, biases swapped or dropped, directions
swapped; over the whole stack and over each layer and direction on its own) and, where the file's
own tensors are known, on those, and measure how much of the backend's error each one explains.

Rules, each computed on the case's own inputs (never read from a table of known equivalences):

- a hypothesis whose altered weights give the same outputs as the correct ones (within the
  tolerance) is never offered: an LSTM's or RNN's input and recurrent biases are summed, so
  swapping them changes nothing, nor does swapping a GRU's z or r biases;
- each hypothesis is scored by the share of the error it explains,
  ``1 - rms(backend - altered) / rms(backend - correct)``, and the list is ranked by it;
- only a hypothesis that reproduces the backend's output to within tolerance is stated as the
  cause; one that explains part of the error is labelled with its share ("explains 62% of the
  error");
- layer numbers are the source's own: ``first_layer`` says which layer of its module the
  weights' layer 0 is (a file's stack may be split over several nodes, each restarting at 0).

One module, though just over 450 lines: each cause it names is tested on the same per-layer,
per-step errors, and the tests are read best side by side.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnx import reference
from rnnx.check import Rule, judge
from rnnx.errors import RNNXError
from rnnx.formats import files
from rnnx.spec import RNNSpec
from rnnx.tolerance import Tolerance, per_step_max
from rnnx.weights import RNNWeights

#: A hypothesis that fits within the diagnosis's slack (``atol``, looser than the verdict's
#: tolerance) is the cause only if it also leaves less than this share of the error unexplained.
FULL_SHARE = 0.05
#: Partial explanations below this share are not shown; at most this many are.
SHOWN_SHARE, SHOWN_PARTIALS = 0.05, 3
#: Per-layer and per-direction variants are tried on at most this many cells (all of a small
#: stack, else only those whose stored tensors differ).
MAX_CELLS = 8
#: Per-layer and per-cell variants are rerun only where parameters x steps x batch is below this
#: (each reruns the reference); past it, only those that are exactly the stored tensors are named.
MAX_WORK = 3 * 10**8
#: Stored tensors that differ are weighed group by group for at most this many groups.
MAX_GROUPS = 12
#: ... and at most this many groups are named.
SHOWN_GROUPS = 6


@dataclass(frozen=True)
class Hypothesis:
    name: str
    error: float  # max abs error of the reference on the altered weights against the backend
    per_step: list[float]
    explained: float = 0.0  # share of the backend's error it explains, 0 to 1
    full: bool = False  # reproduces the backend's output to within tolerance: the cause
    kind: str = "layout"  # "layout": a mistake rnnx reruns; "stored": the file's own tensors

    @property
    def label(self) -> str:
        if self.full:
            return f"cause: {self.name}; with it the reference reproduces the output (it explains all of the error)"
        return f"partial: {self.name} explains {share_shown(self.explained)} of the error, not all of it"


def share_shown(share: float) -> str:
    """A share explained, rounded down: a partial explanation never reads as 100%."""
    return f"{min(99, int(share * 100))}%"


@dataclass
class Diagnosis:
    hypotheses: list[Hypothesis] = field(default_factory=list)  # ranked: causes first, then by share explained
    not_offered: list[str] = field(default_factory=list)  # hypotheses that change nothing on these inputs
    error: float = 0.0  # the max abs error to explain

    @property
    def matches(self) -> list[str]:
        return [h.name for h in self.hypotheses if h.full]

    def lines(self) -> list[str]:
        """What to print: every cause; else the partial explanations worth naming; else the closest."""
        causes = [h.label for h in self.hypotheses if h.full]
        if causes:
            return causes
        partial = [h.label for h in self.hypotheses if h.explained >= SHOWN_SHARE][:SHOWN_PARTIALS]
        if partial:
            return partial + ["no mistake rnnx tries explains all of it"]
        closest = f" (closest: {self.hypotheses[0].name}, error {self.hypotheses[0].error:.2e})" if self.hypotheses else ""
        return [f"no mistake rnnx tries explains any of it{closest}"]


# --- altered copies of the weights ---------------------------------------------------------

Cell = tuple[int, str]


def _cell_of(name: str) -> Cell:
    layer, direction = name.split(".")[:2]
    return int(layer[1:]), direction


def _altered(weights: RNNWeights, cells: list[Cell], change: Callable[[str, np.ndarray], np.ndarray]) -> RNNWeights:
    tensors = {k: (change(k, v) if _cell_of(k) in cells else v) for k, v in weights.tensors.items()}
    return RNNWeights(weights.spec, tensors)


def _permuted(weights: RNNWeights, perm: tuple[str, ...], cells: list[Cell]) -> RNNWeights:
    """Weights as a converter that read gate k from where gate perm[k] lives would produce."""
    src = dict(zip(weights.spec.gates, perm))

    def change(name: str, array: np.ndarray) -> np.ndarray:
        parts = name.split(".")
        if len(parts) == 4 and parts[2] != "P" and parts[3] in src:
            return weights.tensors[".".join(parts[:3] + [src[parts[3]]])]
        return array

    return _altered(weights, cells, change)


def _transposed(weights: RNNWeights, kinds: tuple[str, ...], cells: list[Cell]) -> RNNWeights | None:
    """Each gate's matrices of ``kinds`` transposed; None where one is not square."""
    if any(v.ndim != 2 or v.shape[0] != v.shape[1] for k, v in weights.tensors.items() if k.split(".")[2] in kinds and _cell_of(k) in cells):
        return None
    return _altered(weights, cells, lambda name, v: v.T if name.split(".")[2] in kinds else v)


def _biases(weights: RNNWeights, how: str, cells: list[Cell]) -> RNNWeights | None:
    if not weights.spec.bias:
        return None
    swap = {".bW.": ".bR.", ".bR.": ".bW."}

    def change(name: str, array: np.ndarray) -> np.ndarray:
        for this, other in swap.items():
            if this in name:
                return weights.tensors[name.replace(this, other)] if how == "swapped" else np.zeros_like(array)
        return array

    return _altered(weights, cells, change)


def _reversed_directions(weights: RNNWeights, layers: list[int]) -> RNNWeights | None:
    if weights.spec.direction != "bidirectional":
        return None
    swap = {"forward": "reverse", "reverse": "forward"}
    out = {}
    for name, array in weights.tensors.items():
        layer, direction = _cell_of(name)
        out[name.replace(f".{direction}.", f".{swap[direction]}.", 1) if layer in layers else name] = array
    return RNNWeights(weights.spec, out)


def _scope_name(weights: RNNWeights, first_layer: int | None, cell: Cell | None = None, layer: int | None = None) -> str:
    """How a hypothesis's scope is named: nothing for a whole stack, else the source's layer numbers."""
    spec = weights.spec
    if cell is not None:
        return f" in layer {(first_layer or 0) + cell[0]}" + (f" ({cell[1]} direction only)" if spec.num_directions > 1 else " only")
    if layer is not None:
        return f" in layer {(first_layer or 0) + layer} only"
    if first_layer is None:
        return ""
    return f" in layer {first_layer}" if spec.num_layers == 1 else f" in layers {first_layer} to {first_layer + spec.num_layers - 1}"


Maker = Callable[[], "RNNWeights | None"]


def _cell_mistakes(weights: RNNWeights, where: str, cells: list[Cell]) -> Iterator[tuple[str, int, Maker]]:
    spec, start = weights.spec, min(layer for layer, _ in cells)
    for perm in itertools.permutations(spec.gates):
        if perm != spec.gates:
            yield (f"gates read in order {','.join(perm)} instead of {','.join(spec.gates)}{where}", start,
                   functools.partial(_permuted, weights, perm, cells))
    for kinds, said in ((("W",), "input matrices W transposed"), (("R",), "recurrent matrices R transposed"),
                        (("W", "R"), "input and recurrent matrices transposed")):
        yield f"{said} (each gate's){where}", start, functools.partial(_transposed, weights, kinds, cells)
    yield f"input and recurrent biases swapped{where}", start, lambda: _biases(weights, "swapped", cells)
    yield f"biases dropped{where}", start, lambda: _biases(weights, "dropped", cells)


def hypotheses(weights: RNNWeights, first_layer: int | None = None, suspects: list[Cell] | None = None) -> Iterator[tuple[str, int, Maker, bool]]:
    """(name, first layer it alters, a maker of the altered weights, whether it alters part of
    the stack only) of every layout mistake rnnx tries: over the whole stack first, then over
    each layer of a bidirectional stack, then over each cell (only those of ``suspects``, where given)."""
    spec, cells = weights.spec, list(weights.cells())
    for name, start, make in _cell_mistakes(weights, _scope_name(weights, first_layer), cells):
        yield name, start, make, False
    if spec.direction == "bidirectional":
        every = list(range(spec.num_layers))
        yield f"forward and reverse directions swapped{_scope_name(weights, first_layer)}", 0, lambda: _reversed_directions(weights, every), False
    if len(cells) == 1:
        return
    chosen = cells if suspects is None else [c for c in cells if c in suspects]
    if spec.direction == "bidirectional" and spec.num_layers > 1:
        for layer in sorted({la for la, _ in chosen}):
            where = _scope_name(weights, first_layer, layer=layer)
            for name, start, make in _cell_mistakes(weights, where, [c for c in cells if c[0] == layer]):
                yield name, start, make, True
            yield f"forward and reverse directions swapped{where}", layer, functools.partial(_reversed_directions, weights, [layer]), True
    for cell in chosen:
        for name, start, make in _cell_mistakes(weights, _scope_name(weights, first_layer, cell=cell), [cell]):
            yield name, start, make, True


# --- the stored tensors --------------------------------------------------------------------


def _threshold(stored: np.ndarray, truth: np.ndarray) -> float:
    """How far a stored value may sit from the source's and still be the same (its dtype's rounding)."""
    eps = float(np.finfo(stored.dtype).eps) if stored.dtype.kind == "f" else 0.0
    return max(1e-6, 8 * eps) * max(1.0, float(np.max(np.abs(truth), initial=0.0)))


def _close(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    return a.shape == b.shape and bool(np.all(np.abs(a.astype(np.float64) - b.astype(np.float64)) <= threshold))


def differing(stored: RNNWeights, truth: RNNWeights) -> list[tuple[str, float]]:
    """(name, max abs difference) of each stored tensor that differs from the source's beyond rounding."""
    out = []
    for name, want in truth.tensors.items():
        got = stored.tensors.get(name)
        if got is None or got.shape != want.shape:
            continue
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
        if diff > _threshold(got, want) or not np.isfinite(diff):
            out.append((name, diff))
    return out


def renumbered(name: str, first_layer: int | None) -> str:
    """A tensor's name with the source's own layer number."""
    layer, rest = name.split(".", 1)
    return f"l{int(layer[1:]) + (first_layer or 0)}.{rest}"


def _indices(found: np.ndarray) -> str:
    items = [str(int(i)) for i in found[:4]]
    return ", ".join(items) + (f" and {len(found) - 4} more" if len(found) > 4 else "")


def _what_differs(name: str, stored: RNNWeights, truth: RNNWeights, source: str, first_layer: int | None) -> tuple[str, str | None]:
    """How stored tensor ``name`` differs from the source's; and the source tensor it holds instead, if any."""
    got, want = stored.tensors[name].astype(np.float64), truth.tensors[name].astype(np.float64)
    threshold = _threshold(stored.tensors[name], truth.tensors[name])
    layer = name.split(".")[0] + "."
    for other, array in truth.tensors.items():
        if other != name and other.startswith(layer) and _close(got, array, threshold) and np.any(np.abs(array) > threshold):
            return f"holds {source} {renumbered(other, first_layer)}", other
    if not np.all(np.isfinite(got)):
        return "holds NaN or Inf", None
    if not np.any(np.abs(got) > threshold):
        return "is zero", None
    if got.ndim == 2 and got.shape[0] == got.shape[1] and _close(got, want.T, threshold):
        return "is transposed", None
    rows = np.nonzero(np.max(np.abs(got - want).reshape(len(got), -1), axis=1) > threshold)[0]
    unit = "row" if got.ndim == 2 else "element"
    if len(rows) == len(got):
        where, verb = f"every {unit}", "differs"
    else:
        where, verb = f"{unit}{'s' if len(rows) > 1 else ''} {_indices(rows)}", "differs" if len(rows) == 1 else "differ"
    big = np.abs(want[rows]) > threshold
    if np.any(big):
        ratio = got[rows][big] / want[rows][big]
        if np.allclose(ratio, ratio[0], rtol=1e-4, atol=0) and _close(got[rows][~big], want[rows][~big], threshold):
            return f"{where} scaled by {ratio[0]:.4g}", None
    return f"{where} {verb} by up to {float(np.max(np.abs(got - want))):.2g}", None


def _groups(names: list[str], holds: dict[str, str | None]) -> list[list[str]]:
    """The differing tensors grouped where one holds another's values (a swap is one mistake)."""
    group = {n: {n} for n in names}
    for n, other in holds.items():
        if other in group and group[other] is not group[n]:
            merged = group[n] | group[other]
            for m in merged:
                group[m] = merged
    seen, out = set(), []
    for n in names:
        key = id(group[n])
        if key not in seen:
            seen.add(key)
            out.append([m for m in names if m in group[n]])
    return out


def _with(truth: RNNWeights, stored: RNNWeights, names: list[str]) -> RNNWeights:
    return RNNWeights(truth.spec, {k: (stored.tensors[k].astype(v.dtype) if k in names else v) for k, v in truth.tensors.items()})


# --- running -------------------------------------------------------------------------------


class _Layered:
    """The reference, layer by layer, with the correct weights' input to each layer kept, so
    that a hypothesis altering layer k reruns layers k and up only."""

    def __init__(self, truth: RNNWeights, inputs: Mapping[str, np.ndarray]) -> None:
        self.spec, self.inputs = truth.spec, inputs
        self.layer_in = [np.asarray(inputs["X"], np.float64)]
        for k in range(self.spec.num_layers):
            self.layer_in.append(self._layer(truth, k, self.layer_in[k]))
        self.truth_y = self.layer_in[-1]

    def _layer(self, weights: RNNWeights, k: int, x: np.ndarray) -> np.ndarray:
        D = self.spec.num_directions
        states = {role: (None if self.inputs.get(role) is None else np.asarray(self.inputs[role])[k * D:(k + 1) * D]) for role in ("h0", "c0")}
        return reference.forward(one_layer(weights, k), x, states["h0"], states["c0"], self.inputs.get("seq_lens")).y

    def run(self, weights: RNNWeights, from_layer: int = 0) -> np.ndarray:
        y = self.layer_in[from_layer]
        for k in range(from_layer, self.spec.num_layers):
            y = self._layer(weights, k, y)
        return y


def one_layer(weights: RNNWeights, k: int) -> RNNWeights:
    """Layer ``k`` of a stack as a one-layer stack (its tensors renamed ``l0.``)."""
    spec = weights.spec
    if spec.num_layers == 1:
        return weights
    one: RNNSpec = spec.with_(num_layers=1, input_size=spec.layer_input_size(k))
    prefix = f"l{k}."
    return RNNWeights(one, {"l0." + name[len(prefix):]: v for name, v in weights.tensors.items() if name.startswith(prefix)})


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(a)))) if a.size else 0.0


def explain(weights: RNNWeights, inputs: Mapping[str, np.ndarray], backend_y: np.ndarray, atol: float, *, tol: Tolerance | None = None,
            stored: RNNWeights | None = None, first_layer: int | None = None, source: str = "the source's") -> Diagnosis:
    """How much of the gap between ``backend_y`` and the reference on the correct ``weights``
    each mistake explains (see the module docstring).

    ``atol`` is the diagnosis's slack: a mistake within it of the backend's output, leaving
    under :data:`FULL_SHARE` of the error, is the cause, as is one within ``tol`` (the
    verdict's tolerance; default ``atol``). ``stored``: the weights the file holds, in the
    same spec; those that differ from ``weights`` become one more hypothesis, weighed group by
    group. ``first_layer``: the source's number of ``weights``' layer 0 (None: ``weights`` is
    the source's whole stack). ``source`` names the correct weights in messages."""
    tol = tol or Tolerance(atol, 0.0)
    run = _Layered(weights, inputs)
    got = np.asarray(backend_y, np.float64)
    if got.shape != run.truth_y.shape:
        raise RNNXError(f"diagnosis: the backend's Y has shape {list(got.shape)}, the reference's {list(run.truth_y.shape)}")
    gap = got - run.truth_y
    found = Diagnosis(error=float(np.max(np.abs(gap), initial=0.0)))
    base = _rms(gap)

    def weigh(name: str, altered: RNNWeights, from_layer: int, kind: str) -> Hypothesis | None:
        y = run.run(altered, from_layer)
        if judge(y, run.truth_y, Rule(tol)).passed:  # changes nothing here: never offered
            found.not_offered.append(name)
            return None
        residual = got - y
        worst = float(np.max(np.abs(residual), initial=0.0)) if np.all(np.isfinite(y)) else float("inf")
        share = min(1.0, max(0.0, 1.0 - _rms(residual) / base)) if base > 0 and np.isfinite(worst) else 0.0
        full = np.isfinite(worst) and (judge(got, y, Rule(tol)).passed or (worst <= atol and worst <= FULL_SHARE * found.error))
        return Hypothesis(name, worst, per_step_max(got, y, time_axis=0), share, bool(full), kind)

    diff = differing(stored, weights) if stored is not None and stored.spec == weights.spec else []
    suspects = sorted({_cell_of(n) for n, _ in diff}) if diff else None
    if suspects is None and len(list(weights.cells())) > MAX_CELLS:
        suspects = []
    small = weights.num_parameters() * got.shape[0] * got.shape[1] <= MAX_WORK
    layout: list[tuple[Hypothesis, RNNWeights]] = []
    mine: Hypothesis | None = None
    weighed_stored = False

    def weigh_stored() -> None:  # once, after the whole-stack mistakes: unless one of them is the stored tensors
        nonlocal mine, weighed_stored
        if not weighed_stored and diff and stored is not None and not any(_close_weights(altered, stored) for _, altered in layout):
            mine = _stored_hypothesis(weights, stored, diff, weigh, source, first_layer)
        weighed_stored = True

    for name, start, make, part in hypotheses(weights, first_layer, suspects):
        if part:
            weigh_stored()
        altered = make()
        if altered is None:
            continue
        if part and mine is not None and stored is not None and _close_weights(altered, stored):
            # exactly the stored tensors: their result, under the more telling name
            layout.append((Hypothesis(name, mine.error, mine.per_step, mine.explained, mine.full), altered))
            continue
        if part and (not small or any(h.full for h, _ in layout) or (mine is not None and mine.full)):
            continue  # a cause is known already (one cell's mistake can only be part of a whole-stack one), or the case is too large
        if (h := weigh(name, altered, start, "layout")) is not None:
            layout.append((h, altered))
    weigh_stored()
    found.hypotheses = [h for h, _ in layout]
    if mine is not None and stored is not None and not any(_close_weights(altered, stored) for _, altered in layout):
        found.hypotheses.append(mine)  # (stored tensors that are a layout mistake already named are left to that name: it says more)
    # causes first (a layout mistake's name before the stored tensors'), then by the share explained
    found.hypotheses.sort(key=lambda h: (not h.full, h.full and h.kind != "layout", -h.explained, h.error))
    return found


def _close_weights(a: RNNWeights, b: RNNWeights) -> bool:
    return all(_close(b.tensors[k], v, _threshold(b.tensors[k], v)) for k, v in a.tensors.items())


def _stored_hypothesis(truth: RNNWeights, stored: RNNWeights, diff: list[tuple[str, float]],
                       weigh: Callable[[str, RNNWeights, int, str], Hypothesis | None], source: str, first_layer: int | None) -> Hypothesis | None:
    """The file's own differing tensors as one hypothesis; each group of them that changes
    nothing by itself (a swap of an LSTM's summed biases) is left out of its name."""
    said, holds = {}, {}
    for name, _ in diff:
        said[name], holds[name] = _what_differs(name, stored, truth, source, first_layer)
    groups = _groups([n for n, _ in diff], holds)
    named: list[tuple[list[str], float | None]] = [(groups[0], None)] if len(groups) == 1 else []
    if len(groups) > 1:
        for group in groups[:MAX_GROUPS]:
            alone = weigh("stored " + ", ".join(renumbered(n, first_layer) for n in group), _with(truth, stored, group), min(_cell_of(n)[0] for n in group), "stored")
            if alone is not None:
                named.append((group, alone.explained))
        named.sort(key=lambda g: -(g[1] or 0.0))
        if len(named) == 1:
            named = [(named[0][0], None)]
        named += [(g, None) for g in groups[MAX_GROUPS:]]
    if not named:
        return None
    parts = [", ".join(f"{renumbered(n, first_layer)} ({said[n]})" for n in group)
             + (f" (explaining {share_shown(share)} alone)" if share is not None and share >= SHOWN_SHARE else "")
             for group, share in named]
    name = f"stored weights differ from {source}: " + "; ".join(parts[:SHOWN_GROUPS]) + (f"; and {len(parts) - SHOWN_GROUPS} more" if len(parts) > SHOWN_GROUPS else "")
    return weigh(name, _with(truth, stored, [n for n, _ in diff]), min(_cell_of(n)[0] for n, _ in diff), "stored")


def stored_weights(model: str | Path | None, spec: RNNSpec) -> RNNWeights | None:
    """The weights an ONNX file stores, read back into canonical form, where they read as one
    stack of ``spec``; None otherwise (the diagnosis then rests on layout mistakes alone)."""
    if model is None or Path(model).suffix.lower() != ".onnx":
        return None
    try:
        stored = files.load(Path(model))
    except RNNXError:
        return None
    return stored if stored.spec == spec else None


def per_step_error(got: np.ndarray, want: np.ndarray) -> list[float]:
    """Max abs error at each time step of a (seq, batch, features) output."""
    return per_step_max(got, want, time_axis=0)
