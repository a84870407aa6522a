"""A model whose code calls exit has failed the export, and says so.

rnnx runs the user's code many times: importing and building it, on the example, in the
dimension audit, under torch.export's and the TorchScript exporter's tracing, in every case of
the self-check. A forward that calls ``sys.exit(0)`` (at a shape it does not like, say) raises
``SystemExit``, which no ``except Exception`` stops: left alone it would end the process with the
model's code, 0 included, with nothing printed and nothing written. One guard, around everything
export runs, turns it into the one-line refusal every other bad input gets (exit 2), naming the
code, where it was called and what rnnx was doing (the last :func:`rnnx.progress.step`). The
temporary file was already removed on the way out (:func:`rnnx.fileio.atomic_output`).
KeyboardInterrupt is left alone: Ctrl-C keeps its own behaviour.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rnnx import progress
from rnnx.errors import RNNXError
from rnnx.exporters.user_code import raised_in


@contextlib.contextmanager
def exit_refused() -> Iterator[None]:
    """Run the body; a ``SystemExit`` raised in it becomes an :class:`RNNXError` naming the exit."""
    try:
        yield
    except SystemExit as stop:
        code = "" if stop.code is None else repr(stop.code)
        stage = progress.current()
        raise RNNXError(f"the model called exit({code}){where(stop)}" + (f" while rnnx was {stage}" if stage else "")
                        + "; nothing was written: a model's code must return or raise an exception, not exit the process "
                        "(remove the exit, or raise an error at the inputs it refuses)") from stop


def where(stop: SystemExit) -> str:
    """" in forward (model.py:12)": the innermost frame of the user's code that called exit
    (:func:`rnnx.exporters.user_code.raised_in`: site's exit(), argparse's error exit and
    sys.exit itself are the standard library's). An exit raised again from a probe's child
    process (:mod:`rnnx.exporters.bounded`) carries the place the child found, since its
    traceback stayed there."""
    if isinstance(getattr(stop, "where", None), str):
        return stop.where  # type: ignore[attr-defined]
    found = raised_in(stop)
    return f" in {found.tb_frame.f_code.co_name} ({Path(found.tb_frame.f_code.co_filename).name}:{found.tb_lineno})" if found else ""
