"""What a long step is doing, on stderr, for a person at a terminal.

The CLI opens a display around a verb (only when stderr is a terminal and no ``--json`` is
asked for); library code marks where it is with :func:`step`, which costs nothing when no
display is open, so Python callers and pipelines see no output.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_display: ContextVar[Any] = ContextVar("rnnx_progress", default=None)
_current: ContextVar[str] = ContextVar("rnnx_step", default="")  # the last step said, shown or not


@contextlib.contextmanager
def shown(label: str, enabled: bool) -> Iterator[None]:
    """A one-line display (tqdm) of ``label``, the current step and the time elapsed."""
    if not enabled:
        yield
        return
    from tqdm import tqdm

    bar = tqdm(total=None, desc=label, file=sys.stderr, leave=False, bar_format="{desc} [{elapsed}]", mininterval=0.2)
    token = _display.set((bar, label))
    # A step can take many seconds inside one library call (torch.export tracing, ONNX
    # Runtime building a session): the elapsed time keeps moving, so the line never looks hung.
    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(bar, stop), daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        _display.reset(token)
        bar.close()


def _tick(bar: Any, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        bar.refresh()


def step(what: str) -> None:
    """Say what is being done now (shown only when a display is open; :func:`current` reads it)."""
    _current.set(what)
    current = _display.get()
    if current is not None:
        bar, label = current
        bar.set_description_str(f"{label}: {what}")
        bar.update(1)


def current() -> str:
    """What the last :func:`step` said is being done ("" before any), for a message that names
    the stage a failure came in."""
    return _current.get()


class Bytes:
    """Progress through a write of ``total`` bytes, shown as "writing NAME: 120 of 3,100 MB"
    (updated each whole percent; a no-op when no display is open)."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done, self._shown = what, max(int(total), 1), 0, -1

    def add(self, n: int) -> None:
        self.done += int(n)
        percent = self.done * 100 // self.total
        if percent != self._shown and _display.get() is not None:
            self._shown = percent
            step(f"{self.what}: {self.done / 1e6:,.0f} of {self.total / 1e6:,.0f} MB")
