"""Jinja filters: how times, durations, counts and JSON read on the page.

Times are shown relative ("12s ago") with the exact UTC time in a tooltip; the page's script turns
the tooltip into the viewer's local time. Relative times use the server's clock, which is close
enough for reading; lease decisions never depend on it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from jinja2 import Environment
from markupsafe import Markup, escape

from leased.counts import format_count
from leased.durations import format_duration
from leased.horizon import sentence


def duration(value: float | timedelta | None) -> str:
    return format_duration(value)


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "-"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    if -1 < seconds < 1:
        return "just now"
    if seconds < 0:
        return f"in {format_duration(-seconds)}"
    return f"{format_duration(seconds)} ago"


def utc(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def period(seconds: float) -> str:
    """The overview's window as words: 'hour', '15 minutes', '2 hours'."""
    whole = round(seconds)
    if whole == 3600:
        return "hour"
    if whole % 3600 == 0:
        return f"{whole // 3600} hours"
    if whole % 60 == 0:
        return "minute" if whole == 60 else f"{whole // 60} minutes"
    return format_duration(seconds)


def number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def memory(value: int) -> str:
    """Bytes of memory, in MiB (a child's RSS)."""
    return f"{value / 2**20:,.0f} MiB" if value >= 2**20 else f"{value / 2**10:,.0f} KiB"


def count(value: int, estimated: bool = False) -> str:
    """A job count, marked "≈" with two significant figures when it is an estimate (leased.counts)."""
    return format_count(value, estimated)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)


def pretty_json(value: Any) -> str:
    """Indented JSON; the template escapes it, so a payload holding markup shows as text. Indenting
    recurses in Python, which a value nested ~1,000 deep exhausted (a 500 for the job's page): such a
    value is shown on one line, or said to be too deep."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=_json_default)
    except RecursionError:
        return _one_line(value)


def short_json(value: Any, width: int = 80) -> str:
    """A result on one line, cut to `width`: a step's row is no place for a whole payload."""
    text = _one_line(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _one_line(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    except RecursionError:
        return "(nested too deeply to show)"


def code_spans(text: str) -> Markup:
    """Plain text with `commands` in backticks, as HTML: escaped first, then the spans marked up."""
    return Markup(_CODE_SPAN.sub(r"<code>\1</code>", str(escape(text))))


_CODE_SPAN = re.compile(r"`([^`]+)`")


def isolated(value: Any) -> Markup:
    """Text from a job (a name, an error, a payload, a traceback) in a <bdi>, escaped. A bidi
    override in it (U+202E shows what follows right to left, up to the end of the paragraph) then
    ends with it, instead of reversing the page's own words after it."""
    return Markup("<bdi>%s</bdi>") % value


# The facts of a `why` reason that a handler wrote, quoted inside the reason's sentence.
_HANDLERS_TEXT = ("error_message", "last_error")


def explained(reason: Any) -> Markup:
    """A `why` reason as HTML: code_spans, with the handler's error quoted in it isolated."""
    texts = [reason.data.get(key) for key in _HANDLERS_TEXT]
    quoted = sorted({text for text in texts if isinstance(text, str) and text}, key=len, reverse=True)
    if not quoted:
        return code_spans(reason.message)
    pieces = re.split("(" + "|".join(map(re.escape, quoted)) + ")", reason.message)
    # re.split with one group: the sentence's own words at even places, the quoted error at odd ones.
    return Markup("").join(isolated(piece) if place % 2 else code_spans(piece) for place, piece in enumerate(pieces))


def install(env: Environment) -> None:
    env.filters.update(duration=duration, period=period, ago=ago, utc=utc, iso=iso, number=number, count=count,
                       memory=memory,
                       pretty_json=pretty_json, short_json=short_json, code_spans=code_spans, old_transaction=sentence,
                       isolated=isolated, explained=explained)
