"""The roles of a dynamic dimension, and how a label's name says which.

A dimension is a **batch** (independent sequences side by side: any size runs, 1 included), a
**length** (frames or tokens along time: any size from 1, the recurrences run that many steps)
or **other** (features, channels, a count the model fixes at the size it was traced at). Every
verb that varies a shape varies batches and lengths and keeps the others.

Where neither rnnx's export record nor the graph's wiring says, the label's name does: the
names exporters and people give (``batch``, ``N``, ``bsz``; ``seq``, ``time``, ``frames``,
``T``, ``tokens``).
"""

from __future__ import annotations

import re

BATCH, LENGTH, OTHER = "batch", "length", "other"
ROLES = (BATCH, LENGTH, OTHER)

_BATCH_NAMES = re.compile(r"^(n|b|bs|bsz|nb)$|batch", re.IGNORECASE)
_LENGTH_NAMES = re.compile(r"^(t|l|s)$|seq|len|time|step|frame|width|token|src|tgt|sample|word|char", re.IGNORECASE)


def role_of_name(label: str) -> str:
    """What a dimension's label says it is: a batch, a length, or other (the name says neither)."""
    if _BATCH_NAMES.search(label):
        return BATCH
    if _LENGTH_NAMES.search(label):
        return LENGTH
    return OTHER
