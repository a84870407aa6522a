"""Budgets for untrusted input: how much memory a file may claim and how long a graph may run.

A small file can claim gigabytes (an archive member that inflates, an array header with a
huge shape, a graph that builds a huge tensor) or run for ever (a Loop with a trip count
of 1e15). Every reader checks what a file claims against :func:`memory_budget` before it
allocates, and every ONNX Runtime run of a graph rnnx did not build runs in a child
process held to :func:`memory_budget` and :func:`time_limit`.

Defaults scale with the input, so that real models pass untouched: memory is the larger
of 1 GiB and 16 times the input's size, time is 20 s plus 1 s per 10 MB of model. The
CLI's ``--max-memory`` and ``--time-limit`` set them outright.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator

from rnnx.errors import RNNXError

MIN_MEMORY = 1 << 30
MEMORY_PER_INPUT_BYTE = 16
BASE_SECONDS = 20.0
SECONDS_PER_BYTE = 1.0 / 10e6
WORKING_COPIES = 4  # a conversion holds about this many copies of the weights at its peak (measured: 3.2)
MAX_PARAMETERS = 1 << 34  # a spec's default ceiling: 64 GiB of float32, past any real recurrent network

_memory: contextvars.ContextVar[int | None] = contextvars.ContextVar("rnnx_max_memory", default=None)
_seconds: contextvars.ContextVar[float | None] = contextvars.ContextVar("rnnx_time_limit", default=None)

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``512M``, ``4G``, ``1.5g``, ``1073741824`` (bytes); the suffix may end in ``B``/``iB``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not match or float(match.group(1)) <= 0:
        raise RNNXError(f"max_memory: {text!r}: expected a positive size like 512M, 4G or 1073741824")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def memory_budget(input_bytes: int) -> int:
    """The most memory an input of ``input_bytes`` may claim (bytes)."""
    fixed = _memory.get()
    return fixed if fixed is not None else max(MIN_MEMORY, MEMORY_PER_INPUT_BYTE * int(input_bytes))


def max_parameters() -> int:
    """The most parameters a spec may have: what --max-memory holds as float32, else 2**34 (64 GiB)."""
    fixed = _memory.get()
    return fixed // 4 if fixed is not None else MAX_PARAMETERS


def time_limit(model_bytes: int) -> float:
    """The most seconds ONNX Runtime may spend on a model of ``model_bytes``, over all its runs."""
    fixed = _seconds.get()
    return fixed if fixed is not None else BASE_SECONDS + SECONDS_PER_BYTE * int(model_bytes)


def check_claim(what: str, claimed: int, input_bytes: int) -> None:
    """Refuse ``claimed`` bytes (what a file says it will need) above the budget, before allocating."""
    budget = memory_budget(input_bytes)
    if claimed > budget:
        raise RNNXError(f"{what} needs {_human(claimed)}, over the memory budget of {_human(budget)} for a {_human(input_bytes)} input; "
                        "if the file is trusted, raise it with --max-memory")


@contextlib.contextmanager
def budgets(max_memory: int | None = None, seconds: float | None = None) -> Iterator[None]:
    """Set the budgets outright for the code inside (the CLI's --max-memory and --time-limit)."""
    tokens = (_memory.set(max_memory if max_memory is not None else _memory.get()),
              _seconds.set(seconds if seconds is not None else _seconds.get()))
    try:
        yield
    finally:
        _memory.reset(tokens[0])
        _seconds.reset(tokens[1])


def human_size(n: int) -> str:
    """``1.5 GiB``: a size for a person, as the budgets' messages print it."""
    return _human(n)


def _human(n: int) -> str:
    size: float = n
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
