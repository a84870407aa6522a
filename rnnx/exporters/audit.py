"""The dimension audit: which sizes the torch model accepts, held against what the file accepts.

torch.export decides which dimensions a trace keeps dynamic, and it decides from the example:
a batch of 1, an input nothing reads, a dimension squeezed away all come out static. The file
would then refuse shapes the model runs with, and a self-check that only tries the file's own
shapes cannot see it. So the model is asked directly. For every dimension the file fixes,
the torch model is run with that dimension changed (twice the size, and half of it):
alone, together with every dimension of the other inputs that has the same size in the
example (a batch is shared across inputs), and together with just those of them that the
file keeps dynamic. New sizes are made by repeating or cutting the example's own values, so
token ids, lengths and flags stay valid.

What the recurrences see tells a dimension's role: if a recurrent module's batch changed with
it, it is a batch; if its time axis changed, or any module was called a different number of
times (a Python loop over time), it is a length; so it is where the file holds a loop the trace
unrolled that slices it step by step (a cell written by hand is no module: the file says what
the hooks cannot, :func:`rnnx.exporters.audit_file.unrolled_steps`); otherwise it is another
dimension.

Verdicts, one per dimension of every input (:class:`DimVerdict`):

- ``dynamic``: the file takes any size;
- ``static: required``: the model itself refused every other size tried;
- ``static: asked``: the user made it static;
- ``static``, with why: the model runs at another size, the dimension is neither a batch nor
  a length, and the file could not keep it dynamic (said in the report, by name);
- ``missed``: the model runs at another size and the dimension is a batch or a length. The
  export fails, unless a retry (the dimension offered to torch.export as dynamic, on the
  inputs the model accepted) makes it dynamic.

A dimension of an input the file never reads, values or shape, is made dynamic in the file
directly (nothing in the graph depends on it; one whose shape alone is read, zeros_like(x), is
asked of the model like any other). And an input the file ignores must be one the
model ignores: its values are varied (zeros, ones) and torch's outputs compared; where they
move, the file computes the branch the example took, and it is not written.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rnnx.errors import DETAIL_CHARS, one_line
from rnnx.exporters.audit_file import free_dims, shape_read, unrolled_steps, values_read
from rnnx.exporters.bounded import STOPPED, Bounds, bounded
from rnnx.exporters.example_values import draw_integers, integer_summary
from rnnx.exporters.model_lines import branch_at, loop_at
from rnnx.exporters.selfcheck import run_eager
from rnnx.exporters.shapes import Leaf, Naming
from rnnx.exporters.user_code import pre_hooks, tensors
from rnnx.formats.onnx_read import invented_label
from rnnx.shapes.roles import BATCH, LENGTH, OTHER
from rnnx.shapes.sizes import audit_sizes

DYNAMIC, REQUIRED, ASKED, STATIC, MISSED = "dynamic", "static: required", "static: asked", "static", "missed"
# Bounds on the work a hostile or huge model can make the audit do.
MAX_PROBE_RUNS = 160
MAX_COMBINATIONS = 6  # one same-size dimension of each other input: the combinations tried per dimension
MAX_PROBE_BYTES = 1 << 29


@dataclass
class DimVerdict:
    input: str
    dim: int
    size: int
    verdict: str
    label: str | None = None  # the file's label where the dimension is dynamic
    role: str = ""  # batch / length / other where a probe or the trace told
    accepted: int | None = None  # a size the model ran at, for a dimension the file fixes
    why: str = ""

    def line(self) -> str:
        text = f"{self.input} dim {self.dim} ({self.size} in the example): {self.verdict}"
        if self.label:
            text += f" as {self.label}"
        if self.why:
            text += f" ({self.why})"
        return text


@dataclass
class _Probe:
    accepted: int | None = None
    role: str = ""
    told: str = ""  # how the recurrences told the role
    partners: list[tuple[int, int]] = field(default_factory=list)
    values: list[Any] | None = None
    refused: str = ""
    skipped: str = ""


@dataclass
class AuditResult:
    dims: list[DimVerdict] = field(default_factory=list)
    failure: str = ""  # one line where a batch or length is fixed, or an ignored input moves torch's outputs
    notes: list[str] = field(default_factory=list)
    missed: list[tuple[Leaf, int, _Probe]] = field(default_factory=list)  # for a retry

    def to_json(self) -> list[dict[str, Any]]:
        return [asdict(d) for d in self.dims]


@dataclass
class _Observation:
    """What the recurrences saw in one run: per module, (batch, time) per call, and call counts."""

    shapes: dict[str, list[tuple[int | None, int | None]]]
    calls: collections.Counter


class DimensionAudit:
    """Asks one torch model which sizes it accepts; probes are cached across the routes tried."""

    def __init__(self, model: Any, leaves: Sequence[Leaf], structure: Any) -> None:
        self.model, self.leaves, self.structure = model, list(leaves), structure
        self._probes: dict[tuple[int, int, tuple[tuple[int, int], ...]], _Probe] = {}
        self._base: _Observation | None = None
        self._base_out: list[Any] | None = None
        self._bounds: Bounds | None = None  # read when first asked: --time-limit / --max-memory are set around the verb
        self.runs = 0

    # --- asking the model ------------------------------------------------------------------

    def _observe(self, values: list[Any], what: str) -> tuple[_Observation, list[Any]]:
        """One run of the model on ``values`` (``what``: which, for a stop's message), in a bounded
        child (:mod:`rnnx.exporters.bounded`): what the recurrences saw, and the outputs."""
        self.runs += 1
        return bounded(lambda: self._observe_here(values), f"the dimension audit's run of the model {what}", self.bounds)

    @property
    def bounds(self) -> Bounds:
        if self._bounds is None:
            self._bounds = Bounds.of(self.model, [leaf.value for leaf in self.leaves])
        return self._bounds

    def _observe_here(self, values: list[Any]) -> tuple[_Observation, list[Any]]:
        import torch

        shapes: dict[str, list[tuple[int | None, int | None]]] = collections.defaultdict(list)
        calls: collections.Counter = collections.Counter()

        def hook(name: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            calls[name] += 1
            seen = _recurrence_sizes(module, args[0] if args else kwargs.get("input"))
            if seen is not None:
                shapes[name].append(seen)

        # a TorchScript module takes no hooks: its roles stay unknown (other)
        with pre_hooks(() if isinstance(self.model, torch.jit.ScriptModule) else self.model.named_modules(), hook):
            out = run_eager(self.model, values, self.structure)
        return _Observation(dict(shapes), calls), tensors(out)

    def _baseline(self) -> _Observation:
        if self._base is None:
            self._base, self._base_out = self._observe([leaf.value for leaf in self.leaves], "on the example")
        return self._base

    def _probe(self, index: int, d: int, partners: tuple[tuple[int, int], ...]) -> _Probe:
        key = (index, d, partners)
        if key in self._probes:
            return self._probes[key]
        probe = _Probe(partners=list(partners))
        self._probes[key] = probe
        size = int(self.leaves[index].value.shape[d])
        for new in audit_sizes(size):
            if self.runs >= MAX_PROBE_RUNS:
                probe.skipped = f"not probed: the audit's budget of {MAX_PROBE_RUNS} model runs was spent"
                return probe
            values = self._resized(((index, d),) + partners, new)
            if values is None:
                probe.skipped = f"not probed: inputs at {new} would exceed {MAX_PROBE_BYTES >> 20} MiB"
                return probe
            try:
                base = self._baseline()
                seen, _ = self._observe(values, self._at(((index, d),) + partners, new))
            except STOPPED:  # stopped by a budget, or the process ended: not an answer about the size
                raise
            except Exception as exc:  # noqa: BLE001  the user's model may raise anything at a size it does not take
                probe.refused = f"at {new}: {one_line(exc, DETAIL_CHARS, typed=True)}"
                continue
            probe.accepted, probe.values = new, values
            probe.role, probe.told = _role(base, seen)
            return probe
        return probe

    def _at(self, dims: Sequence[tuple[int, int]], new: int) -> str:
        """"with x dim 0 and h0 dim 1 at 16": the probe, for a stop's message."""
        return "with " + " and ".join(f"{self.leaves[i].name} dim {k}" for i, k in dims) + f" at {new}"

    def _resized(self, dims: Sequence[tuple[int, int]], new: int) -> list[Any] | None:
        out = [leaf.value for leaf in self.leaves]
        for i, d in dims:
            out[i] = resize(out[i], d, new)
        total = sum(v.numel() * v.element_size() for v in out if hasattr(v, "element_size"))
        return None if total > MAX_PROBE_BYTES else out

    def accepts(self, index: int, d: int, dynamic: set[tuple[int, int]]) -> _Probe:
        """Does the model run with input ``index``'s dimension ``d`` at another size? Tried alone and
        with sets of the same-size dimensions of the other inputs (``dynamic``: the file's dynamic ones)."""
        size = int(self.leaves[index].value.shape[d])
        same = tuple((leaf.index, k) for leaf in self.leaves if leaf.is_tensor and leaf.index != index
                     for k, n in enumerate(leaf.value.shape) if n == size)
        # alone; with every same-size dimension; with those at the same position (a batch
        # leads every input); with those the file keeps dynamic; then one same-size dimension
        # of each other input (a state's batch is its second axis), same positions first
        tries = [(), same, tuple(p for p in same if p[1] == d), tuple(p for p in same if p in dynamic)]
        per_input: dict[int, list[tuple[int, int]]] = {}
        for i, k in same:
            per_input.setdefault(i, []).append((i, k))
        if any(len(v) > 1 for v in per_input.values()):
            choices = [sorted(v, key=lambda p: (p[1] != d, p[1])) for v in per_input.values()]
            combos = sorted(itertools.islice(itertools.product(*choices), MAX_COMBINATIONS * 4),
                            key=lambda c: -sum(p[1] == d for p in c))[:MAX_COMBINATIONS]
            tries += [tuple(c) for c in combos]
        last = _Probe()
        for partners in dict.fromkeys(tries):
            probe = self._probe(index, d, partners)
            if probe.accepted is not None or probe.skipped:
                return probe
            last = probe
        return last

    def ignored_input_moves(self, index: int) -> str:
        """Where other values of input ``index`` change torch's outputs: a one-line description
        (which values, which module reads the input); else "". The values tried are ones the
        model could be given: for a float or a flag, all zeros and all ones; for integers
        (ids, lengths), fresh draws within the example's range and the example reversed."""
        import numpy as np
        import torch

        leaf = self.leaves[index]
        x = leaf.value
        self._baseline()
        if x.dtype == torch.bool:
            variants = [("all False", torch.zeros_like(x)), ("all True", torch.ones_like(x))]
        elif x.is_floating_point():
            variants = [("all 0s", torch.zeros_like(x)), ("all 1s", torch.ones_like(x))]
        else:
            rng = np.random.default_rng(0)
            summary = integer_summary(x.detach().cpu().numpy())
            variants = [(f"drawn from {summary['min']}..{summary['max']}" if summary else "drawn",
                         torch.from_numpy(draw_integers(rng, list(x.shape), summary, np.int64)).to(x.dtype))]
            if x.dim():
                variants.append(("reversed", x.flip(-1)))
        raised = []
        for what, value in variants:
            values = [lf.value for lf in self.leaves]
            values[index] = value
            try:
                _, out = self._observe(values, f"with {leaf.name} {what}")
            except STOPPED:
                raise
            except Exception as exc:  # noqa: BLE001  not a value the model takes; try the next
                raised.append(f"{what}: {type(exc).__name__}")
                continue
            base = self._base_out or []
            if len(out) != len(base) or any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(out, base)):
                return f"torch's outputs change when {leaf.name} is {what}" + (branch_at(self, values, f"with {leaf.name} {what}") or self._reader(index))
        if raised and len(raised) == len(variants):
            return f"the model raised at every other value of {leaf.name} tried ({'; '.join(raised)}), so it reads them" + self._reader(index)
        return ""

    def _reader(self, index: int) -> str:
        """" (read by <module> (<Class>))": the innermost module that received the tensor as it was."""
        import torch

        if isinstance(self.model, torch.jit.ScriptModule):
            return ""
        # _readers swallows what the model raises (the reader is a hint); a stop still stops
        found = bounded(lambda: self._readers(index), f"the dimension audit's run of the model on the example (who reads {self.leaves[index].name})",
                        self.bounds)
        if not found:
            return ""
        name, cls = max(found, key=lambda f: f[0].count(".") + bool(f[0]))
        return f" (read in {name or 'the model'}'s forward, {cls})"

    def _readers(self, index: int) -> list[tuple[str, str]]:
        """(module name, class) of every module that received input ``index``'s tensor as it was."""
        import torch

        target = self.leaves[index].value
        found: list[tuple[str, str]] = []

        def hook(name: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if any(a is target for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)):
                found.append((name, type(module).__name__))

        try:
            with pre_hooks(self.model.named_modules(), hook):
                run_eager(self.model, [leaf.value for leaf in self.leaves], self.structure)
        except Exception:  # noqa: BLE001  a model that raises here reads nothing we can name
            pass
        return found


def resize(value: Any, d: int, new: int) -> Any:
    """``value`` with dimension ``d`` at ``new``: the example's slices repeated, or cut."""
    import torch

    size = int(value.shape[d])
    if new <= size:
        return value.narrow(d, 0, new).clone()
    reps = [1] * value.dim()
    reps[d] = math.ceil(new / max(size, 1))
    return value.repeat(*reps).narrow(d, 0, new).clone() if size else torch.zeros(*[new if k == d else s for k, s in enumerate(value.shape)], dtype=value.dtype)


def _recurrence_sizes(module: Any, x: Any) -> tuple[int | None, int | None] | None:
    """(batch, time) of a recurrent module's input, or None for any other module."""
    import torch
    from torch.nn.utils.rnn import PackedSequence

    if isinstance(module, torch.nn.RNNBase):
        if isinstance(x, PackedSequence):
            return int(x.batch_sizes[0]), len(x.batch_sizes)
        if isinstance(x, torch.Tensor):
            if x.dim() == 2:
                return None, int(x.shape[0])
            t, b = (1, 0) if module.batch_first else (0, 1)
            return int(x.shape[b]), int(x.shape[t])
    if isinstance(module, torch.nn.RNNCellBase) and isinstance(x, torch.Tensor):
        return (int(x.shape[0]) if x.dim() == 2 else None), None
    return None


def _role(base: _Observation, seen: _Observation) -> tuple[str, str]:
    """(role, how the recurrences told it)."""
    for name, calls in base.shapes.items():
        now = seen.shapes.get(name, [])
        if {b for b, _ in calls} != {b for b, _ in now}:
            return BATCH, f"{name or 'the model'}'s batch follows it"
    for name, calls in base.shapes.items():
        if {t for _, t in calls} != {t for _, t in seen.shapes.get(name, [])}:
            return LENGTH, f"{name or 'the model'}'s time axis follows it"
    looped = [n for n in base.calls if base.calls[n] != seen.calls.get(n, 0)]
    if looped:  # a module called per step: a Python loop over this dimension
        name = max(looped, key=lambda n: n.count(".") + bool(n))
        return LENGTH, f"a Python loop calls {name or 'the model'} once per step ({base.calls[name]} calls, {seen.calls.get(name, 0)} at the new size)"
    return OTHER, ""


def judge(audit: DimensionAudit, proto: Any, naming: Naming, user_static: set[tuple[str, int]]) -> AuditResult:
    """Every dimension of every tensor input, against what the model accepts. Makes the
    dimensions of inputs the file never reads (values or shape) dynamic in ``proto`` and ``naming``."""
    result = AuditResult()
    read, touched = values_read(proto), shape_read(proto)
    steps = unrolled_steps(proto)  # a loop the trace unrolled, whoever wrote its cell: its steps slice a length
    tensors = [leaf for leaf in audit.leaves if leaf.is_tensor]
    dynamic = {(leaf.index, d) for leaf in tensors for d, v in enumerate(naming.input_dims.get(leaf.name, [])) if isinstance(v, str)}
    label_at = {(leaf.index, d): v for leaf in tensors for d, v in enumerate(naming.input_dims.get(leaf.name, [])) if isinstance(v, str)}
    freed: dict[str, dict[int, str]] = {}
    for leaf in tensors:
        dims = naming.input_dims.get(leaf.name, list(leaf.value.shape))
        ignored = leaf.name not in read
        if ignored:
            why = audit.ignored_input_moves(leaf.index)
            if why:
                result.failure = result.failure or (f"the file ignores input {leaf.name}, but {why}: a trace keeps only what the example took (a branch "
                                                    "on its values, a write tracing cannot see); write the branch as torch.where (or torch.cond) so that the file reads the input")
        for d, v in enumerate(dims):
            size = int(leaf.value.shape[d])
            if isinstance(v, str):
                result.dims.append(DimVerdict(leaf.name, d, size, DYNAMIC, v, naming.roles.get(v, "")))
                continue
            if (leaf.name, d) in user_static:
                result.dims.append(DimVerdict(leaf.name, d, size, ASKED))
                continue
            if leaf.name not in touched:
                # nothing in the graph depends on it: any size; a batch keeps its name so the sizes stay tied
                partner = next((label_at[(o.index, k)] for o in tensors if o is not leaf for k, n in enumerate(o.value.shape)
                                if n == size and naming.roles.get(label_at.get((o.index, k), "")) == BATCH), None)
                label = partner or invented_label(leaf.name, d)
                freed.setdefault(leaf.name, {})[d] = label
                result.dims.append(DimVerdict(leaf.name, d, size, DYNAMIC, label, BATCH if partner else OTHER,
                                              why="the file never reads this input, its values or its shape"))
                continue
            probe = audit.accepts(leaf.index, d, dynamic)
            if probe.accepted is not None and probe.role not in (BATCH, LENGTH) and steps.get((leaf.name, d)):
                # no module saw it (a cell written by hand), but the file holds one step per slice of it
                probe = replace(probe, role=LENGTH, told=f"the file cuts it into the {steps[(leaf.name, d)]} steps of a loop the trace unrolled")
            if probe.skipped:
                result.dims.append(DimVerdict(leaf.name, d, size, STATIC, why=probe.skipped))
            elif probe.accepted is None:
                result.dims.append(DimVerdict(leaf.name, d, size, REQUIRED, why=probe.refused))
            elif probe.role in (BATCH, LENGTH):
                with_ = ", ".join(f"{audit.leaves[i].name} dim {k}" for i, k in probe.partners)
                why = (f"the model runs with it at {probe.accepted}" + (f" (with {with_})" if with_ else "")
                       + f", as a {probe.role}: {probe.told}" + (loop_at(audit, proto, leaf, d, probe) if probe.role == LENGTH else ""))
                result.dims.append(DimVerdict(leaf.name, d, size, MISSED, role=probe.role, accepted=probe.accepted, why=why))
                result.missed.append((leaf, d, probe))
            else:
                result.dims.append(DimVerdict(leaf.name, d, size, STATIC, role=OTHER, accepted=probe.accepted,
                                              why=f"the model runs with it at {probe.accepted}, but it reaches no recurrence and torch fixed it"))
    if freed:
        free_dims(proto, naming, freed)
        result.notes.append("inputs the file never reads take any size: "
                            + "; ".join(f"{n}[{', '.join(f'{d}={lab}' for d, lab in dims.items())}]" for n, dims in freed.items()))
    if result.missed and not result.failure:
        first = next(v for v in sorted(result.dims, key=lambda v: "re-roll" not in v.why) if v.verdict == MISSED)  # a loop left unrolled first: the cause
        result.failure = (f"input {first.input} dim {first.dim} is fixed at {first.size} in the file, but {first.why}"
                          f"; rnnx could not make it dynamic (give static={{'{first.input}': [{first.dim}]}} / --static {first.input}:{first.dim} "
                          "to accept a file fixed at the example's size)")
    for v in result.dims:
        if v.verdict == STATIC and v.accepted is not None:
            result.notes.append(f"{v.input} dim {v.dim} is static at {v.size}, although the model also runs at {v.accepted}: "
                                "it reaches no recurrence and torch fixed it (name it with dynamic= / --dynamic to insist)")
    return result
