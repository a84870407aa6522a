"""The docs cannot drift from the CLI: every ``rnnx`` command shown in README.md and docs/*.md
(in ```sh blocks) parses with rnnx's own grammar, flags and their values included (a spec,
a dtype, a --dim), so a renamed flag or a wrong example fails here. A synopsis line (its
options in [brackets]) names only options its verb has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```(?:sh|bash|console)\n(.*?)```", re.S)


def shown_commands(path: Path) -> list[str]:
    """The ``rnnx ...`` command lines of a document's shell blocks (continuations joined,
    comments and a leading ``$ `` dropped)."""
    commands = []
    for block in _BLOCK.findall(path.read_text(encoding="utf-8")):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip().removeprefix("$ ")
            if not line.startswith("rnnx "):
                continue
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:  # an unbalanced quote: shown as it is, the test says so
                tokens = [line]
            commands.append(shlex.join(tokens))
    return commands


CASES = [(path.relative_to(ROOT).as_posix(), command) for path in DOCS for command in shown_commands(path)]


def test_the_docs_show_commands() -> None:
    assert len([c for p, c in CASES if p == "README.md"]) >= 5


@pytest.mark.parametrize("where, command", CASES, ids=[f"{p}:{c[:60]}" for p, c in CASES])
def test_every_shown_command_parses(where: str, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.parser import build_parser

    argv = shlex.split(command)[1:]
    if argv in (["--help"], ["-h"]) or argv[-1:] in (["--help"], ["-h"]):
        return  # prints help and exits 0: nothing to parse
    if "[" in command:  # a synopsis: its optional parts are placeholders, but each option must be the verb's
        parser = build_parser()
        verbs = next(a for a in parser._actions if a.dest == "command").choices  # argparse's subparsers, by verb
        known = {o for a in verbs[argv[0]]._actions for o in a.option_strings} | {o for a in parser._actions for o in a.option_strings}
        named = {t.strip("[]") for t in argv if t.strip("[]").startswith("--")}
        assert named <= known, f"{where}: `{command}` names {sorted(named - known)}, which rnnx {argv[0]} does not take"
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"{where}: `{command}` does not parse (exit {stop.code}): {capsys.readouterr().err.strip()}")
