"""Durations as people type them: 250ms, 10s, 5m, 2h, 3d, or a plain number of seconds.

Below both the CLI and the application settings, which read the same notation.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, None: 1}


def parse_duration(text: str) -> float:
    """'250ms', '10s', '5m', '2h', '1d' or a plain number of seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: use e.g. 250ms, 10s, 5m, 2h, 1d or a number of seconds")
    number, unit = match.groups()
    return float(number) * _UNIT_SECONDS[unit.lower() if unit else None]
