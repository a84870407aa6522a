"""argparse ``type=`` functions: each turns one option's text into what the library takes.

The parsing itself belongs to the library type it builds (``limits.parse_size``,
``Tolerances.parse``, ``Profile.parse``, ``check_opset``); these adapters only turn that
type's refusal into a usage error, which argparse prints on one line with exit status 2.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, TypeVar

from rnnx import limits
from rnnx.engines.tensorrt import Profile
from rnnx.engines.tensorrt_parser import DEFAULT_VERSION, KNOWN_VERSIONS, parser_for
from rnnx.errors import RNNXError, one_line
from rnnx.exporters.loading import parse_dim
from rnnx.formats.onnx_build import check_opset
from rnnx.shapes.profiles import parse_shapes
from rnnx.tolerance import Tolerance, Tolerances, parse_tol_items
from rnnx.verify.drive import parse_map
from rnnx.verify.run import BACKEND_ALIASES, BACKENDS, DTYPES

T = TypeVar("T")

MAX_CHECK_SIZE = 100_000  # verify's lengths and batches: each one is run, in float64 too
MAX_CHECK_VALUES = 32  # each length pairs with every batch and dtype

# A library refusal starts with what it refused ("opset: ...", "--max-memory '4X': ..."); argparse
# already names the option, so that prefix would say it twice.
_NAMED_PREFIX = re.compile(r"(?:--)?[a-z][\w-]*(?::\s+|\s+(?='))")


def _usage(parse: Callable[[str], T], name: str) -> Callable[[str], T]:
    """``parse`` with its RNNXError turned into argparse's usage error."""

    def checked(text: str) -> T:
        try:
            return parse(text)
        except RNNXError as exc:
            message = one_line(exc, None)
            raise argparse.ArgumentTypeError(_NAMED_PREFIX.sub("", message, count=1)) from None

    checked.__name__ = name  # argparse names the type in its own messages
    return checked


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,17,256, found {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, found {text!r}")
    if max(values) > MAX_CHECK_SIZE:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_CHECK_SIZE} (a check runs at every value), found {max(values)}")
    if len(values) > MAX_CHECK_VALUES:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_CHECK_VALUES} values (each pairs with every other option's), found {len(values)}")
    return values


def sizes_to_check(text: str) -> list[int]:
    """``1,17,64``: sequence lengths or batch sizes, each run in every backend and in float64."""
    return _positive_ints(text)


def _chunk_sizes(text: str) -> list[int]:
    """``--chunks 1,7,32``: frames per chunk (a chunk of 0 frames is refused)."""
    from rnnx.verify.chunked import check_chunks

    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise RNNXError(f"--chunks: expected comma-separated frame counts like 1,7,32, found {text!r}") from None
    check_chunks(values)
    if max(values) > MAX_CHECK_SIZE or len(values) > MAX_CHECK_VALUES:
        raise RNNXError(f"--chunks: expected at most {MAX_CHECK_VALUES} sizes of at most {MAX_CHECK_SIZE} frames, found {text!r}")
    return values


def _names(text: str, known: tuple[str, ...], what: str, aliases: dict[str, str] | None = None) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in known and name not in (aliases or {}):
            raise argparse.ArgumentTypeError(f"unknown {what} {name!r}; expected one of {', '.join(known)}")
    if not names:
        raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(known)}, found {text!r}")
    return names


def backend_list(text: str) -> list[str]:
    """``ort,torch,reference``: backends of :func:`rnnx.verify.verify` (aliases onnxruntime, tensorrt)."""
    return _names(text, BACKENDS, "backend", BACKEND_ALIASES)


#: The long names (numpy's, and cuDNN raw blobs') of verify's dtypes.
DTYPE_ALIASES = {long: short for short, long in DTYPES.items()}


def dtype_list(text: str) -> list[str]:
    """``fp32,bf16`` (or ``float32,bfloat16``): dtypes of :func:`rnnx.verify.verify`, by their short names."""
    return [DTYPE_ALIASES.get(name, name) for name in _names(text, tuple(DTYPES), "dtype", DTYPE_ALIASES)]


def _number(convert: Callable[[str], T], fits: Callable[[Any], bool], expected: str) -> Callable[[str], T]:
    """A number ``convert`` reads from the text that ``fits``, else a usage error expecting ``expected``."""

    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}")
        return value

    return parse


seed = _number(int, lambda v: 0 <= v < 1 << 63, "a non-negative integer below 2**63")
seconds = _number(float, lambda v: 0 < v < float("inf"), "a positive number of seconds")
#: One tolerance for every output: a finite, non-negative number.
tolerance_value = _number(float, lambda v: 0 <= v < float("inf"), "a finite, non-negative number like 1e-2")


def _opset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer opset like 17, found {text!r}") from None
    check_opset(value)
    return value


def _dim(text: str) -> tuple[str, int]:
    label, sep, size = text.partition("=")
    if not sep or not label or not size.isdigit() or not 0 < int(size) <= MAX_CHECK_SIZE:
        raise argparse.ArgumentTypeError(f"expected LABEL=SIZE with SIZE between 1 and {MAX_CHECK_SIZE}, like channels=3, found {text!r}")
    return label, int(size)


def _tolerance_item(key: str) -> Callable[[str], str]:
    """One ``[NAME:]VALUE`` of --atol/--rtol/--check-error-stat, checked alone; the group combines them."""

    def check(text: str) -> str:
        given = [text]
        Tolerances.parse(atol=given if key == "atol" else None, rtol=given if key == "rtol" else None, stat=given if key == "stat" else None)
        return text

    return check


def _backend_tolerance(text: str) -> dict[str, Tolerance]:
    parsed = dict(parse_tol_items([text]))
    backend_list(next(iter(parsed)))
    return parsed


def _role(text: str) -> str:
    parse_map([text])
    return text


def _names_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names like a,b, found {text!r}")
    return names


names = _usage(_names_list, "list of names")
chunk_sizes = _usage(_chunk_sizes, "chunk sizes")
size = _usage(limits.parse_size, "size")
opset = _usage(_opset, "opset")
dim = _usage(_dim, "LABEL=SIZE")
profile = _usage(Profile.parse, "profile")
min_shapes = _usage(lambda text: parse_shapes(text, "--min-shapes"), "NAME:AxBxC[,...]")
opt_shapes = _usage(lambda text: parse_shapes(text, "--opt-shapes"), "NAME:AxBxC[,...]")
max_shapes = _usage(lambda text: parse_shapes(text, "--max-shapes"), "NAME:AxBxC[,...]")
atol = _usage(_tolerance_item("atol"), "tolerance")
rtol = _usage(_tolerance_item("rtol"), "tolerance")
error_stat = _usage(_tolerance_item("stat"), "statistic")
backend_tolerance = _usage(_backend_tolerance, "BACKEND=ATOL,RTOL")
role = _usage(_role, "NAME=ROLE")
dynamic_dim = _usage(lambda text: parse_dim(text, "--dynamic"), "NAME:DIM[=LABEL[:MIN[:MAX]]]")
static_dim = _usage(lambda text: parse_dim(text, "--static"), "NAME:DIM")


def tensorrt_version(text: str) -> str:
    """``--tensorrt VERSION``: a TensorRT release (8.6, 10.3.0) or one of the parser table's names (10.x)."""
    text = text.strip()
    if not (text in KNOWN_VERSIONS or re.fullmatch(r"\d+\.\d+(\.\d+)*", text)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TensorRT version like 8.6 or 10.3.0, or one of {', '.join(KNOWN_VERSIONS)}")
    try:
        parser_for(text)  # a release whose parser rules rnnx cannot apply is a usage error, before any work
    except RNNXError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None
    return text


def lowering_target(text: str) -> str:
    """``lower --for tensorrt[=VERSION]``: the TensorRT version whose parser rules choose the nodes."""
    target, _, version = text.partition("=")
    if target.strip().lower() != "tensorrt":
        raise argparse.ArgumentTypeError(f"{text!r}: expected tensorrt or tensorrt=VERSION (one of {', '.join(KNOWN_VERSIONS)})")
    version = version.strip() or DEFAULT_VERSION
    if version not in KNOWN_VERSIONS and not re.fullmatch(r"\d+\.\d+(\.\d+)*", version):
        raise argparse.ArgumentTypeError(f"{text!r}: expected tensorrt=VERSION, a release like 8.6 or 10.3.0 or one of {', '.join(KNOWN_VERSIONS)}")
    try:
        parser_for(version)
    except RNNXError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {str(exc).partition(': ')[2]}") from None
    return version
