"""The ``rnnx`` command: one grammar for every verb, each verb a call into the library.

- :mod:`rnnx.cli.types`: argparse ``type=`` adapters over the library's own parsers;
- :mod:`rnnx.cli.groups`: the options shared by several verbs, each declared once;
- :mod:`rnnx.cli.parser`: the verbs, built from those groups;
- :mod:`rnnx.cli.commands`: what each verb calls and prints;
- :mod:`rnnx.cli.flags`: the library's parameter names as the flags that set them;
- :mod:`rnnx.cli.main`: exit statuses (0 ok, 1 parity failure, 2 bad input, 3 a bug).
"""

from rnnx.cli.main import INTERNAL_ERROR, main
from rnnx.cli.parser import build_parser

__all__ = ["INTERNAL_ERROR", "build_parser", "main"]
