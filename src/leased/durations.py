"""Durations as people read and type them, for the command line, the settings, the dashboard and
explanations alike: 250ms, 10s, 5m, 2h, 3d, or a plain number of seconds."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
LONGEST_SECONDS = 100 * 366 * 86_400
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, None: 1}


def parse_duration(text: str) -> float:
    """'250ms', '10s', '5m', '2h', '1d' or a plain number of seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: use e.g. 250ms, 10s, 5m, 2h, 1d or a number of seconds")
    number, unit = match.groups()
    seconds = float(number) * _UNIT_SECONDS[unit.lower() if unit else None]
    if seconds > LONGEST_SECONDS:  # past this a timedelta overflows, and no job or retention means it
        raise ValueError(f"{text!r} is more than 100 years: give at most 36600d")
    return seconds


def format_duration(value: float | timedelta | None) -> str:
    """12ms, 3.4s, 42s, 2m05s, 1h02m, 3d04h: short enough for a table column, precise where it matters."""
    if value is None:
        return "-"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86_400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86_400}d{whole % 86_400 // 3600:02d}h"
