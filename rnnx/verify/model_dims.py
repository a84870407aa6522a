"""Which sizes ``verify --against`` model code checks: the torch model decides, not the file.

A file's declared shapes say what the file claims. An exporter that unrolled a Python loop over
time (torch.onnx's dynamo exporter with ``Dim.AUTO``) writes a file that runs at the example's
length only, and may still declare the length dynamic under a label nothing names a length
(``s27``); a file may also fix a batch the model takes at any size. Checked at the file's own
shapes, such a file passes. So verify asks the torch model, with the dimension audit ``rnnx
export`` runs (:class:`rnnx.exporters.audit.DimensionAudit`: the model run with one dimension
changed at a time, the recurrences watched to tell a batch from a length), about every dimension
of every input, and the cases follow its answers:

- a dimension the model runs at other sizes as a batch or a length is varied like one, whether
  the file keeps it dynamic or fixes it: a file that refuses those sizes, or computes something
  else there, fails, naming the input, the dimension and the size;
- a dimension the model refuses at every other size is held at its size;
- one the model runs at other sizes but whose role neither the model's recurrences nor the file
  tell (a hand-written cell's batch, a length that reaches the recurrence through a Concat) is
  said, and where the file keeps it dynamic it is also run once at the size the model took;
- ``--static INPUT:DIM`` (the user narrowing a dimension to the file's size) and ``--dim
  LABEL=SIZE`` are obeyed, and said.

A dimension whose role the file reads as a batch or a length (rnnx export's record, its name,
its wiring) is varied as before; the model's answer is reported beside it. Where the torch model
raises at a size verify chose for one (a view into a fixed number of regions takes only lengths
divisible by it), :meth:`ModelDims.instead` offers sizes that keep the divisibility the sizes it
ran at share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from math import gcd
from typing import Any

import numpy as np

from rnnx.check import Case
from rnnx.errors import NOTE_CHARS, RNNXError, one_line
from rnnx.exporters.audit import DimensionAudit
from rnnx.exporters.selfcheck import run_eager
from rnnx.exporters.shapes import Leaf
from rnnx.shapes.file_dims import FROM_RECORD, FileDims, InputSpec
from rnnx.shapes.roles import BATCH, LENGTH, OTHER
from rnnx.shapes.sizes import multiple_of
from rnnx.verify.calls import Call

# Where the sizes a dimension is checked at came from.
FROM_MODEL = "the torch model"
FROM_FILE = "the file"
UNTRACED = "untraced"  # the model takes other sizes; neither it nor the file says what the dimension is
NARROWED = "--static"
GIVEN = "--dim"
MAX_INSTEAD = 4  # sizes tried per label where the model refuses one verify chose: the smallest multiples, and the sizes' common one


@dataclass
class DimSource:
    """One dimension of one input: what the file says, what the torch model says, and which decided."""

    input: str
    dim: int
    size: int  # at the shapes the model was asked from
    file: str  # "fixed" or the file's label
    role: str  # what the cases do with it: batch / length (varied), other (held)
    source: str  # FROM_MODEL, FROM_FILE, UNTRACED, NARROWED or GIVEN
    label: str = ""  # the label the cases size it by; "" where it is held at ``size``
    file_role: str = ""  # what the file's reading (record, name, wiring) makes of a dynamic one
    model: str = ""  # what the torch model said
    accepted: int | None = None  # another size the torch model ran at

    def line(self) -> str:
        held = f"fixed at {self.size}" if self.file == "fixed" else f"dynamic as {self.file}"
        if self.source == UNTRACED:
            what = "its role untraced (see the note)"
        elif self.source in (NARROWED, GIVEN):
            what = f"held at one size, narrowed by {self.source}"
        else:
            what = (f"varied as a {self.role}" if self.role in (BATCH, LENGTH) else f"held at {self.size}") + f", as {self.source} says"
        return f"{self.input} dim {self.dim} ({held} in the file): {what}" + (f"; the torch model {self.model}" if self.model else "")


@dataclass
class ModelDims:
    """The file's inputs as the torch model sizes them, for :func:`rnnx.verify.cases.plan_cases`."""

    specs: list[InputSpec]
    roles: dict[str, str]
    dims: list[DimSource] = field(default_factory=list)
    fixed: dict[str, int] = field(default_factory=dict)  # labels narrowed to one size (--static on a dynamic dimension)
    extra: dict[str, list[int]] = field(default_factory=dict)  # untraced labels: more cases, at the size the model ran and at 1
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> list[dict[str, Any]]:
        return [{**asdict(d), "line": d.line()} for d in self.dims]

    def instead(self, sizes: dict[str, int], given: set[str]) -> list[tuple[str, int, str]]:
        """Where the torch model raised at ``sizes``: (label, size, why) to try instead, one label
        at a time, for each batch or length the model ran at two sizes (not the ``given`` ones, which
        the user chose): the size rounded up to a multiple of each divisor of the sizes' greatest
        common divisor, smallest first (the lengths 12 and 24 share 12: 28, 36 for a 27 that a
        model viewing its sequence as 4 regions refuses)."""
        ran: dict[str, set[int]] = {}
        for d in self.dims:
            if d.label and d.label not in given and d.role in (BATCH, LENGTH) and d.accepted is not None:
                ran.setdefault(d.label, set()).update((d.size, d.accepted))
        tries: list[tuple[str, int, str]] = []
        for label, seen in ran.items():
            size, step = sizes.get(label), gcd(*seen)
            if size is None or size % step == 0:
                continue
            ran_at = " and ".join(map(str, sorted(seen)))
            rounded = {multiple_of(size, k): k for k in range(step, 1, -1) if step % k == 0 and size % k}  # each size by its smallest divisor
            ordered = sorted(rounded.items())
            kept = ordered[:MAX_INSTEAD - 1] + [p for p in ordered[-1:] if p not in ordered[:MAX_INSTEAD - 1]]
            tries += [(label, new, f"{label}={size} rounded up to a multiple of {k}: the torch model ran at {ran_at}") for new, k in kept]
        return tries

    def case_instead(self, case: Case, specs: list[InputSpec], given: set[str], runs_at: Callable[[Case], Any]) -> Case | None:
        """The first of :meth:`instead`'s sizes for ``case`` that ``runs_at`` (the torch model) takes,
        as a case; ``case`` says so. None where it takes none."""
        tied = self._tied(case, specs, given)
        if tied is not None:
            try:
                runs_at(tied[0])
            except Exception:  # noqa: BLE001  the user's model may raise anything: not tied that way
                pass
            else:
                case.skipped += f"; checked at {tied[0].name} instead ({tied[1]})"
                return tied[0]
        for label, size, why in self.instead(case.sizes, given):
            spelled = "batch" if self.roles.get(label) == BATCH else label  # verify's case names call every batch "batch"
            old = f"{spelled}={case.sizes[label]}"
            name = case.name.replace(old, f"{spelled}={size}") if old in case.name else f"{case.name}, {label}={size}"
            other = Case.at(specs, name, {**case.sizes, label: size})
            try:
                runs_at(other)
            except Exception:  # noqa: BLE001  the user's model may raise anything: not a size it takes either
                continue
            case.skipped += f"; checked at {other.name} instead ({why})"
            return other
        return None

    def _tied(self, case: Case, specs: list[InputSpec], given: set[str]) -> tuple[Case, str] | None:
        """``case`` with every label the cases hold (neither a batch nor a length, nor given) moved
        along with a batch or length ``case`` moves, where both had one size when the model was asked:
        a model may tie them where neither it nor the file says so (a sequence it slices per step, for
        a loop whose count another input's length sets). None where nothing is held at such a size."""
        asked = {d.label: d.size for d in self.dims if d.label}
        moved = {k: v for k, v in case.sizes.items() if k in asked and v != asked[k] and self.roles.get(k) in (BATCH, LENGTH)}
        sizes, said = dict(case.sizes), []
        for label, size in moved.items():
            for other, at in asked.items():
                if (other not in moved and other not in given and other not in self.fixed and at == asked[label]
                        and case.sizes.get(other) == at and self.roles.get(other) not in (BATCH, LENGTH)):
                    sizes[other] = size
                    said.append(f"{other} moved with {label}")
        if not said:
            return None
        name = case.name + "".join(f", {k}={v}" for k, v in sizes.items() if v != case.sizes.get(k))
        return Case.at(specs, name, sizes), ("; ".join(said) + ": the torch model raised with them apart, and takes them tied; "
                                             "the file's labels do not say so")

    def refusal(self, case: Case, refused: bool) -> str:
        """One line for a failed case (``refused``: ONNX Runtime did not run it), naming the first
        dimension it ran at a size only the torch model vouched for: the file fixes it, or keeps it
        dynamic under a label nothing in the file names a batch or a length. "" where none."""
        moved = [d for d in self.dims if (d.source == UNTRACED or (d.source == FROM_MODEL and d.file_role not in (BATCH, LENGTH)))
                 and d.label and case.sizes.get(d.label, d.size) != d.size]
        if not moved:
            return ""
        d = moved[0]
        claim = f"fixes it at {d.size}" if d.file == "fixed" else f"declares it dynamic as {d.file}, but nothing in it names that a batch or a length"
        return (f"input {d.input} dim {d.dim} at {case.sizes[d.label]}: the torch model takes other sizes (it {d.model}), but the file "
                f"{'refuses it' if refused else 'computes something else there'} (the file {claim}); export it with that dimension "
                f"dynamic, or give --static {d.input}:{d.dim} to check the file at {d.size} only")


def ask_model(model: Any, call: Call, read: FileDims, feed: dict[str, np.ndarray], static: set[tuple[str, int]],
              given: dict[str, int], example: dict[str, np.ndarray] | None = None) -> ModelDims:
    """Each dimension of each input of the file ``read``, sized as the torch ``model`` takes it
    (see the module docstring); ``feed``: a case the model runs at, the audit's starting point,
    else ``example`` (the inputs at the example's shapes); ``static``: (input, dim) the user
    narrowed to the file's size; ``given``: ``--dim`` sizes."""
    static = _check_static(static, read.specs)
    found = ModelDims([replace(s, dims=list(s.dims)) for s in read.specs], dict(read.roles))
    raised = ""
    for start in [feed] + ([example] if example is not None else []):
        leaves, structure = _leaves(call, start)
        try:
            run_eager(model, [leaf.value for leaf in leaves], structure)
        except Exception as exc:  # noqa: BLE001  the user's model may raise anything; the cases then say so
            raised = raised or one_line(exc, NOTE_CHARS, typed=True)
            continue
        if start is not feed:
            found.notes.append(f"the torch model raised at the first case's shapes ({raised}): it was asked which sizes it takes from the example's")
        feed = start
        break
    else:
        found.notes.append(f"the torch model was not asked which sizes it takes: it raised at the first case's shapes "
                           f"({raised}); the file's own shapes are checked")
        return found
    sizes = {name: list(a.shape) for name, a in feed.items()}
    _Asking(found, read, DimensionAudit(model, leaves, structure), leaves, sizes, static, given).run()
    return found


def _check_static(static: set[tuple[str, int]], specs: list[InputSpec]) -> set[tuple[str, int]]:
    """``static`` with each axis counted from 0; refuses an input or axis the file does not have."""
    ranks = {s.name: len(s.dims) for s in specs}
    for name, d in sorted(static):
        if name not in ranks:
            raise RNNXError(f"--static {name}:{d}: expected an input of the file ({', '.join(ranks)}), found {name!r}; name an input and one of its axes")
        if not -ranks[name] <= d < ranks[name]:
            raise RNNXError(f"--static {name}:{d}: input {name} has {ranks[name]} dimensions (0..{ranks[name] - 1}); give one of them")
    return {(name, d % ranks[name]) for name, d in static}


def _leaves(call: Call, feed: dict[str, np.ndarray]) -> tuple[list[Leaf], Any]:
    """The torch model's flattened arguments on ``feed``, each tensor named by the graph input it
    was made from (the call wraps each input's array without copying it, so memory tells which)."""
    import torch
    from torch.utils._pytree import tree_flatten

    values, structure = tree_flatten(call.args(feed, None))
    by_address = {a.ctypes.data: name for name, a in feed.items() if a.size}
    named = [by_address.get(v.data_ptr(), "") if isinstance(v, torch.Tensor) and v.numel() else "" for v in values]
    return [Leaf(i, name or f"(argument {i})", v) for i, (name, v) in enumerate(zip(named, values))], structure


class _Asking:
    """One pass over the file's input dimensions, asking the audit and recording the answers."""

    def __init__(self, found: ModelDims, read: FileDims, audit: DimensionAudit, leaves: list[Leaf], sizes: dict[str, list[int]],
                 static: set[tuple[str, int]], given: dict[str, int]) -> None:
        self.found, self.read, self.audit, self.sizes, self.static, self.given = found, read, audit, sizes, static, given
        self.index = {leaf.name: leaf.index for leaf in leaves}
        self.names = {leaf.index: leaf.name for leaf in leaves}
        self.labels = {(s.name, d): v for s in read.specs for d, v in enumerate(s.dims) if isinstance(v, str)}
        self.dynamic = {(self.index[n], d) for n, d in self.labels if n in self.index}
        self.done: set[tuple[str, int]] = set()
        self.asked_labels: dict[str, DimSource] = {}

    def run(self) -> None:
        for spec in self.read.specs:
            for d, dim in enumerate(spec.dims):
                if (spec.name, d) in self.done:
                    continue
                size = self.sizes[spec.name][d]
                if (spec.name, d) in self.static:
                    self._narrowed(spec.name, d, size, dim)
                elif isinstance(dim, str):
                    self._dynamic(spec.name, d, size, dim)
                else:
                    self._fixed(spec.name, d, size)
        untraced = [d for d in self.found.dims if d.source == UNTRACED]
        if untraced:
            self.found.notes.append("the torch model runs at other sizes of " + ", ".join(f"{d.input} dim {d.dim}" for d in untraced)
                                    + ", but neither its recurrences nor the file say whether each is a batch or a length: "
                                    + "; ".join(_untraced_said(d, self.found.extra.get(d.label, [])) for d in untraced))

    def _add(self, entry: DimSource) -> None:
        self.found.dims.append(entry)
        self.done.add((entry.input, entry.dim))

    def _narrowed(self, name: str, d: int, size: int, dim: int | str) -> None:
        entry = DimSource(name, d, size, "fixed" if isinstance(dim, int) else dim, OTHER, NARROWED, model="was not asked (narrowed to the file's size)")
        if isinstance(dim, str):  # a label: held wherever it occurs
            self.found.fixed[dim] = size
            self.asked_labels[dim] = entry
        self._add(entry)

    def _dynamic(self, name: str, d: int, size: int, label: str) -> None:
        """A dimension the file keeps dynamic: its role from the file where the file tells one,
        else from the model."""
        said = self.asked_labels.get(label)
        if said is not None:  # the label's other occurrences follow its first
            self._add(replace(said, input=name, dim=d, size=size))
            return
        file_role, role_from = self.read.roles.get(label, OTHER), self.read.role_from.get(label, "")
        entry = DimSource(name, d, size, label, file_role, FROM_FILE, label, file_role=file_role)
        if label in self.given:
            entry.role, entry.source, entry.model = OTHER, GIVEN, f"was not asked (--dim {label}={self.given[label]})"
        elif label not in self.read.roles or name not in self.index:
            entry.model = "was not asked (a size derived from other labels)" if label not in self.read.roles else "was not asked (not one of its inputs)"
        elif role_from == FROM_RECORD and file_role == OTHER:
            entry.model = "was asked at export (rnnx export's record): it reaches no recurrence"
        else:
            probe = self.audit.accepts(self.index[name], d, self.dynamic)
            entry.model, entry.accepted = _said(probe), probe.accepted
            if probe.role in (BATCH, LENGTH):  # the model's recurrences told: that wins over a label's name or wiring
                entry.role, entry.source = probe.role, FROM_MODEL
                self.found.roles[label] = probe.role
                if file_role in (BATCH, LENGTH) and file_role != probe.role:
                    self.found.notes.append(f"{label} reads as a {file_role} by {role_from}, but the torch model runs it as a {probe.role} "
                                            f"({probe.told}): it is varied as a {probe.role}")
            elif file_role in (BATCH, LENGTH):  # the model cannot tell (a hand-written cell): the file's reading stands
                pass
            elif probe.accepted is None:
                entry.source = FROM_MODEL if not probe.skipped else FROM_FILE
            else:  # checked where the model ran, and at 1 (a batch of one is where a file most often goes wrong)
                entry.source = UNTRACED
                self.found.extra[label] = [s for s in dict.fromkeys((probe.accepted, 1)) if s != size]
        self.asked_labels[label] = entry
        self._add(entry)

    def _fixed(self, name: str, d: int, size: int) -> None:
        """A dimension the file fixes: varied where the model takes other sizes as a batch or a length."""
        if name not in self.index:
            self._add(DimSource(name, d, size, "fixed", OTHER, FROM_FILE, model="was not asked (not one of its inputs)"))
            return
        probe = self.audit.accepts(self.index[name], d, self.dynamic)
        entry = DimSource(name, d, size, "fixed", OTHER, FROM_MODEL, model=_said(probe), accepted=probe.accepted)
        if probe.skipped:
            entry.source = FROM_FILE
        elif probe.accepted is not None and probe.role not in (BATCH, LENGTH):
            entry.source = UNTRACED
        elif probe.accepted is not None:
            self._free(entry, probe.role, [(self.names[i], k) for i, k in probe.partners])
            return
        self._add(entry)

    def _free(self, entry: DimSource, role: str, partners: list[tuple[str, int]]) -> None:
        """Give a fixed dimension, and the fixed ones the model needed changed with it, one label
        the cases vary; a partner the file keeps dynamic lends its label (the sizes stay tied)."""
        label = next((self.labels[p] for p in partners if p in self.labels), None)
        if label is None:
            taken = set(self.found.roles) | {v for s in self.found.specs for v in s.dims if isinstance(v, str)}
            label = f"{entry.input}_dim{entry.dim}"
            while label in taken:
                label += "_"
        if self.found.roles.get(label, OTHER) == OTHER:  # the model's answer, where the file's reading had none
            self.found.roles[label] = role
        entry.role, entry.label = self.found.roles[label], label
        specs = {s.name: s for s in self.found.specs}
        for name, d in [(entry.input, entry.dim)] + partners:
            if (name, d) in self.done or (name, d) in self.labels or (name, d) in self.static or name not in specs:
                continue
            specs[name].dims[d] = label
            self._add(replace(entry, input=name, dim=d, size=self.sizes[name][d]))


def _said(probe: Any) -> str:
    """What the audit's probe says, for the report."""
    if probe.skipped:
        return probe.skipped
    if probe.accepted is None:
        return f"refuses other sizes ({probe.refused})" if probe.refused else "refuses other sizes"
    told = f": {probe.told}" if probe.told else ""
    return f"runs at {probe.accepted}" + (f", as a {probe.role}{told}" if probe.role in (BATCH, LENGTH) else ", reaching no recurrence it can see")


def _untraced_said(d: DimSource, extra: list[int]) -> str:
    if d.file == "fixed":
        return f"{d.input} dim {d.dim} is fixed at {d.size} in the file and checked there only (rnnx export keeps such a dimension static)"
    return f"{d.input} dim {d.dim} ({d.file}) is checked at {', '.join(map(str, [d.size, *extra]))}, each on its own"
