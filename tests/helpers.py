"""Test helpers: a registry of specs that the tests sweep, and torch module construction."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rnnx.spec import RNNSpec

# Each spec is paired with the check it gets: every test that sweeps SPECS runs them all.
TORCH_SPECS = [
    RNNSpec.parse(s)
    for s in (
        "lstm,input=3,hidden=5",
        "lstm,input=4,hidden=6,layers=2,bidirectional",
        "lstm,input=5,hidden=7,layers=2,bidirectional,proj=3",
        "lstm,input=3,hidden=4,layers=3,proj=2,no_bias",
        "gru,input=3,hidden=5",
        "gru,input=4,hidden=3,layers=2,bidirectional,no_bias",
        "rnn_tanh,input=3,hidden=4,layers=2",
        "rnn_relu,input=4,hidden=5,bidirectional",
    )
]

SHAPES = [(1, 1), (7, 3), (16, 5)]  # (seq_len, batch)


def convert_as_shipped_and_planted(source: Path, output: Path, module: str, plant: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``rnnx convert SOURCE -o OUTPUT --json`` once as shipped (in this process) and once in a
    fresh process with ``plant`` run first (statements on ``fmt``, the module
    ``rnnx.formats.<module>``): the format's facts changed, to see that convert's check catches
    it, with nothing changed in this process. The first run's output is removed before the second."""
    run = f"import sys, rnnx.formats.{module} as fmt; {{plant}}from rnnx.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["convert", str(source), "-o", str(output), "--json"]
    good = rnnx_in_process(*argv)
    if output.exists():
        output.unlink()
    bad = subprocess.run([sys.executable, "-c", run.format(plant=plant), *argv], capture_output=True, text=True, timeout=300)
    return good, bad


class MadeOnFirstUse(dict):  # type: ignore[type-arg]
    """A module fixture's files by name, each made the first time a test asks for it: under
    pytest-xdist a worker makes only the ones its own tests use (``files[name]``, as a dict)."""

    def __init__(self, makers: dict[str, Callable[[], Any]]) -> None:
        super().__init__()
        self._makers = makers

    def __missing__(self, name: str) -> Any:
        made = self[name] = self._makers[name]()
        return made


def model_file(path: Path, source: str) -> dict[str, Any]:
    """Write model code to ``path``, as a user's file that ``--against path:NAME`` names, and
    run it: its namespace (the classes and objects it defines)."""
    path.write_text(source)
    namespace: dict[str, Any] = {}
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102  the test's own model code
    return namespace


def rnnx_in_process(*args: object) -> subprocess.CompletedProcess[str]:
    """``python -m rnnx ARGS`` run in this process (rnnx.cli.main, its stdout and stderr
    caught), answered as subprocess.run answers: for tests about what a verb does, not about
    the process, without the 2-3 s a new process takes to import torch and rnnx. Not for
    --time-limit/--max-memory runs meant to be killed, signals, environment variables or
    tracebacks: those keep a real subprocess."""
    import contextlib
    import io

    from rnnx.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    modules, path = set(sys.modules), list(sys.path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as stop:  # argparse's usage errors
                code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 2
    finally:
        _forget_user_modules(modules, path)
    return subprocess.CompletedProcess(["rnnx", *map(str, args)], code, out.getvalue(), err.getvalue())


def _forget_user_modules(modules: set[str], path: list[str]) -> None:
    """What a new process would not keep: modules the run imported from a user's files (a
    ``models.py`` that the next test's ``import models`` must not find) and its sys.path
    entries. Libraries' modules (torch's, rnnx's) stay: imported again, they would be copies."""
    sys.path[:] = path
    kept = (sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[1] / "rnnx"))
    for name in set(sys.modules) - modules:
        where = getattr(sys.modules.get(name), "__file__", None) or ""
        if where and not where.startswith(kept):
            del sys.modules[name]
