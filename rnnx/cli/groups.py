"""The options shared by several verbs, each declared once (Polygraphy's argument groups).

A group adds its options to a verb's parser (``add_parser_args``) and turns what was given
into what the library takes (``parse``). A flag means the same in every verb that has it: one
dest, one type, one default (``tests/test_cli_grammar.py`` walks the parser to hold that).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx import limits
from rnnx.cli import types
from rnnx.engines.tensorrt import PRECISIONS
from rnnx.layouts.onnx import DEFAULT_OPSET
from rnnx.tolerance import BY_DTYPE, Tolerance, Tolerances

Container = argparse.ArgumentParser | argparse._ArgumentGroup


@dataclass(frozen=True)
class Option:
    """One option, declared once; a verb may reword its help, nothing else."""

    flags: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def add(self, to: Container, help: str | None = None, choices: Sequence[str] | None = None) -> argparse.Action:
        """``choices``: a verb that takes fewer of the declared choices offers only those (its
        --help then lists what it takes); it cannot add one."""
        settings = dict(self.settings, help=help) if help else dict(self.settings)
        if choices is not None:
            if not set(choices) <= set(self.settings.get("choices") or ()):
                raise ValueError(f"{self.flags[0]}: {list(choices)} is not a subset of its declared choices")
            settings["choices"] = tuple(choices)
        return to.add_argument(*self.flags, **settings)


class Renamed(argparse.Action):
    """An option's old name, kept working for one release: it fills the new option's dest and
    says, on stderr, what the option is called now."""

    def __init__(self, option_strings: Sequence[str], dest: str, now: str, **settings: Any) -> None:
        self.now = now
        super().__init__(option_strings, dest, **settings)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        print(f"{parser.prog}: note: {option_string} is now {self.now}; the old name stops working in a later release", file=sys.stderr)


# verify runs in several dtypes (fp32 unless given); convert reads or writes a raw cuDNN blob in one (float32 unless given).
DTYPE = Option(("--dtype",), {"type": types.dtype_list, "metavar": "DTYPE[,...]"})
OUTPUT = Option(("-o", "--output"), {"type": Path, "required": True, "help": "file to write (written atomically)"})
SELECT = Option(("--select",), {"metavar": "GROUP", "help": "the recurrent group to read when the file holds several"})
SPEC = Option(("--spec",), {"metavar": "SPEC", "help": "spec for weights that do not describe themselves (cudnn, jax) or cannot tell tanh from relu"})
FROM = Option(("--from",), {"dest": "from_format", "metavar": "FORMAT", "help": "format of the weights file (default: from extension and content)"})
OPSET = Option(("--opset",), {"type": types.opset, "default": DEFAULT_OPSET, "metavar": "N",
                              "help": f"ONNX opset to write, 13 (TensorRT 8.0/8.2, JetPack 4.6) to the newest onnx knows "
                                      f"(default {DEFAULT_OPSET}, what TensorRT 8.5 and later parse)"})
# What a file or an engine computes in: one flag, one set of choices, in every verb that writes
# one (an ONNX file takes fp32 or fp16, and says so in one line for the others).
PRECISION = Option(("--precision",), {"default": "fp32", "choices": PRECISIONS})
BATCH_FIRST = Option(("--batch-first",), {"action": "store_true", "help": "the ONNX model takes X and gives Y as (batch, seq, features)"})
SEQ_LENS_INPUT = Option(("--seq-lens-input",), {"action": "store_true", "help": "the ONNX model takes per-sequence lengths as input seq_lens"})
NO_STATES = Option(("--no-states",), {"action": "store_true", "help": "the ONNX model starts from zero states instead of taking h0/c0"})
SEED = Option(("--seed",), {"type": types.seed, "default": 0, "help": "seed of the check's inputs (default 0)"})
NO_CHECK = Option(("--no-check",), {"action": "store_true", "help": "skip the check of what is written"})
CHECKPOINT = Option(("--checkpoint",), {"type": Path, "help": "state_dict to load into the model code first (.pt/.pth/.ckpt weights-only, "
                                                                 ".safetensors), or a training checkpoint holding one (under state_dict, "
                                                                 "model_state_dict, model, net; DataParallel's and Lightning's key prefixes removed)"})
SEQ_LENS = Option(("--seq-lens",), {"type": types.sizes_to_check, "metavar": "N,N,...",
                                    "help": "sequence lengths to check at (default: a recurrent stack 1,17,64, or 1,17 over 20M parameters; "
                                            "a whole model the example's length and 2x it + 3, or 16 and 35 without an example)"})
BATCH = Option(("--batch",), {"type": types.sizes_to_check, "metavar": "N,N,...", "help": "batch sizes to check at (default 1,8)"})
DIM = Option(("--dim",), {"type": types.dim, "action": "append", "metavar": "LABEL=SIZE",
                          "help": "size of a dynamic dimension that is neither a batch nor a length (repeated)"})
# One spelling wherever a dimension is held at the example's size: export keeps it static in the file,
# verify checks the file at that size only, though the torch model takes others.
STATIC = Option(("--static",), {"type": types.static_dim, "action": "append", "metavar": "NAME:DIM",
                                "help": "keep this input dimension at the example's size (repeated)"})
JSON = Option(("--json",), {"action": "store_true", "default": argparse.SUPPRESS, "help": "print JSON on stdout"})
DEBUG = Option(("--debug",), {"action": "store_true", "default": argparse.SUPPRESS, "help": "show tracebacks for errors"})
MAX_MEMORY = Option(("--max-memory",), {"type": types.size, "metavar": "SIZE", "help": "memory an untrusted file may claim (archive members, "
                                        "array headers, ONNX Runtime runs of its graph), e.g. 4G (default: 1 GiB or 16x the input's size, whichever is larger)"})
TIME_LIMIT = Option(("--time-limit",), {"type": types.seconds, "metavar": "SECONDS", "help": "time ONNX Runtime may spend on a model rnnx did "
                                        "not build, over all its runs (default: 20 s plus 1 s per 10 MB of model)"})


class CommonArgs:
    """What every verb takes: --debug, --json and the budgets for untrusted input."""

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        DEBUG.add(parser)
        JSON.add(parser)
        MAX_MEMORY.add(parser)
        TIME_LIMIT.add(parser)

    @staticmethod
    @contextlib.contextmanager
    def parse(args: argparse.Namespace) -> Iterator[None]:
        with limits.budgets(getattr(args, "max_memory", None), getattr(args, "time_limit", None)):
            yield


class ToleranceArgs:
    """Polygraphy's --atol/--rtol/--check-error-stat, for every verb that checks what it makes."""

    def __init__(self, named: str) -> None:
        self.named = named  # what NAME in NAME:VALUE names for this verb

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        defaults = "; ".join(f"{dtype} atol {t.atol:g}, rtol {t.rtol:g}" for dtype, t in BY_DTYPE.items())
        group = parser.add_argument_group(
            "tolerance", "Polygraphy's semantics: an element fails when its absolute error exceeds atol and its relative error exceeds rtol "
            "(or, with --check-error-stat max/mean/median/quantile, when that statistic of both does); NaN fails. Defaults depend on the "
            f"dtype that ran: {defaults} (see rnnx/tolerance.py). An option given sets that field only; the others keep the dtype's. "
            f"Each option is VALUE for every output or NAME:VALUE for one {self.named}; repeat it for several.")
        group.add_argument("--atol", type=types.atol, action="append", metavar="[NAME:]VALUE", help="absolute tolerance, e.g. 1e-3 or Y:1e-3")
        group.add_argument("--rtol", type=types.rtol, action="append", metavar="[NAME:]VALUE", help="relative tolerance (error / |reference|), e.g. 1e-2 or h_n:1e-2")
        group.add_argument("--check-error-stat", type=types.error_stat, action="append", metavar="[NAME:]STAT",
                           help="what the tolerances apply to: elemwise (default; every element), max, mean, median or quantile (the 99th percentile)")

    @staticmethod
    def parse(args: argparse.Namespace) -> Tolerances | None:
        """The options as Tolerances, or None where none was given (an impossible combination is refused, exit 2)."""
        given = [getattr(args, key, None) for key in ("atol", "rtol", "check_error_stat")]
        return Tolerances.parse(*given) if any(given) else None


class BackendToleranceArgs:
    """verify's --tol BACKEND=ATOL,RTOL: one backend's tolerance, over --atol/--rtol."""

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--tol", type=types.backend_tolerance, action="append", metavar="BACKEND=ATOL,RTOL",
                            help="one backend's atol and rtol (e.g. ort=1e-3,1e-2), over --atol and --rtol; repeated")

    @staticmethod
    def parse(args: argparse.Namespace) -> dict[str, Tolerance]:
        return {backend: tol for item in args.tol or [] for backend, tol in item.items()}


class SourceArgs:
    """Which recurrence of a weights file, and how to read it: --from, --select, --spec."""

    def __init__(self, source: str = "the weights file", formats: bool = True) -> None:
        self.source, self.formats = source, formats

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        if self.formats:
            FROM.add(parser, help=f"format of {self.source} (default: from extension and content)")
        SELECT.add(parser, help=f"the recurrent group of {self.source} when it holds several")
        SPEC.add(parser)


class OnnxArgs:
    """How an ONNX file is written: --opset (one default everywhere) and, for a recurrent stack
    written from weights, its inputs' layout."""

    def __init__(self, stack: bool) -> None:
        self.stack = stack

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        OPSET.add(parser)
        PRECISION.add(parser, help="what the ONNX file computes in: fp32 (default) or fp16, which rounds the weights to float16 once and "
                                   "checks the file at float16's rounding floor (--dtype, where it exists, is a raw cuDNN blob's element type)")
        parser.add_argument("--keep-io-types", action="store_true",
                            help="with --precision fp16: the file takes and returns float32, with Casts at its edges")
        if self.stack:
            BATCH_FIRST.add(parser)
            SEQ_LENS_INPUT.add(parser)
            # `--seq-lens` once named this switch; in verify it names lengths to check at.
            parser.add_argument("--seq-lens", dest="seq_lens_input", action=Renamed, now="--seq-lens-input", nargs=0, const=True,
                                help=argparse.SUPPRESS)
            NO_STATES.add(parser)


class CheckArgs:
    """The self-check of a verb that writes: --seed and --no-check."""

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        SEED.add(parser)
        NO_CHECK.add(parser)


class ShapeArgs:
    """The shapes verify runs at: --seq-lens, --batch, --dim, --static."""

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        SEQ_LENS.add(parser)
        BATCH.add(parser)
        DIM.add(parser)
        STATIC.add(parser, help="with --against model code: check this input dimension at the file's size only, though the torch model "
                                "takes other sizes there (by default a file that refuses a size the model takes fails); repeated")

    @staticmethod
    def dims(args: argparse.Namespace) -> dict[str, int]:
        return dict(args.dim or [])

    @staticmethod
    def static(args: argparse.Namespace) -> set[tuple[str, int]]:
        return {(name, dim) for name, dim, _ in args.static or []}
