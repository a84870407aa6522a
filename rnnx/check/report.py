"""One report of a check: rows, the verdict, the first failure, JSON, and an atomic dump.

The rule that nothing passes unchecked lives here: a report with no rows fails, and so does
each row with nothing compared (:class:`rnnx.check.judge.Row`: an output not returned or cut
short, a truth with no finite value or not run). Each verb's report extends this one with
what it has to say besides (a backend's status, a layer that drifts) and keeps its JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnx.check.judge import Row, worst_failure
from rnnx.fileio import atomic_output

NOTHING_CHECKED = "nothing was compared"


class Verdict:
    """What every report does with its ``rows``: the verdict (at least one row, and every one
    passed), the first failure, JSON and the atomic dump. A verb's report is a dataclass that
    inherits this and adds its own fields (so its fields keep their positions)."""

    rows: list[Row]

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def first_failure(self) -> Row | None:
        """The failing row to name first (a run or truth that failed, then NaN, then the largest error)."""
        return worst_failure(self.rows)

    def failure(self) -> str:
        """Why the report fails, in a few words: "" when it passed."""
        if self.passed:
            return ""
        row = self.first_failure()
        if row is None:
            return NOTHING_CHECKED
        where = ", ".join(f"{k} {v}" for k, v in row.labels.items() if isinstance(v, (str, int)) and v != "")
        if row.error or row.stats is None:
            return f"{where}: {row.error}"
        return f"{where}: {row.stats}"

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "rows": [r.to_json() for r in self.rows]}

    def dump(self, path: Path) -> None:
        """The JSON, written beside ``path`` and renamed into place (a reader never sees half of it)."""
        with atomic_output(Path(path)) as tmp:
            tmp.write_text(json.dumps(self.to_json(), indent=2))


@dataclass
class Report(Verdict):
    """Rows of one check, and nothing else; truthy when it passed."""

    rows: list[Row] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed
