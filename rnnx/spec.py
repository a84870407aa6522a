"""What a recurrent network is, independent of any framework: :class:`RNNSpec`.

A spec is written as one comma-separated string, shared by the Python API and the CLI::

    lstm,input=8,hidden=16,layers=2,bidirectional,proj=4
    gru,input=3,hidden=5,reset_before,no_bias
    rnn_relu,input=4,hidden=4,reverse
    lstm,input=8,hidden=16,act=HardSigmoid:0.2:0.5/Tanh/Tanh,clip=3.5,input_forget

``str(spec)`` gives the shortest such string, and ``RNNSpec.parse(str(spec)) == spec``.

Activations are ONNX's: ``act=`` lists one function per slot of ONNX's per-direction list
(LSTM f/g/h, GRU f/g, RNN f), separated by ``/``, each ``Name[:alpha[:beta]]``. ``clip=X``
bounds every gate's pre-activation to [-X, X]; ``input_forget`` couples an LSTM's forget
gate to its input gate (f = 1 - i). A list equal to the cell's defaults is stored as ``()``,
so specs that compute the same thing compare equal. A plain RNN's activation decides its
cell kind: ``act=Relu`` is ``rnn_relu``, ``act=Tanh`` is ``rnn_tanh``; any other is kept on
``rnn_tanh`` (ONNX's RNN with f replaced).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from typing import Any

from rnnx import limits
from rnnx.errors import RNNXError

#: Canonical gate names per cell kind. ``g`` is the LSTM cell candidate (ONNX calls it
#: ``c``, Keras ``c``); ``n`` is the GRU candidate (ONNX ``h``); ``h`` is a plain RNN's
#: only gate. Formats map their own positional orders onto these names.
GATES: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),
    "gru": ("r", "z", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}

#: The cell kinds with each number of gates, derived from :data:`GATES`: what a layout
#: whose shapes give only the gate count can infer. One gate leaves tanh or relu open,
#: which the weights cannot settle.
CELLS_BY_GATE_COUNT: dict[int, tuple[str, ...]] = {
    n: tuple(cell for cell, gates in GATES.items() if len(gates) == n)
    for n in dict.fromkeys(len(gates) for gates in GATES.values())
}

#: The LSTM gates that carry a peephole, in canonical form.
PEEPHOLE_GATES: tuple[str, ...] = ("i", "f", "o")

DIRECTIONS: dict[str, tuple[str, ...]] = {
    "forward": ("forward",),
    "reverse": ("reverse",),
    "bidirectional": ("forward", "reverse"),
}

_FLAGS = {
    "forward": ("direction", "forward"),
    "reverse": ("direction", "reverse"),
    "bidirectional": ("direction", "bidirectional"),
    "no_bias": ("bias", False),
    "peepholes": ("peepholes", True),
    "reset_before": ("reset_after", False),
    "input_forget": ("input_forget", True),
}
_KEYS = {"input": "input_size", "hidden": "hidden_size", "layers": "num_layers", "proj": "proj_size"}

#: The activation functions ONNX's LSTM, GRU and RNN accept, by ONNX's spelling: for each,
#: the parameters it takes and their defaults. A default is given only where ONNX's operator
#: and ONNX Runtime's recurrent kernels agree on it (LeakyRelu 0.01, HardSigmoid 0.2/0.5,
#: Elu 1.0); ONNX says Affine's and ThresholdedRelu's come from their own operators (alpha 1)
#: while ONNX Runtime uses 0, and ScaledTanh has none, so those must be given.
ACTIVATION_PARAMETERS: dict[str, tuple[tuple[str, float | None], ...]] = {
    "Relu": (),
    "Tanh": (),
    "Sigmoid": (),
    "Affine": (("alpha", None), ("beta", None)),
    "LeakyRelu": (("alpha", 0.01),),
    "ThresholdedRelu": (("alpha", None),),
    "ScaledTanh": (("alpha", None), ("beta", None)),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Elu": (("alpha", 1.0),),
    "Softsign": (),
    "Softplus": (),
}
_ACTIVATION_BY_LOWER = {name.lower(): name for name in ACTIVATION_PARAMETERS}

#: Each cell's default per-direction activation list, by slot (ONNX's f, g, h).
DEFAULT_ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "lstm": ("Sigmoid", "Tanh", "Tanh"),
    "gru": ("Sigmoid", "Tanh"),
    "rnn_tanh": ("Tanh",),
    "rnn_relu": ("Relu",),
}

SPEC_SYNTAX = (
    "CELL,input=N,hidden=N[,layers=N][,proj=N][,bidirectional|reverse][,no_bias][,peepholes][,reset_before]"
    "[,act=NAME[:ALPHA[:BETA]]/...][,clip=X][,input_forget] "
    f"with CELL one of {', '.join(GATES)} and NAME one of {', '.join(ACTIVATION_PARAMETERS)} "
    "(act= lists LSTM f/g/h, GRU f/g or RNN f)"
)


def _float32(value: object, what: str) -> float:
    """``value`` as the shortest decimal that is the same float32: ONNX stores these as
    float32, so a value read back from a file equals the one written (0.2, not 0.2000000029)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RNNXError(f"{what}: expected a number, found {value!r}")
    number = float(value)
    if not math.isfinite(number) or abs(number) > 3.4e38:
        raise RNNXError(f"{what}: expected a finite float32 number, found {value!r}")
    single = struct.unpack("<f", struct.pack("<f", number))[0]
    for digits in range(1, 10):
        short = float(f"{single:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", short))[0] == single:
            return short
    return single


@dataclass(frozen=True)
class Activation:
    """One of ONNX's recurrent activation functions, with its ``alpha`` and ``beta``.

    The name is spelled as ONNX spells it (any case is accepted). Parameters the function
    does not take must be None; those it takes are filled from their defaults where
    :data:`ACTIVATION_PARAMETERS` has one, so ``Activation("HardSigmoid") ==
    Activation("HardSigmoid", 0.2, 0.5)`` (Keras 2's ``hard_sigmoid``; Keras 3's is
    ``Activation("HardSigmoid", 1/6, 0.5)``). Values are kept at float32 precision.
    """

    name: str
    alpha: float | None = None
    beta: float | None = None

    def __post_init__(self) -> None:
        name = _ACTIVATION_BY_LOWER.get(str(self.name).lower()) if isinstance(self.name, str) else None
        if name is None:
            raise RNNXError(f"activation: expected one of {', '.join(ACTIVATION_PARAMETERS)}, found {self.name!r}")
        object.__setattr__(self, "name", name)
        taken = dict(ACTIVATION_PARAMETERS[name])
        for param in ("alpha", "beta"):
            value = getattr(self, param)
            if param not in taken:
                if value is not None:
                    raise RNNXError(f"activation {name}: takes no {param}, found {param}={value!r}; leave it out")
                continue
            if value is None:
                value = taken[param]
                if value is None:
                    raise RNNXError(f"activation {name}: expected {param} (it has no default both ONNX and ONNX Runtime agree on), "
                                    f"found none; give it as {self._syntax(name)}")
            object.__setattr__(self, param, _float32(value, f"activation {name} {param}"))

    @staticmethod
    def _syntax(name: str) -> str:
        return ":".join([name, *(p.upper() for p, _ in ACTIVATION_PARAMETERS[name])])

    @property
    def parameters(self) -> tuple[float, ...]:
        """The values this function takes, in ONNX's order (alpha, then beta)."""
        return tuple(getattr(self, p) for p, _ in ACTIVATION_PARAMETERS[self.name])

    @classmethod
    def parse(cls, text: str) -> Activation:
        """``Name[:alpha[:beta]]``, as in a spec's ``act=``."""
        name, *values = [t.strip() for t in str(text).split(":")]
        if len(values) > 2:
            raise RNNXError(f"activation {text!r}: expected NAME[:ALPHA[:BETA]], found {len(values)} values")
        numbers: list[float | None] = []
        for raw in values:
            try:
                numbers.append(float(raw))
            except ValueError:
                raise RNNXError(f"activation {text!r}: expected a number, found {raw!r}") from None
        numbers += [None] * (2 - len(numbers))
        return cls(name, numbers[0], numbers[1])

    def __str__(self) -> str:
        return ":".join([self.name, *(repr(v) for v in self.parameters)])


def default_activations(cell: str) -> tuple[Activation, ...]:
    """The activation list a cell kind uses when a spec gives none."""
    return tuple(Activation(name) for name in DEFAULT_ACTIVATIONS[cell])


MAX_LAYERS = 4096  # no real network comes near; a damaged header easily does


@dataclass(frozen=True)
class RNNSpec:
    """The architecture of a recurrent stack.

    ``reset_after`` is the GRU reset mode: True applies the reset gate after the recurrent
    product (PyTorch, cuDNN, ONNX ``linear_before_reset=1``, Keras ``reset_after=True``);
    False applies it before (ONNX's default, Keras ``reset_after=False``).
    ``direction="reverse"`` is one direction run from the last step to the first
    (ONNX ``direction=reverse``, Keras ``go_backwards``).
    """

    cell: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    direction: str = "forward"
    bias: bool = True
    proj_size: int = 0
    peepholes: bool = False
    reset_after: bool = True
    activations: tuple[Activation, ...] = field(default=())
    clip: float = 0.0
    input_forget: bool = False

    def __post_init__(self) -> None:
        if self.cell not in GATES:
            raise RNNXError(f"cell kind: expected one of {', '.join(GATES)}, found {self.cell!r}")
        self._normalise_activations()
        if self.direction not in DIRECTIONS:
            raise RNNXError(f"direction: expected one of {', '.join(DIRECTIONS)}, found {self.direction!r}")
        for name in ("input_size", "hidden_size", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RNNXError(f"{name}: expected a positive integer, found {value!r}")
        if not isinstance(self.proj_size, int) or self.proj_size < 0:
            raise RNNXError(f"proj_size: expected a non-negative integer, found {self.proj_size!r}")
        if self.proj_size and self.cell != "lstm":
            raise RNNXError(f"proj_size: only LSTMs have a projection, found proj={self.proj_size} on {self.cell}")
        if self.proj_size >= self.hidden_size:
            raise RNNXError(
                f"proj_size: expected less than hidden={self.hidden_size} (as PyTorch requires), found {self.proj_size}"
            )
        if self.peepholes and self.cell != "lstm":
            raise RNNXError(f"peepholes: only LSTMs have peepholes, found peepholes on {self.cell}")
        if not self.reset_after and self.cell != "gru":
            raise RNNXError(f"reset_before: only GRUs have a reset mode, found it on {self.cell}")
        # A spec comes from untrusted text and file metadata; every table and buffer rnnx
        # builds is sized from it, so an absurd one is refused before anything is allocated.
        if self.num_layers > MAX_LAYERS:
            raise RNNXError(f"num_layers: expected at most {MAX_LAYERS}, found {self.num_layers}; the spec or the file is damaged")
        out = self.proj_size or self.hidden_size
        per_cell = len(GATES[self.cell]) * self.hidden_size * (max(self.input_size, 2 * out) + out + 3) + 4 * self.hidden_size * out
        most = limits.max_parameters()
        if self.num_layers * (2 if self.direction == "bidirectional" else 1) * per_cell > most:
            raise RNNXError(f"spec {self}: more than {most:,} parameters ({most * 4 >> 30} GiB of float32); the spec or the file is damaged, "
                            "or, for a real network that large, raise the limit with --max-memory")

    def _normalise_activations(self) -> None:
        acts = self.activations
        if isinstance(acts, (str, Activation)) or not isinstance(acts, (tuple, list)):
            raise RNNXError(f"activations: expected a tuple of Activation, found {acts!r}")
        acts = tuple(a if isinstance(a, Activation) else Activation.parse(a) if isinstance(a, str) else a for a in acts)
        for a in acts:
            if not isinstance(a, Activation):
                raise RNNXError(f"activations: expected Activation values, found {a!r}")
        if acts:
            want = len(DEFAULT_ACTIVATIONS[self.cell])
            if len(acts) != want:
                slots = {3: "f, g, h", 2: "f, g", 1: "f"}[want]
                raise RNNXError(f"activations: a {self.cell} takes {want} ({slots}, one direction's list as in ONNX), "
                                f"found {len(acts)}: {'/'.join(map(str, acts))}")
            if self.cell in ("rnn_tanh", "rnn_relu") and acts[0].name in ("Tanh", "Relu"):
                # rnn_tanh and rnn_relu name a plain RNN's activation already; one spelling each
                object.__setattr__(self, "cell", f"rnn_{acts[0].name.lower()}")
            elif self.cell == "rnn_relu":
                object.__setattr__(self, "cell", "rnn_tanh")
            if acts == default_activations(self.cell):
                acts = ()
        object.__setattr__(self, "activations", acts)
        if isinstance(self.clip, bool) or not isinstance(self.clip, (int, float)) or not self.clip >= 0:
            raise RNNXError(f"clip: expected a non-negative number (0 for no clip), found {self.clip!r}")
        object.__setattr__(self, "clip", _float32(self.clip, "clip") if self.clip else 0.0)
        if not isinstance(self.input_forget, bool):
            raise RNNXError(f"input_forget: expected True or False, found {self.input_forget!r}")
        if self.input_forget and self.cell != "lstm":
            raise RNNXError(f"input_forget: only LSTMs couple the input and forget gates, found input_forget on {self.cell}")

    # --- derived sizes -------------------------------------------------------------
    @property
    def uses_default_activations(self) -> bool:
        """True when the cell computes with its default functions: no activations, clip or input_forget."""
        return not self.activations and not self.clip and not self.input_forget

    @property
    def activation_text(self) -> str:
        """What sets this cell's functions apart, as the string form writes it (``act=...,clip=...,input_forget``);
        empty for the defaults. Refusals quote it to name what a format cannot hold."""
        parts = []
        if self.activations:
            parts.append("act=" + "/".join(map(str, self.activations)))
        if self.clip:
            parts.append(f"clip={self.clip!r}")
        if self.input_forget:
            parts.append("input_forget")
        return ",".join(parts)

    @property
    def activation_functions(self) -> tuple[Activation, ...]:
        """The per-direction activation list in effect, defaults included (ONNX's f, g, h order)."""
        return self.activations or default_activations(self.cell)

    @property
    def gates(self) -> tuple[str, ...]:
        return GATES[self.cell]

    @property
    def directions(self) -> tuple[str, ...]:
        return DIRECTIONS[self.direction]

    @property
    def num_directions(self) -> int:
        return len(self.directions)

    @property
    def output_size(self) -> int:
        """Size of h as seen outside a cell: the projection size if there is one."""
        return self.proj_size or self.hidden_size

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_directions * self.output_size

    def with_(self, **changes: Any) -> RNNSpec:
        return replace(self, **changes)

    # --- the string form -----------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> RNNSpec:
        """Parse the comma-separated form; see :data:`SPEC_SYNTAX`."""
        parts = [p.strip() for p in str(text).split(",") if p.strip()]
        if not parts:
            raise RNNXError(f"spec: expected {SPEC_SYNTAX}, found an empty string")
        fields: dict[str, object] = {"cell": parts[0].lower()}
        for part in parts[1:]:
            if "=" in part:
                key, _, raw = part.partition("=")
                key = key.strip().lower()
                if key == "act":
                    fields["activations"] = tuple(Activation.parse(a) for a in raw.split("/"))
                    continue
                if key == "clip":
                    try:
                        fields["clip"] = float(raw)
                    except ValueError:
                        raise RNNXError(f"spec {text!r}: clip expects a number, found {raw!r}") from None
                    continue
                if key not in _KEYS:
                    raise RNNXError(f"spec {text!r}: unknown key {key!r}; expected {SPEC_SYNTAX}")
                try:
                    fields[_KEYS[key]] = int(raw)
                except ValueError:
                    raise RNNXError(f"spec {text!r}: {key} expects an integer, found {raw!r}") from None
            elif part.lower() in _FLAGS:
                attr, value = _FLAGS[part.lower()]
                fields[attr] = value
            else:
                raise RNNXError(f"spec {text!r}: unknown token {part!r}; expected {SPEC_SYNTAX}")
        for required in ("input_size", "hidden_size"):
            if required not in fields:
                key = {v: k for k, v in _KEYS.items()}[required]
                raise RNNXError(f"spec {text!r}: missing {key}=N; expected {SPEC_SYNTAX}")
        return cls(**fields)  # type: ignore[arg-type]

    def __str__(self) -> str:
        parts = [self.cell, f"input={self.input_size}", f"hidden={self.hidden_size}"]
        if self.num_layers != 1:
            parts.append(f"layers={self.num_layers}")
        if self.direction != "forward":
            parts.append(self.direction)
        if self.proj_size:
            parts.append(f"proj={self.proj_size}")
        if not self.bias:
            parts.append("no_bias")
        if self.peepholes:
            parts.append("peepholes")
        if not self.reset_after:
            parts.append("reset_before")
        if not self.uses_default_activations:
            parts.append(self.activation_text)
        return ",".join(parts)
