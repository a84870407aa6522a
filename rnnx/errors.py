"""The one error class meant for users.

Anything raised as :class:`RNNXError` is a problem with the input (a bad file, a wrong
shape, an unsupported variant). The CLI prints it as one line and exits with status 2, or
1 for a :class:`ParityError` (a check that ran and failed, as :class:`ExportCheckFailed`).
Every other exception is a bug in rnnx and keeps its traceback.
"""

from __future__ import annotations

import re
from typing import Any

# Terminal control sequences (colours, bold) that libraries put in their messages: quoted into
# one of ours they would reach a pipe or a CI log as "^[[1m".
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


class RNNXError(Exception):
    """A user-facing error: what was expected, what was found, and what to do. Messages are
    kept plain text: a library's terminal colours quoted into one are dropped."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(_ANSI.sub("", a) if isinstance(a, str) else a for a in args))


class BudgetExceeded(RNNXError):
    """A run of a graph rnnx did not build passed ``--time-limit`` or ``--max-memory`` and was
    stopped (CLI exit status 2): a probe that meets it stops the verb, it does not move a profile."""


class ParityError(RNNXError):
    """Outputs of two backends disagree beyond tolerance (CLI exit status 1)."""


class ExportCheckFailed(ParityError):
    """:func:`rnnx.export` made a file, but ONNX Runtime's outputs differ from the torch
    module's at some shape of the self-check, so nothing was written (CLI exit status 1).

    ``report`` is the export's report (an :class:`rnnx.exporters.writing.ExportReport`):
    ``report.check`` holds every case of the self-check, ``report.check.failure()`` the
    first that failed with every input's shape."""

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


#: How many characters of a library's message one of rnnx's lines quotes, by what the quote is
#: for: a message is one line, and a library's may run to pages (a traceback, a graph dump).
NOTE_CHARS = 120  # in a note beside a result that stands (a fallback taken): the result is the news
DETAIL_CHARS = 160  # in parentheses, in a sentence that already says what failed and what to do
CAUSE_CHARS = 300  # the library's message is the cause itself (ONNX Runtime refused a run, a checker failed)


def one_line(exc: BaseException | str, limit: int | None, typed: bool = False) -> str:
    """``exc``'s message as one line of at most ``limit`` characters (None: all of it): terminal
    colours dropped, every run of whitespace (newlines, tabs) one space, any other control
    character escaped as ``repr`` escapes it, and a longer message cut at a word with "...".
    ``typed`` puts the exception's class first (``ValueError: ...``); an empty message reads as
    the class alone."""
    text = " ".join(_ANSI.sub("", str(exc)).split())
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if limit is not None and len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0].rstrip(",;:(") + "..."
    if isinstance(exc, BaseException) and (typed or not text):
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text


NAME_SHOWN = 80  # characters of a name a message shows: a 10 kB name must not bury what the message says


def shown(name: str, quoted: bool = True) -> str:
    """A name read from a file (an input, a dimension, a node), as one line of a message or a
    report shows it: escaped as ``repr`` escapes it, so that a newline or a terminal escape in
    it cannot start a line or colour one, and cut after :data:`NAME_SHOWN` characters with its
    length. ``quoted=False`` leaves a plain name (printable, no spaces at its ends, short) bare,
    for lists that print names as they are (``seq 1..256``); any other is quoted still."""
    name = str(name)
    if not quoted and name.isprintable() and name == name.strip() and 0 < len(name) <= NAME_SHOWN:
        return name
    text = repr(name[:NAME_SHOWN])
    return text if len(name) <= NAME_SHOWN else f"{text[:-1]}...{text[-1]} ({len(name)} characters)"


def shape_error(tensor: str, expected: tuple[int, ...], found: tuple[int, ...], hint: str = "") -> RNNXError:
    """Build the standard message for a tensor whose shape does not fit the spec."""
    msg = f"tensor {tensor}: expected shape {tuple(expected)}, found {tuple(found)}"
    return RNNXError(msg + (f"; {hint}" if hint else ""))


def refuse_spec(spec: object, reasons: list[str], advice: str = "convert to onnx or rnnx instead") -> None:
    """Raise a format's refusals of ``spec`` (its layout's ``refusals``), if any, as one error."""
    if reasons:
        raise RNNXError(f"spec {spec}: {'; '.join(reasons)}; {advice}")
