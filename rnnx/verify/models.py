"""Whole models: an ONNX file against the PyTorch code it came from, end to end and layer by layer.

``rnnx verify model.onnx --against file.py:NAME [--checkpoint ck.pt]`` (or a TorchScript
file) runs the torch model and the ONNX file in ONNX Runtime on the same seeded inputs:

- shapes come from the ONNX file's dynamic axes: each labelled dimension is a batch, a
  length or something else, as ``rnnx export``'s record says, else as its name says
  (``batch``, ``N``; ``seq``, ``time``, ``frames``, ...). Batches and lengths are varied
  (batch 1 always included); any other dynamic size keeps the example's (the module's
  ``example_inputs``) or ``--dim LABEL=SIZE``;
- floats are standard normal; integer inputs that hold sequence lengths get sorted
  lengths whose longest fills the sequence; token ids stay below the vocabulary of the
  embedding table the input indexes (else within the example's range);
- every ONNX output is held against the torch model's output at the same position, in
  float64 (a float64 copy of the torch model is the reference) and in float32;
- every recurrent layer is checked on its own inputs (:mod:`rnnx.verify.layers`) with the
  weights of the torch module it came from, found through ``rnnx export``'s record or,
  for files from other exporters, by matching each layer's spec in module order.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.tolerance import BY_DTYPE, ErrorStats, Tolerances, compare_arrays
from rnnx.verify.layers import Layer, LayerCheck, check_layers, find_layers, mark_outputs, single_layer
from rnnx.weights import RNNWeights

BATCH, LENGTH, OTHER = "batch", "length", "other"
_BATCH_NAMES = re.compile(r"^(n|b|bs|bsz|nb)$|batch", re.IGNORECASE)
_LENGTH_NAMES = re.compile(r"^(t|l|s)$|seq|len|time|step|frame|width|token|src|tgt|sample|word|char", re.IGNORECASE)
DEFAULT_BATCHES = (1, 8)
DEFAULT_LENGTH = 16  # a length dimension's base size when no example gives one
_TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript", ".jit")


def is_model_code(against: str | Path) -> bool:
    """Whether ``--against`` names model code (``file.py:NAME``, ``package.module:NAME``) or a
    TorchScript file, rather than a weights file."""
    text = str(against)
    path = Path(text)
    if path.is_file():
        if path.suffix.lower() not in _TORCHSCRIPT_SUFFIXES:
            return False
        try:
            with zipfile.ZipFile(path) as z:  # TorchScript archives hold their code; a state_dict has none
                return any("/code/" in n or n.endswith("constants.pkl") for n in z.namelist()[:10000])
        except (zipfile.BadZipFile, OSError):
            return False
    source, sep, name = text.rpartition(":")
    return bool(sep and source and name.isidentifier() and (source.endswith(".py") or all(p.isidentifier() for p in source.split("."))))


@dataclass
class InputSpec:
    name: str
    dtype: np.dtype
    dims: list[int | str]  # a size, or a label (an expression of labels for derived sizes)
    lengths_of: str | None = None  # holds per-sequence lengths bounded by this label
    vocabulary: int | None = None  # token ids: indexes a table of this many rows


@dataclass
class Case:
    name: str
    sizes: dict[str, int]
    shapes: dict[str, list[int]] = field(default_factory=dict)
    skipped: str = ""  # the torch model itself raised at these shapes
    error: str = ""  # ONNX Runtime failed where torch ran: a failure


@dataclass
class OutputRow:
    case: str
    output: str
    against: str  # "torch float64" or "torch float32"
    stats: ErrorStats

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "output": self.output, "against": self.against, **self.stats.to_json()}


@dataclass
class WholeModelReport:
    model: str
    against: str
    inputs: dict[str, list[int | str]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)
    rows: list[OutputRow] = field(default_factory=list)
    layers: list[LayerCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ran(self) -> list[Case]:
        return [c for c in self.cases if not c.skipped]

    @property
    def first_drift(self) -> LayerCheck | None:
        return next((la for la in self.layers if la.status == "drifts"), None)

    def _judged(self) -> list[OutputRow]:
        """The rows the verdict rests on: against the float64 torch model when it ran."""
        return [r for r in self.rows if r.against == "torch float64"] or self.rows

    @property
    def passed(self) -> bool:
        judged = self._judged()
        return (bool(self.ran) and not any(c.error for c in self.cases) and bool(judged) and all(r.stats.passed for r in judged)
                and self.first_drift is None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_drift
        return {"model": self.model, "against": self.against, "passed": self.passed, "inputs": self.inputs, "roles": self.roles,
                "cases": [asdict(c) for c in self.cases], "rows": [r.to_json() for r in self.rows],
                "layers": [la.to_json() for la in self.layers], "first_drift": first.name if first else None, "notes": self.notes}

    def dump(self, path: Path) -> None:
        from rnnx.fileio import atomic_output

        with atomic_output(Path(path)) as tmp:
            tmp.write_text(json.dumps(self.to_json(), indent=2))

    def __str__(self) -> str:
        lines = [f"verify {self.model} against the torch model {self.against}"]
        lines.append("  inputs: " + "; ".join(f"{k} ({', '.join(map(str, v))})" for k, v in self.inputs.items())
                     + ("  dynamic: " + ", ".join(f"{k} ({v})" for k, v in self.roles.items()) if self.roles else ""))
        lines += [f"  note: {n}" for n in self.notes]
        judged = self._judged()
        width = max([len(c.name) for c in self.cases] + [4]) + 1
        lines.append(f"{'case':<{width}} {'output':<14} {'vs':<14} {'max abs':>10} {'mean abs':>10} {'p99 abs':>10} {'max rel':>10}  result")
        for c in self.cases:
            if c.skipped or c.error:
                lines.append(f"{c.name:<{width}} {'skipped: ' + c.skipped if c.skipped else 'FAIL: ' + c.error}")
        for r in judged:
            s = r.stats
            verdict = "ok" if s.passed else f"FAIL ({s.note or f'atol {s.atol:g}, rtol {s.rtol:g}, {s.stat}'})"
            lines.append(f"{r.case:<{width}} {r.output[:14]:<14} {r.against:<14} {s.max_abs:>10.2e} {s.mean_abs:>10.2e} {s.quantile_abs:>10.2e} {s.max_rel:>10.2e}  {verdict}")
        if len(judged) < len(self.rows):
            worst = max((r.stats.max_abs for r in self.rows if r not in judged), default=0.0)
            lines.append(f"  (against torch in float32 as well: max abs {worst:.2e}; every row is in the JSON report)")
        if self.layers:
            lines.append("layer by layer (each recurrent layer on the inputs it received, against the float64 reference):")
            for la in self.layers:
                where = f"{la.op} {la.form}, {la.truth}" if la.truth else f"{la.op} {la.form}"
                if la.status == "not checked":
                    lines.append(f"  {la.name:<28} {where}: not checked ({la.reason})")
                else:
                    lines.append(f"  {la.name:<28} {where}: max abs {la.max_abs:.2e} {'ok' if la.status == 'ok' else 'DRIFTS'}")
        first = self.first_drift
        if first is not None:
            steps = ", ".join(f"{e:.1e}" for e in first.per_step[:12]) + (" ..." if len(first.per_step) > 12 else "")
            lines.append(f"first layer out of tolerance: {first.name} ({first.op}, {first.truth}) at {first.worst_case}; error per step: {steps}")
            lines += [f"  diagnosis: {d}" for d in first.diagnosis]
        elif self.rows and not self.passed and self.layers and all(la.status != "not checked" for la in self.layers):
            lines.append("every recurrent layer matches on its own inputs: the difference comes from the graph's other operators")
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)


# --- the torch side ---------------------------------------------------------------------


def load_torch_model(against: str, checkpoint: Path | None) -> tuple[Any, Any]:
    from rnnx.exporters.loading import load_checkpoint, load_model

    model, example = load_model(str(against))
    if checkpoint is not None:
        load_checkpoint(model, Path(checkpoint))
    return model.eval(), example


def _recurrent_modules(model: Any) -> list[tuple[str, Any, RNNWeights]]:
    """(name, module, its canonical weights) of every nn.LSTM/GRU/RNN and cell, in module order."""
    import rnnx
    from rnnx.exporters.modules import CELL_MODULES, RECURRENT_MODULES, spec_of_cell, spec_of_module

    found = []
    for name, module in model.named_modules():
        kind = getattr(module, "original_name", type(module).__name__)
        if isinstance(module, RECURRENT_MODULES + CELL_MODULES):
            spec = spec_of_cell(module) if isinstance(module, CELL_MODULES) else spec_of_module(module)
        elif kind in ("LSTM", "GRU", "RNN"):  # a TorchScript module: the spec is in its weights' names
            spec = None
        else:
            continue
        state = {k: v.detach().cpu().float() for k, v in module.state_dict().items()}
        try:
            found.append((name, module, rnnx.from_format(state, "torch", spec=spec)))
        except RNNXError:
            continue
    return found


def layer_truths(model: Any, layers: list[Layer], recurrences: list[dict[str, Any]]) -> tuple[dict[str, tuple[RNNWeights, str]], list[str]]:
    """For each layer, the weights of the torch module (and layer) it came from; and notes."""
    modules = {name: weights for name, _, weights in _recurrent_modules(model)}
    truths: dict[str, tuple[RNNWeights, str]] = {}
    for rec in recurrences:  # rnnx export's record: module -> its nodes, in layer order
        weights = modules.get(str(rec.get("module")))
        nodes = rec.get("nodes") if isinstance(rec.get("nodes"), list) else []
        if weights is None:
            continue
        for k, node in enumerate(nodes):
            layer = 0 if rec.get("cell") else k
            if layer < weights.spec.num_layers:
                truths[str(node)] = (single_layer(weights, layer), f"torch module '{rec['module']}'" + (f" layer {layer}" if weights.spec.num_layers > 1 else ""))
    notes = []
    unmatched = [la for la in layers if la.name not in truths]
    if unmatched:  # a file from another exporter: match layers to modules by spec, in order
        pool = [(name, k, single_layer(w, k)) for name, w in modules.items() for k in range(w.spec.num_layers)]
        used: set[int] = set()
        for la in unmatched:
            if la.spec is None:
                continue
            for i, (name, k, w) in enumerate(pool):
                if i not in used and w.spec.with_(bias=True) == la.spec.with_(bias=True):
                    used.add(i)
                    truths[la.name] = (w, f"torch module '{name}'" + (f" layer {k}" if modules[name].spec.num_layers > 1 else "") + " (matched by spec)")
                    break
        still = [la.name for la in unmatched if la.name not in truths]
        if still:
            notes.append(f"no torch module matches layer(s) {', '.join(still)}: checked against their own weights (arithmetic only)")
    return truths, notes


# --- the inputs ---------------------------------------------------------------------------


def _role_of(label: str) -> str:
    if _BATCH_NAMES.search(label):
        return BATCH
    if _LENGTH_NAMES.search(label):
        return LENGTH
    return OTHER


def input_specs(proto: Any, export: dict[str, Any] | None) -> tuple[list[InputSpec], dict[str, str]]:
    """Each graph input with its dims, and each label's role."""
    from onnx import helper

    inits = {i.name: i for i in proto.graph.initializer}
    roles = dict((export or {}).get("roles") or {}) if isinstance((export or {}).get("roles"), dict) else {}
    lengths = (export or {}).get("lengths_inputs") if isinstance((export or {}).get("lengths_inputs"), dict) else {}
    specs = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        except (KeyError, TypeError):
            raise RNNXError(f"graph input {vi.name!r}: element type {t.elem_type} is not a tensor type rnnx can feed") from None
        dims: list[int | str] = []
        for d, dim in enumerate(t.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or f"{vi.name}_dim{d}")
        specs.append(InputSpec(vi.name, dtype, dims, lengths_of=lengths.get(vi.name)))
    for spec in specs:
        for dim in spec.dims:
            if isinstance(dim, str) and dim.isidentifier():
                roles.setdefault(dim, _role_of(dim))
    lengths_labels = [k for k, v in roles.items() if v == LENGTH]
    for spec in specs:
        if spec.dtype.kind in "iu" and len(spec.dims) == 1 and spec.lengths_of is None and re.search(r"len", spec.name, re.IGNORECASE) and lengths_labels:
            spec.lengths_of = lengths_labels[0]  # a foreign file's "lengths" input
        if spec.dtype.kind in "iu" and spec.lengths_of is None:
            spec.vocabulary = _vocabulary(proto, spec.name)
    return specs, roles


def _vocabulary(proto: Any, name: str) -> int | None:
    """Rows of the embedding table the input indexes (through Casts), if it indexes one."""
    inits = {i.name: i for i in proto.graph.initializer}
    frontier, seen = [name], set()
    while frontier:
        value = frontier.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in proto.graph.node:
            if value not in node.input:
                continue
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == value and node.input[0] in inits:
                dims = list(inits[node.input[0]].dims)
                return int(dims[0]) if dims else None
            if node.op_type in ("Cast", "Identity", "Unsqueeze", "Reshape", "Transpose", "Squeeze"):
                frontier.extend(node.output)
    return None


def _size(dim: int | str, sizes: dict[str, int]) -> int | None:
    if isinstance(dim, int):
        return dim
    if dim in sizes:
        return sizes[dim]
    try:  # a derived dimension such as 2*seq or (seq//4)
        import sympy

        value = sympy.sympify(dim, locals={k: sympy.Symbol(k) for k in sizes}).subs(sizes)
        return int(value) if value.is_number else None
    except Exception:  # noqa: BLE001  sympy raises many types for text it cannot read
        return None


def plan_cases(specs: list[InputSpec], roles: dict[str, str], example: dict[str, list[int]], seq_lens: list[int] | None,
               batches: list[int] | None, dims: dict[str, int]) -> list[Case]:
    """Lengths x batches; other dynamic sizes fixed from ``dims`` or the example."""
    base: dict[str, int] = {}
    for spec in specs:
        for d, dim in enumerate(spec.dims):
            if isinstance(dim, str) and spec.name in example and d < len(example[spec.name]):
                base.setdefault(dim, int(example[spec.name][d]))
    fixed: dict[str, int] = {}
    for label, role in roles.items():
        if label in dims:
            fixed[label] = dims[label]
        elif role == OTHER:
            if label not in base:
                who = next(s.name for s in specs if label in s.dims)
                raise RNNXError(f"dimension {label!r} of input {who!r} is dynamic and neither a batch nor a length by its name; "
                                f"give its size with --dim {label}=SIZE (or define example_inputs in the model file)")
            fixed[label] = base[label]
    length_labels = [k for k, v in roles.items() if v == LENGTH and k not in fixed]
    batch_labels = [k for k, v in roles.items() if v == BATCH and k not in fixed]
    if seq_lens:
        length_options = [{label: t for label in length_labels} for t in seq_lens]
    else:
        length_options = [{label: base.get(label, DEFAULT_LENGTH) for label in length_labels},
                          {label: 2 * base.get(label, DEFAULT_LENGTH) + 3 for label in length_labels}]
    batch_options = list(batches or DEFAULT_BATCHES)
    cases = []
    seen = set()
    for lens, b in product(length_options, batch_options if batch_labels else [None]):
        sizes = {**fixed, **lens, **({label: b for label in batch_labels} if b is not None else {})}
        key = tuple(sorted(sizes.items()))
        if key in seen:
            continue
        seen.add(key)
        name = ", ".join([f"{k}={v}" for k, v in lens.items()] + ([f"batch={b}"] if b is not None else [])) or "fixed shapes"
        case = Case(name, sizes)
        for spec in specs:
            shape = [_size(dim, sizes) for dim in spec.dims]
            if any(s is None for s in shape):
                bad = next(dim for dim, s in zip(spec.dims, shape) if s is None)
                raise RNNXError(f"dimension {bad!r} of input {spec.name!r}: rnnx cannot work out its size; give it with --dim LABEL=SIZE")
            case.shapes[spec.name] = [int(s) for s in shape]  # type: ignore[arg-type]
        cases.append(case)
    return cases


def make_feed(specs: list[InputSpec], case: Case, example: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in specs:
        shape = case.shapes[spec.name]
        if spec.dtype.kind == "f":
            feed[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        elif spec.dtype.kind == "b":
            feed[spec.name] = rng.random(shape) < 0.5
        elif spec.lengths_of is not None:
            longest = case.sizes.get(spec.lengths_of, 1)
            lens = np.sort(rng.integers(1, longest + 1, size=shape))[::-1].copy()
            if lens.size:
                lens.flat[0] = longest
            feed[spec.name] = lens.astype(spec.dtype)
        else:
            known = example.get(spec.name)
            high = spec.vocabulary or (int(known.max()) + 1 if known is not None and known.size else 2)
            low = 0 if spec.vocabulary else (min(int(known.min()), 0) if known is not None and known.size else 0)
            feed[spec.name] = rng.integers(low, max(high, low + 1), size=shape).astype(spec.dtype)
    return feed


# --- running ------------------------------------------------------------------------------


def _torch_outputs(model: Any, feed: dict[str, np.ndarray], names: list[str], structure: Any, extras: list[Any], dtype: Any = None) -> list[np.ndarray]:
    """The torch model on ``feed`` (graph input order), its tensor outputs flattened."""
    import torch
    from torch.utils._pytree import tree_flatten

    from rnnx.exporters.selfcheck import run_eager

    tensors = iter(torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names)
    values = []
    for extra in extras:  # the example's flattened leaves: tensors are replaced, other values kept
        value = next(tensors) if extra is None else extra
        if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.to(dtype)
        values.append(value)
    out = run_eager(model, values, structure)
    return [t.detach().cpu().numpy() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _example_leaves(model: Any, example: Any, names: list[str]) -> tuple[Any, list[Any], dict[str, Any]]:
    """The call structure, the non-tensor leaves (None where a graph input goes), and the
    example's tensors by graph input name."""
    import torch
    from torch.utils._pytree import tree_flatten

    if example is None:
        _, structure = tree_flatten(tuple(range(len(names))))
        return structure, [None] * len(names), {}
    args = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    leaves, structure = tree_flatten(args)
    tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
    if len(tensors) != len(names):
        raise RNNXError(f"the model's example inputs hold {len(tensors)} tensors, but the ONNX file takes {len(names)} inputs ({', '.join(names)}); "
                        "is this the model the file was exported from?")
    extras = [None if isinstance(v, torch.Tensor) else v for v in leaves]
    return structure, extras, {n: t.detach().cpu().numpy() for n, t in zip(names, tensors)}


def verify_model(model_path: Path, against: str, checkpoint: Path | None = None, seq_lens: list[int] | None = None,
                 batches: list[int] | None = None, dims: dict[str, int] | None = None, seed: int = 0,
                 tolerances: Tolerances | None = None, progress: bool = False) -> WholeModelReport:
    """The ONNX file at ``model_path`` against the torch model ``against`` (see the module docstring)."""
    import torch

    from rnnx import limits
    from rnnx.engines.isolated import IsolatedOnnxRuntime
    from rnnx.graphs.find import load_model
    from rnnx.graphs.self_description import read_metadata

    model_path = Path(model_path)
    proto = load_model(model_path)
    torch_model, example = load_torch_model(against, checkpoint)
    export, recurrences = read_metadata(proto)
    specs, roles = input_specs(proto, export)
    names = [s.name for s in specs]
    structure, extras, example_arrays = _example_leaves(torch_model, example, names)
    cases = plan_cases(specs, roles, {k: list(v.shape) for k, v in example_arrays.items()}, seq_lens, batches, dims or {})
    report = WholeModelReport(str(model_path), str(against), {s.name: s.dims for s in specs}, roles)
    limits.check_claim("the largest case's inputs", max((sum(int(np.prod(c.shapes[s.name])) * 8 for s in specs) for c in cases), default=0)
                       * limits.WORKING_COPIES, model_path.stat().st_size)
    layers = find_layers(proto)
    marked, _ = mark_outputs(proto, layers)
    runner = IsolatedOnnxRuntime(marked.SerializeToString(), str(model_path))
    graph_outputs = [o.name for o in proto.graph.output]
    inits = {i.name for i in proto.graph.initializer}
    known = _initializer_values(proto, {t for la in layers for t in [*la.inputs.values(), *la.outputs.values()] if t in inits})
    truths, report.notes = layer_truths(torch_model, layers, recurrences)
    try:
        model64 = copy.deepcopy(torch_model).double()
    except Exception as exc:  # noqa: BLE001  a model that cannot be copied or cast: compare in float32 only
        model64 = None
        report.notes.append(f"no float64 copy of the torch model ({type(exc).__name__}); outputs compared with torch in float32 only")
    tolerances = tolerances or Tolerances()
    runs = []
    for k, case in enumerate(_progress(cases, progress)):
        feed = make_feed(specs, case, example_arrays, seed + k)
        try:
            want32 = _torch_outputs(torch_model, feed, names, structure, extras)
        except Exception as exc:  # noqa: BLE001  the user's model may raise anything at a shape it does not take
            case.skipped = f"the torch model itself raised {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
            continue
        want64 = None
        if model64 is not None:
            try:
                want64 = _torch_outputs(model64, feed, names, structure, extras, dtype=torch.float64)
            except Exception as exc:  # noqa: BLE001  e.g. a forward that creates float32 tensors of its own
                model64 = None
                report.notes.append(f"the float64 copy of the torch model raised {type(exc).__name__} ({' '.join(str(exc).split())[:120]}); "
                                    "outputs compared with torch in float32 only")
        try:
            got = runner(feed)
        except RNNXError as exc:
            case.error = f"ONNX Runtime failed where torch ran: {exc}"
            continue
        if len(want32) != len(graph_outputs):
            raise RNNXError(f"the ONNX file has {len(graph_outputs)} outputs ({', '.join(graph_outputs)}), the torch model returned "
                            f"{len(want32)} tensors; is this the model the file was exported from?")
        for i, out in enumerate(graph_outputs):
            tol = tolerances.get(out, "float32")
            if want64 is not None:
                report.rows.append(OutputRow(case.name, out, "torch float64", compare_arrays(got[out], want64[i], tol)))
            report.rows.append(OutputRow(case.name, out, "torch float32", compare_arrays(got[out], want32[i], tol)))
        runs.append((case.name, {**known, **feed, **got}))
    report.cases = cases
    if not report.ran:
        raise RNNXError(f"the torch model raised at every shape tried ({cases[0].skipped if cases else 'no cases'}); give shapes it takes with --seq-lens, --batch or --dim")
    report.layers = check_layers(layers, truths, runs, tolerances.get("", "float32"))
    return report


def _initializer_values(proto: Any, names: set[str]) -> dict[str, np.ndarray]:
    from rnnx.graphs.find import to_array

    return {i.name: to_array(i) for i in proto.graph.initializer if i.name in names}


def _progress(items: list[Any], shown: bool) -> Any:
    if not shown:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="verify model", unit="case", file=sys.stderr, leave=False)
