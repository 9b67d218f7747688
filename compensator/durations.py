"""Durations as a person writes them (`30s`, `15m`, `2h`, `1d`, `1w`, sums like `1h30m`), for
the command line (`undo --since`, `gc --older-than`) and the registry (`retention:`). Imports
nothing."""

from __future__ import annotations

import re

__all__ = ["DURATION_EXAMPLES", "LONGEST", "parse_duration"]

DURATION_EXAMPLES = "30s, 15m, 2h, 1d, 1w, 1h30m"

_DURATION = re.compile(r"(?:(\d+)([smhdw]))+")
_UNIT = re.compile(r"(\d+)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


LONGEST = 100 * 365 * 86400
"""The longest duration taken (100 years): a date further back is not one a computer has."""


def parse_duration(text: str) -> int | None:
    """The seconds `text` stands for, or None when it is not a duration."""
    value = text.strip()
    if not _DURATION.fullmatch(value):
        return None
    return sum(int(n) * _SECONDS[unit] for n, unit in _UNIT.findall(value))
