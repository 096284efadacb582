"""The one rule for the names and keys a user gives leased: task, queue, workflow, step and
schedule names, and idempotency keys. Checked before anything is written, the same on every
database, each refusal one line naming the field and what to give instead.

Why each part: every database stores 255 characters of a name (MariaDB's VARCHAR(255) cut longer
ones in silence); a lone surrogate cannot be encoded for the database at all; NUL is refused by
PostgreSQL alone; a newline or another control character, or a bidi override, hides in a listing
and reaches terminals (`queue_name="default\\n"` was accepted, and no worker served it); an empty
name was replaced by the function's, in silence.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from leased.errors import ConfigurationError

MAX_NAME = 255  # characters
# Characters that reorder the text around them on a page or in a terminal (Unicode's bidi controls).
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def name_problem(value: Any) -> str | None:
    """Why `value` cannot be a name or key, or None."""
    if not isinstance(value, str):
        return f"it is a {type(value).__name__}, not a string"
    if not value.strip():
        return "it is empty"
    if len(value) > MAX_NAME:
        return f"it is {len(value)} characters long, more than the {MAX_NAME} every database keeps"
    for character in value:
        category = unicodedata.category(character)
        if category == "Cs":
            return f"it holds a lone surrogate ({character!r}), which no database can store"
        if category == "Cc" or character in _BIDI_CONTROLS:
            return f"it holds the control character {character!r}, which hides in listings and terminals"
    if value != value.strip():
        return "it starts or ends with white space, which no listing shows"
    return None


def check_name(value: Any, field: str) -> str:
    """`value` if it may be a `field` (e.g. "task name", "idempotency_key"), else ConfigurationError."""
    problem = name_problem(value)
    if problem is not None:
        raise ConfigurationError(f"invalid {field} {shown(value)}: {problem}; use 1-{MAX_NAME} printable characters")
    return value


def check_derived_name(value: str, field: str, source: str) -> str:
    """`value`, a `field` leased made from a user's name `source` (a step named after its task and a
    number), if it may be one; else ConfigurationError naming the source and asking for a name of
    the user's own: a derived name past 255 characters was cut by MariaDB, so two could become one."""
    problem = name_problem(value)
    if problem is not None:
        raise ConfigurationError(f"{field} of task {shown(source)}: the name made from it, {shown(value)}, is "
                                 f"invalid: {problem}; give this {field} name= of 1-{MAX_NAME} printable characters")
    return value


def shown(value: Any) -> str:
    """`value` as a message names it: its repr, cut to 60 characters, and never an error of its own
    (the repr of a user's object may raise, and the message must still be said)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
    try:
        text = repr(value)
    except Exception:
        return f"<a {type(value).__name__} whose repr() failed>"
    return text if len(text) <= 60 else text[:60] + "..."
