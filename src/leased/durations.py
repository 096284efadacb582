"""Durations as people read them, for the command line, the dashboard and explanations alike."""

from __future__ import annotations

from datetime import timedelta


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
