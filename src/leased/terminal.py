"""Text from jobs made safe for a terminal: what a handler wrote is shown, never obeyed.

An error message, a task name or a payload can hold ESC sequences (clear the screen, retitle the
window, rewrite earlier lines), BEL, or bidi overrides (U+202E shows what follows right to left, so
a line can read other than it is). `leased show`, `why`, the worker's log lines and the rest print
them escaped, as `\\x1b` or `\\u202e`; newlines and tabs stay, so a traceback keeps its shape.
A message that holds the four characters `\\x1b` reads the same as one that held ESC: the point is
that the terminal obeys neither.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline; a carriage return not ending a line (it would let the rest of
# the line overwrite its start); DEL and the C1 controls (0x9b is a one-byte ESC [ to some
# terminals); the bidi embeddings, overrides, isolates and marks.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
                       "|\r(?!\n)")


def printable(text: str) -> str:
    """`text` with every control a terminal would obey written out: ESC as \\x1b, U+202E as \\u202e."""
    return _CONTROLS.sub(_escape, text)


def printable_json(text: str) -> str:
    """JSON text (from json.dumps, which escapes C0 controls itself) with the rest of them as JSON's
    own \\u escapes, so that it still parses to the same value."""
    return _CONTROLS.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
