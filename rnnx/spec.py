"""What a recurrent network is, independent of any framework: :class:`RNNSpec`.

A spec is written as one comma-separated string, shared by the Python API and the CLI::

    lstm,input=8,hidden=16,layers=2,bidirectional,proj=4
    gru,input=3,hidden=5,reset_before,no_bias
    rnn_relu,input=4,hidden=4,reverse

``str(spec)`` gives the shortest such string, and ``RNNSpec.parse(str(spec)) == spec``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
}
_KEYS = {"input": "input_size", "hidden": "hidden_size", "layers": "num_layers", "proj": "proj_size"}
SPEC_SYNTAX = (
    "CELL,input=N,hidden=N[,layers=N][,proj=N][,bidirectional|reverse][,no_bias][,peepholes][,reset_before] "
    f"with CELL one of {', '.join(GATES)}"
)


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

    def __post_init__(self) -> None:
        if self.cell not in GATES:
            raise RNNXError(f"cell kind: expected one of {', '.join(GATES)}, found {self.cell!r}")
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

    # --- derived sizes -------------------------------------------------------------
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

    def with_(self, **changes: object) -> RNNSpec:
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
        return ",".join(parts)
