"""Ids and pids read from text (a URL's query, a worker id, a search box), one way everywhere.

str.isdigit() also passes "²" and other digits int() refuses, which reached int() as a 500 on the
dashboard; and an id of more digits than a 64-bit integer holds fails in the database instead.
"""

from __future__ import annotations

LONGEST_ID = 18  # digits: every id below 10**18 fits the databases' 64-bit integers


def whole_number(text: str | None, longest: int = LONGEST_ID) -> int | None:
    """`text` as a whole number of 1 to `longest` ASCII digits, or None."""
    if not text or len(text) > longest or not (text.isascii() and text.isdigit()):
        return None
    return int(text)
