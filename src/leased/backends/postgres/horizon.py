"""Who holds back vacuum on PostgreSQL: the sessions of leased's database whose transaction has
been open too long, read from pg_stat_activity as facts (leased.facts.OldTransaction)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from leased.admin import OldTransaction
from leased.horizon import without_literals

NAMED = 3  # the oldest this many are named; more are rarely a different story
QUERY_CHARS = 120  # of each one's statement, shown without its literals
READ_CHARS = 4096  # read of it, so that literals are stripped before it is cut


def old_transactions(rows: Callable[..., Sequence[Any]], older_than_seconds: float) -> tuple[OldTransaction, ...]:
    """`rows` runs a named query (the backend's _rows)."""
    found = rows("old_transactions", older_than=older_than_seconds, limit=NAMED, query_chars=READ_CHARS)
    return tuple(OldTransaction(row["pid"], row["user_name"], row["application_name"] or "", row["client_addr"],
                                row["state"], row["open_seconds"], without_literals(row["query"] or "")[:QUERY_CHARS])
                 for row in found)
