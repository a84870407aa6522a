"""``python -m rnnx.cli``: the same command as ``rnnx``."""

import sys

from rnnx.cli import main

sys.exit(main())
