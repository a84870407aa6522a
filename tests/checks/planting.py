"""Planted layout mistakes, and each of rnnx's checks run on them: the helpers shared by
``benchmarks/planted.py`` (the campaign) and ``tests/checks/test_planted_mistakes.py``.

Nothing in ``rnnx`` imports this module. A mistake is planted into what each check examines,
through rnnx's own code paths:

- ``rnnx.export`` and ``rnnx convert``: the writers are patched (:func:`planted_writers`) so
  that the canonical weights of one layer are mutated just before they become ONNX tensors
  (``rnnx.layouts.onnx.layer_pieces``, which both the exporter and the stack writer call; the
  lowered form of a projected LSTM in ``convert``; the GRU node's reset mode);
- ``rnnx verify --against model.py:NAME``, stack-alone ``rnnx verify SOURCE MODEL.onnx`` and
  the rewrite check of ``rnnx fuse`` / ``rnnx lower``: a correct file is written first, then
  its native node's initializers (or attribute) are mutated with onnx and numpy alone
  (:func:`plant_file`: ONNX's gate order is spelled out here, not taken from rnnx). Where the
  layer has no native node (a projected LSTM, lowered to Scans), the writer is planted instead
  with its check off.

Each mistake sits in one layer and one direction (a direction swap and a reset-mode flip
concern a whole layer by nature). A check *catches* a mistake when it fails; its *margin* is
the largest ratio it reports (max abs error over the rounding floor) divided by
:data:`rnnx.tolerance.CALIBRATED_MULTIPLE`.
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from torch import nn

import rnnx
from rnnx.errors import ExportCheckFailed
from rnnx.tolerance import CALIBRATED_MULTIPLE
from rnnx.weights import RNNWeights, tensor_name

MULTIPLE = CALIBRATED_MULTIPLE
INPUT = 8  # every family's input features
HIDDEN = 16

# --- the model families ------------------------------------------------------------------


class Stack(nn.Module):
    """A recurrent module alone, every output returned: Y, h_n and (LSTM) c_n."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> Any:
        y, state = self.rnn(x)
        if isinstance(state, tuple):
            return y, state[0], state[1]
        return y, state


class CTC(nn.Module):
    """Conv1d front end, 2-layer bidirectional LSTM, Linear, log-softmax; time-major output
    (T, B, classes), as CTC losses take it. Input (B, features, T)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(INPUT, HIDDEN, 3, padding=1)
        self.rnn = nn.LSTM(HIDDEN, HIDDEN, num_layers=2, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = torch.relu(self.conv(x)).permute(2, 0, 1)
        y, _ = self.rnn(feats)
        return torch.log_softmax(self.head(y), dim=-1)


VOCAB = 40


class Tagger(nn.Module):
    """Embedding, bidirectional GRU (batch first), Linear: a tag score per token. Input (B, T) ids."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 12)
        self.rnn = nn.GRU(12, HIDDEN, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * HIDDEN, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.embed(tokens))
        return self.head(y)


class MeanClassifier(nn.Module):
    """2-layer LSTM, mean over time, Linear: one score vector per sequence. Input (T, B, F)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(INPUT, HIDDEN, num_layers=2)
        self.head = nn.Linear(HIDDEN, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y.mean(dim=0))


class SoftmaxHead(nn.Module):
    """Bidirectional LSTM (batch first), Linear, softmax per step. Input (B, T, F)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(INPUT, HIDDEN, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * HIDDEN, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return torch.softmax(self.head(y), dim=-1)


class Forecaster(nn.Module):
    """2-layer GRU encoder (batch first), its last step, Linear to one value. Input (B, T, F)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(INPUT, HIDDEN, num_layers=2, batch_first=True)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def _time_major(T: int, B: int, rng: np.random.Generator) -> tuple[torch.Tensor]:
    return (torch.from_numpy(rng.standard_normal((T, B, INPUT)).astype(np.float32)),)


def _batch_major(T: int, B: int, rng: np.random.Generator) -> tuple[torch.Tensor]:
    return (torch.from_numpy(rng.standard_normal((B, T, INPUT)).astype(np.float32)),)


def _channels_first(T: int, B: int, rng: np.random.Generator) -> tuple[torch.Tensor]:
    return (torch.from_numpy(rng.standard_normal((B, INPUT, T)).astype(np.float32)),)


def _tokens(T: int, B: int, rng: np.random.Generator) -> tuple[torch.Tensor]:
    ids = rng.integers(0, VOCAB, size=(B, T))
    ids.flat[0], ids.flat[-1] = VOCAB - 1, 0  # the whole vocabulary's range, so the self-check's ids span it too
    return (torch.from_numpy(ids.astype(np.int64)),)


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "stack" (a recurrent module alone) or "model" (a whole model whose head shrinks errors)
    cell: str  # lstm, gru, rnn_tanh, rnn_relu
    layers: int
    bidirectional: bool
    build: Callable[[], nn.Module]
    example: Callable[[int, int, np.random.Generator], tuple[Any, ...]]
    description: str
    proj: int = 0
    bias: bool = True

    @property
    def output_size(self) -> int:
        return self.proj or HIDDEN

    @property
    def directions(self) -> tuple[str, ...]:
        return ("forward", "reverse") if self.bidirectional else ("forward",)

    def make(self, seed: int = 0, scale: float = 1.0) -> nn.Module:
        """The model, seeded, in eval mode; its recurrent weights multiplied by ``scale``
        (PyTorch's init is uniform in +-1/sqrt(hidden): 1.5 makes that +-1.5/sqrt(hidden))."""
        torch.manual_seed(seed)
        model = self.build()
        if scale != 1.0:
            with torch.no_grad():
                for p in model.rnn.parameters():
                    p.mul_(scale)
        return model.eval()

    def inputs(self, T: int, B: int, seed: int = 0) -> tuple[Any, ...]:
        return self.example(T, B, np.random.default_rng(seed + 1000))

    @property
    def spec_text(self) -> str | None:
        """What ``rnnx convert`` / ``rnnx verify`` must be told about a torch checkpoint: a plain
        RNN's state_dict does not say tanh or relu (rnnx refuses to guess)."""
        if not self.cell.startswith("rnn_"):
            return None
        return f"{self.cell},input={INPUT},hidden={HIDDEN},layers={self.layers}" + (",bidirectional" if self.bidirectional else "")


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("lstm1", "stack", "lstm", 1, False, lambda: Stack(nn.LSTM(INPUT, HIDDEN)), _time_major, "nn.LSTM, 1 layer"),
    Family("lstm2bi", "stack", "lstm", 2, True, lambda: Stack(nn.LSTM(INPUT, HIDDEN, num_layers=2, bidirectional=True)), _time_major,
           "nn.LSTM, 2 layers, bidirectional"),
    Family("lstm_proj", "stack", "lstm", 2, False, lambda: Stack(nn.LSTM(INPUT, HIDDEN, num_layers=2, proj_size=8)), _time_major,
           "nn.LSTM, 2 layers, proj_size 8 (lowered to Scans)", proj=8),
    Family("gru2bi", "stack", "gru", 2, True, lambda: Stack(nn.GRU(INPUT, HIDDEN, num_layers=2, bidirectional=True)), _time_major,
           "nn.GRU, 2 layers, bidirectional"),
    Family("rnn_tanh", "stack", "rnn_tanh", 2, False, lambda: Stack(nn.RNN(INPUT, HIDDEN, num_layers=2)), _time_major, "nn.RNN tanh, 2 layers"),
    Family("rnn_relu", "stack", "rnn_relu", 1, True, lambda: Stack(nn.RNN(INPUT, HIDDEN, nonlinearity="relu", bidirectional=True)), _time_major,
           "nn.RNN relu, 1 layer, bidirectional"),
    Family("ctc", "model", "lstm", 2, True, CTC, _channels_first, "Conv1d + 2-layer biLSTM + Linear + log_softmax, time-major (CTC)"),
    Family("tagger", "model", "gru", 1, True, Tagger, _tokens, "Embedding + biGRU + Linear (tagger)"),
    Family("mean_classifier", "model", "lstm", 2, False, MeanClassifier, _time_major, "2-layer LSTM + mean over time + Linear"),
    Family("softmax_head", "model", "lstm", 1, True, SoftmaxHead, _batch_major, "biLSTM + Linear + softmax"),
    Family("forecaster", "model", "gru", 2, False, Forecaster, _batch_major, "2-layer GRU + last step + Linear"),
]}
STACKS = [name for name, f in FAMILIES.items() if f.kind == "stack"]

# --- the mistakes --------------------------------------------------------------------------

KINDS = {  # kind -> (letter, what it is)
    "swap": ("a", "two gates swapped (W and R rows together)"),
    "transpose_r": ("b", "R of one gate transposed"),
    "drop_bias": ("c", "one bias dropped (bR of one gate zeroed)"),
    "swap_directions": ("d", "directions swapped (forward <-> reverse)"),
    "reset_flip": ("e", "GRU reset mode flipped (linear_before_reset 0 <-> 1)"),
    "scale": ("f", "1% scale on one gate's W rows"),
}
# Which gates each mistake touches, per cell (canonical names: LSTM i f g o, GRU r z n, RNN h).
# The swap is the mildest one measured (rnnx/tolerance.py): LSTM g and o, GRU z and n.
SWAP_GATES = {"lstm": ("g", "o"), "gru": ("z", "n")}
TRANSPOSE_GATE = {"lstm": "f", "gru": "r", "rnn_tanh": "h", "rnn_relu": "h"}
BIAS_GATE = {"lstm": "i", "gru": "n", "rnn_tanh": "h", "rnn_relu": "h"}
SCALE_GATE = {"lstm": "o", "gru": "z", "rnn_tanh": "h", "rnn_relu": "h"}
SCALE = 1.01


@dataclass(frozen=True)
class Mistake:
    kind: str
    layer: int
    direction: str  # "forward" or "reverse"; "both" for a direction swap or a reset flip
    gates: tuple[str, ...] = ()
    factor: float = SCALE  # the scale mistake's factor

    @property
    def label(self) -> str:
        where = f"l{self.layer}" + ("" if self.direction == "both" else f".{self.direction}")
        gate = self.gates[0] if self.gates else ""
        what = {"swap": f"swap {'<->'.join(self.gates)}", "transpose_r": f"R.{gate} transposed", "drop_bias": f"bR.{gate} = 0",
                "swap_directions": "directions swapped", "reset_flip": "linear_before_reset flipped", "scale": f"W.{gate} x {self.factor:g}"}[self.kind]
        return f"{what} @ {where}"


def plan_mistakes(family: Family) -> tuple[list[Mistake], list[tuple[str, str]]]:
    """Every mistake planted in ``family`` (the last layer's last direction; layer 0 too for the
    gate swap and the direction swap), and those skipped with the reason."""
    last, direction = family.layers - 1, family.directions[-1]
    layers = [last] + ([0] if family.layers > 1 else [])
    planted: list[Mistake] = []
    skipped: list[tuple[str, str]] = []
    if family.cell in SWAP_GATES:
        planted += [Mistake("swap", layer, direction, SWAP_GATES[family.cell]) for layer in layers]
    else:
        skipped.append(("swap", "a plain RNN has one gate: nothing to swap"))
    if family.output_size == HIDDEN:
        planted.append(Mistake("transpose_r", last, direction, (TRANSPOSE_GATE[family.cell],)))
    else:
        skipped.append(("transpose_r", f"R is hidden x proj = {HIDDEN} x {family.proj}: not square, a transpose does not fit"))
    if family.bias:
        planted.append(Mistake("drop_bias", last, direction, (BIAS_GATE[family.cell],)))
    else:
        skipped.append(("drop_bias", "the model has no bias"))
    if family.bidirectional:
        planted += [Mistake("swap_directions", layer, "both") for layer in layers]
    else:
        skipped.append(("swap_directions", "one direction"))
    if family.cell == "gru":
        planted.append(Mistake("reset_flip", last, "both"))
    else:
        skipped.append(("reset_flip", "not a GRU"))
    planted.append(Mistake("scale", last, direction, (SCALE_GATE[family.cell],), SCALE))
    return planted, skipped


def plant_weights(weights: RNNWeights, mistake: Mistake) -> RNNWeights:
    """A copy of canonical ``weights`` with ``mistake`` planted (its layer numbered within them)."""
    t = dict(weights.tensors)
    L, d = mistake.layer, mistake.direction

    def name(kind: str, gate: str | None = None, direction: str = d) -> str:
        return tensor_name(L, direction, kind, gate)

    if mistake.kind == "swap":
        a, b = mistake.gates
        for kind in ("W", "R"):
            t[name(kind, a)], t[name(kind, b)] = t[name(kind, b)], t[name(kind, a)]
    elif mistake.kind == "transpose_r":
        r = t[name("R", mistake.gates[0])]
        if r.shape[0] != r.shape[1]:
            raise ValueError(f"{mistake.label}: R is {r.shape}, not square")
        t[name("R", mistake.gates[0])] = np.ascontiguousarray(r.T)
    elif mistake.kind == "drop_bias":
        t[name("bR", mistake.gates[0])] = np.zeros_like(t[name("bR", mistake.gates[0])])
    elif mistake.kind == "swap_directions":
        prefix = f"l{L}.forward."
        for key in [k for k in t if k.startswith(prefix)]:
            other = f"l{L}.reverse." + key[len(prefix):]
            t[key], t[other] = t[other], t[key]
    elif mistake.kind == "scale":
        w = t[name("W", mistake.gates[0])]
        t[name("W", mistake.gates[0])] = (w.astype(np.float64) * mistake.factor).astype(w.dtype)
    else:
        raise ValueError(f"{mistake.kind}: not a weight mistake")
    return RNNWeights(weights.spec, t)


@contextlib.contextmanager
def planted_writers(mistake: Mistake) -> Iterator[None]:
    """While open, every ONNX file rnnx's writers make carries ``mistake`` in its layer:

    - ``rnnx.layouts.onnx.layer_pieces`` (through which ``rnnx.export``'s stand-in modules get
      their ONNX tensors, via ``layer_arrays``, and ``rnnx convert``'s stack writer its
      initializers; the exporter passes the layer's index within its torch module) and the
      stack writer's own binding of it;
    - the stack writer's Scans for a projected LSTM (``lower_layer``, which reads the canonical
      weights directly);
    - the reset flip: the GRU op the exporter records for that layer
      (``NativeRecurrence._rnnx_layer``; the ONNX attribute comes from the op's argument, not
      from ``layer_arrays``), and the GRU node the stack writer makes (``onnx.helper.make_node``
      with the layer's node name).
    """
    import onnx.helper

    from rnnx.exporters import modules
    from rnnx.formats import onnx_build
    from rnnx.layouts import onnx as onnx_layout

    patches: list[Any] = []
    if mistake.kind == "reset_flip":
        layer_call = modules.NativeRecurrence._rnnx_layer
        make_node = onnx.helper.make_node

        def flipped_layer(self: Any, k: int, x: Any, lens: Any, h0: Any, c0: Any) -> Any:
            spec = self._rnnx_spec
            if spec.cell != "gru" or k != mistake.layer:
                return layer_call(self, k, x, lens, h0, c0)
            arrays = self._rnnx_layers[k]
            y, h = torch.ops.rnnx.gru(x, arrays["W"], arrays["R"], arrays.get("B"), lens, h0, spec.hidden_size, spec.direction,
                                      1 - int(spec.reset_after))
            return y, h, None

        def flipped_node(op_type: str, *args: Any, **kwargs: Any) -> Any:
            if op_type == "GRU" and kwargs.get("name") == f"GRU_l{mistake.layer}":
                kwargs["linear_before_reset"] = 1 - int(kwargs.get("linear_before_reset", 0))
            return make_node(op_type, *args, **kwargs)

        patches += [mock.patch.object(modules.NativeRecurrence, "_rnnx_layer", flipped_layer),
                    mock.patch.object(onnx.helper, "make_node", flipped_node)]
    else:
        pieces, lower = onnx_layout.layer_pieces, onnx_build.lower_layer

        def planted_pieces(weights: RNNWeights, layer: int) -> Any:
            return pieces(plant_weights(weights, mistake) if layer == mistake.layer else weights, layer)

        def planted_lower(weights: RNNWeights, layer: int, *args: Any, **kwargs: Any) -> Any:
            return lower(plant_weights(weights, mistake) if layer == mistake.layer else weights, layer, *args, **kwargs)

        patches += [mock.patch.object(onnx_layout, "layer_pieces", planted_pieces),
                    mock.patch.object(onnx_build, "layer_pieces", planted_pieces),
                    mock.patch.object(onnx_build, "lower_layer", planted_lower)]
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield


# ONNX's gate order, spelled out here rather than read from rnnx (ONNX names LSTM's g "c" and
# GRU's n "h"); W (D, G*H, in), R (D, G*H, out), B (D, 2*G*H): input biases, then recurrent.
ONNX_GATES = {"lstm": ("i", "o", "f", "g"), "gru": ("z", "r", "n"), "rnn_tanh": ("h",), "rnn_relu": ("h",)}
NATIVE = ("LSTM", "GRU", "RNN")


class NotNative(Exception):
    """The layer has no native node in the file (a projected LSTM, lowered to Scans)."""


def native_node(proto: Any, layer: int, module: str = "rnn") -> Any:
    """The native node of ``layer`` of torch module ``module`` (rnnx export's record), or the
    ``layer``-th native node of a file with no record (rnnx convert's)."""
    from rnnx.formats.onnx_metadata import read_metadata

    _, recurrences = read_metadata(proto)
    names = next((rec.get("nodes") for rec in recurrences if rec.get("module") == module), None)
    if names is not None:
        node = next((n for n in proto.graph.node if layer < len(names) and n.name == names[layer]), None)
    else:
        natives = [n for n in proto.graph.node if n.op_type in NATIVE]
        node = natives[layer] if layer < len(natives) else None
    if node is None or node.op_type not in NATIVE:
        raise NotNative(f"layer {layer} of {module!r} has no native LSTM/GRU/RNN node")
    return node


def plant_file(proto: Any, mistake: Mistake, cell: str, module: str = "rnn") -> Any:
    """A copy of ``proto`` with ``mistake`` planted in the initializers (or, for a reset flip,
    the attribute) of the native node of ``mistake.layer``."""
    from onnx import helper, numpy_helper

    model = copy.deepcopy(proto)
    node = native_node(model, mistake.layer, module)
    if mistake.kind == "reset_flip":
        attr = next((a for a in node.attribute if a.name == "linear_before_reset"), None)
        if attr is None:
            node.attribute.append(helper.make_attribute("linear_before_reset", 1))
        else:
            attr.i = 1 - attr.i
        return model
    inits = {i.name: k for k, i in enumerate(model.graph.initializer)}
    wanted = {"W": 1, "R": 2, "B": 3}
    arrays = {}
    for key, pos in wanted.items():
        name = node.input[pos] if len(node.input) > pos else ""
        if not name:
            continue
        if name not in inits:
            raise NotNative(f"{node.name}'s {key} ({name}) is not an initializer")
        arrays[key] = numpy_helper.to_array(model.graph.initializer[inits[name]]).copy()
    H = next(a.i for a in node.attribute if a.name == "hidden_size")
    gates = ONNX_GATES[cell]
    G = len(gates)

    def rows(gate: str, offset: int = 0) -> slice:
        k = gates.index(gate)
        return slice(offset + k * H, offset + (k + 1) * H)

    W, R = arrays["W"], arrays["R"]
    d = 1 if mistake.direction == "reverse" and W.shape[0] == 2 else 0
    if mistake.kind == "swap":
        a, b = mistake.gates
        for m in (W, R):
            m[d, rows(a)], m[d, rows(b)] = m[d, rows(b)].copy(), m[d, rows(a)].copy()
    elif mistake.kind == "transpose_r":
        R[d, rows(mistake.gates[0])] = R[d, rows(mistake.gates[0])].T.copy()
    elif mistake.kind == "drop_bias":
        arrays["B"][d, rows(mistake.gates[0], G * H)] = 0.0
    elif mistake.kind == "swap_directions":
        for m in arrays.values():
            m[[0, 1]] = m[[1, 0]]
    elif mistake.kind == "scale":
        W[d, rows(mistake.gates[0])] = (W[d, rows(mistake.gates[0])].astype(np.float64) * mistake.factor).astype(W.dtype)
    for key, array in arrays.items():
        name = node.input[wanted[key]]
        model.graph.initializer[inits[name]].CopyFrom(numpy_helper.from_array(array, name))
    return model


# --- running a check ---------------------------------------------------------------------


@dataclass
class Outcome:
    """One check on one file or model: whether it failed, and the largest ratio it reported."""

    check: str
    family: str
    mistake: str  # the mistake's label, or "honest"
    kind: str  # the mistake's kind, or "honest"
    failed: bool
    ratio: float | None  # the largest max abs error / rounding floor over all it compared
    output_ratio: float | None = None  # ... over the outputs
    layer_ratio: float | None = None  # ... over the layers checked one by one (export, verify --against)
    how: str = ""  # how the mistake was planted: "writer" (patched) or "file" (initializers mutated)
    detail: str = ""  # the check's first failure, or what ran
    seconds: float = 0.0
    cases: int = 0  # the comparisons (output x shape, or layer) it made
    seed: int = 0
    scale: float = 1.0
    error: str = ""  # the check raised instead of reporting (counted as a failure of the check, and shown)

    @property
    def caught_by(self) -> str:
        """Which part of the check exceeded the multiple: "outputs", "layers", "error" or "" (none)."""
        if self.error:
            return "error"
        if self.output_ratio is not None and self.output_ratio > MULTIPLE:
            return "outputs"
        if self.layer_ratio is not None and self.layer_ratio > MULTIPLE:
            return "layers"
        return "other" if self.failed else ""

    @property
    def margin(self) -> float | None:
        return None if self.ratio is None else self.ratio / MULTIPLE

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"margin": self.margin, "caught_by": self.caught_by}


def _max(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return max(found) if found else None


def _ratios(output: float | None, layer: float | None) -> float | None:
    return _max([output, layer])


def run_export(family: Family, folder: Path, mistake: Mistake | None = None, seed: int = 0, scale: float = 1.0, T: int = 12, B: int = 3,
               keep: bool = False) -> tuple[Outcome, nn.Module, Path | None]:
    """``rnnx.export`` of the family's model (with ``mistake`` planted in its writer): the
    outcome, the model, and the file written (None when the check failed, or not ``keep``)."""
    model = family.make(seed, scale)
    example = family.inputs(T, B, seed)
    path = Path(folder) / f"{family.name}-s{seed}-x{scale:g}-T{T}-B{B}-{'honest' if mistake is None else mistake.kind}.onnx"
    started = time.perf_counter()
    with planted_writers(mistake) if mistake is not None else contextlib.nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            report = rnnx.export(model, example, path)
            failed = False
        except ExportCheckFailed as exc:
            report, failed = exc.report, True
    check = report.check
    outs = [o.ratio for c in check.cases for o in c.rows]
    layers = [la.get("ratio") for la in check.layers]
    # Where a route's file fails its self-check, rnnx.export tries the next route (dynamo, dynamo
    # with unneeded dimensions static, TorchScript): each carries the planted stand-in weights;
    # the report is the last route's.
    earlier = sum("failed its self-check" in n for n in report.notes)
    detail = (check.failure() if failed else f"{len(check.cases)} cases, {len(check.layers)} layers checked") + \
        f" [route: {report.route}" + (f"; {earlier} earlier route(s) failed their self-check too]" if earlier else "]")
    outcome = Outcome("export", family.name, mistake.label if mistake else "honest", mistake.kind if mistake else "honest", failed,
                      _ratios(_max(outs), _max(layers)), _max(outs), _max(layers), "writer" if mistake else "", detail,
                      time.perf_counter() - started, len(outs) + len(layers), seed, scale)
    written = path if path.exists() else None
    if written is not None and (mistake is not None or not keep):
        written.unlink()
        written = None
    return outcome, model, written


def run_verify_against(family: Family, model: nn.Module, path: Path, label: str = "honest", kind: str = "honest", how: str = "",
                       seq_lens: list[int] | None = None, batches: list[int] | None = None, seed: int = 0, scale: float = 1.0) -> Outcome:
    """``rnnx verify FILE --against model.py:NAME``, the model already loaded."""
    from rnnx.verify.models import verify_loaded

    started = time.perf_counter()
    report = verify_loaded(Path(path), model, None, "campaign", seq_lens=seq_lens, batches=batches, seed=seed)
    outs = [r.stats.ratio for r in report.rows if r.against == "torch float64"]
    layers = [la.ratio for la in report.layers]
    detail = ""
    if not report.passed:
        bad = next((r for r in report.rows if r.against == "torch float64" and not r.stats.passed), None)
        drift = report.first_drift
        detail = (f"{bad.output} at {bad.case}: {bad.stats}" if bad is not None else "") + \
                 (f"; layer {drift.name} drifts ({drift.max_abs:.2e}, ratio {drift.ratio})" if drift is not None else "")
    else:
        detail = f"{len(report.ran)} cases: {', '.join(c.name for c in report.ran)}"
    return Outcome("verify --against", family.name, label, kind, not report.passed, _ratios(_max(outs), _max(layers)), _max(outs), _max(layers),
                   how, detail, time.perf_counter() - started, len(outs) + len(layers), seed, scale)


def write_source(family: Family, model: nn.Module, folder: Path, tag: str) -> Path:
    """The recurrent module's state_dict as a torch checkpoint: ``rnnx convert``'s source."""
    source = Path(folder) / f"{family.name}-{tag}.pt"
    torch.save({k: v.detach().clone() for k, v in model.rnn.state_dict().items()}, source)
    return source


def run_convert(family: Family, source: Path, output: Path, mistake: Mistake | None = None, seq_lens: bool = False, batch_first: bool = False,
                check: bool = True, seed: int = 0, scale: float = 1.0) -> Outcome:
    """``rnnx convert SOURCE.pt -o OUTPUT.onnx`` (with ``mistake`` planted in the writer)."""
    from rnnx.check.stack import describe
    from rnnx.pipelines.convert import convert

    started = time.perf_counter()
    with planted_writers(mistake) if mistake is not None else contextlib.nullcontext():
        result = convert(source, output, spec=family.spec_text, seq_lens=seq_lens, batch_first=batch_first, check=check)
    rows = result.report.rows if result.report is not None else []
    failed = not result.written or (check and not result.report)
    bad = next((r for r in rows if not r.passed), None)
    detail = describe(bad) if bad is not None else f"{len(rows)} rows at {result.check_shapes()}"
    ratio = _max([r.ratio for r in rows])
    return Outcome("convert", family.name, mistake.label if mistake else "honest", mistake.kind if mistake else "honest", failed, ratio, ratio,
                   None, "writer" if mistake else "", detail, time.perf_counter() - started, len(rows), seed, scale)


def run_verify_stack(family: Family, source: Path, path: Path, label: str = "honest", kind: str = "honest", how: str = "",
                     seq_lens: list[int] | None = None, batches: list[int] | None = None, seed: int = 0, scale: float = 1.0) -> Outcome:
    """Stack-alone ``rnnx verify SOURCE MODEL.onnx`` (its default backends: ONNX Runtime, torch, the reference)."""
    from rnnx.verify.run import verify

    started = time.perf_counter()
    report = verify(source, path, seq_lens=seq_lens, batches=batches, seed=seed, spec=family.spec_text)
    ratio = _max([r.ratio for r in report.rows])
    bad = next((r for r in report.rows if not r.passed), None)
    detail = (f"{bad.backend} {bad.output} T={bad.seq_len} B={bad.batch}: max abs {bad.max_abs:.3e}, ratio {bad.ratio}" if bad is not None
              else f"{len(report.rows)} rows")
    return Outcome("verify (stack)", family.name, label, kind, not report.passed, ratio, ratio, None, how, detail,
                   time.perf_counter() - started, len(report.rows), seed, scale)


def run_rewrite(family: Family, original: Any, rewritten: Any, label: str = "honest", kind: str = "honest", how: str = "", seed: int = 0,
                scale: float = 1.0) -> Outcome:
    """The check ``rnnx fuse`` and ``rnnx lower`` run: ``rewritten`` against ``original`` in ONNX Runtime."""
    from rnnx.pipelines.rewrite_check import compare_models

    started = time.perf_counter()
    check = compare_models(original, rewritten, seed, "campaign")
    ratio = _max([r.ratio for r in check.rows])
    detail = check.failure() if not check else f"{len([c for c in check.cases if not c.skipped])} cases"
    return Outcome("fuse/lower", family.name, label, kind, not check, ratio, ratio, None, how, detail, time.perf_counter() - started,
                   len(check.rows), seed, scale)


def lowered(proto: Any) -> Any | None:
    """``rnnx lower``'s rewrite of ``proto`` (every native node as Scans), or None where there is none to lower."""
    from rnnx.graphs.lower import lower_recurrences

    model = copy.deepcopy(proto)
    result = lower_recurrences(model)
    return model if result.rewritten else None


def planted_export_file(family: Family, model: nn.Module, good: Path, mistake: Mistake, out: Path, T: int = 12, B: int = 3,
                        seed: int = 0) -> tuple[Any, str]:
    """The exported file with ``mistake`` in it, as a proto, and how: "file" (the correct file's
    native node mutated) or "writer" (a layer with no native node: rnnx.export planted, its check off)."""
    import onnx

    proto = onnx.load(str(good))
    try:
        return plant_file(proto, mistake, family.cell), "file"
    except NotNative:
        pass
    with planted_writers(mistake), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rnnx.export(model, family.inputs(T, B, seed), out, check=False)
    bad = onnx.load(str(out))
    out.unlink()
    return bad, "writer"


def planted_convert_file(family: Family, source: Path, good: Path, mistake: Mistake, out: Path) -> tuple[Any, str]:
    """The converted file with ``mistake`` in it (see :func:`planted_export_file`)."""
    import onnx

    proto = onnx.load(str(good))
    try:
        return plant_file(proto, mistake, family.cell), "file"
    except NotNative:
        pass
    from rnnx.pipelines.convert import convert

    with planted_writers(mistake):
        convert(source, out, spec=family.spec_text, check=False)
    bad = onnx.load(str(out))
    out.unlink()
    return bad, "writer"


def save(proto: Any, path: Path) -> Path:
    """Write a planted file with onnx itself (not through rnnx's writers)."""
    import onnx

    onnx.save(proto, str(path))
    return path


def guarded(check: str, family: Family, label: str, kind: str, run: Callable[[], Outcome], seed: int = 0, scale: float = 1.0) -> Outcome:
    """``run()``, or where the check raised instead of reporting, an outcome saying so (a failure)."""
    started = time.perf_counter()
    try:
        return run()
    except Exception as exc:  # noqa: BLE001  any refusal is recorded: for a planted mistake it is a catch, for an honest case a failure
        return Outcome(check, family.name, label, kind, True, None, detail=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                       seconds=time.perf_counter() - started, seed=seed, scale=scale, error=type(exc).__name__)
