"""A transaction left open elsewhere, in words: what `leased why` and the dashboard say about a
session that holds back PostgreSQL's vacuum (leased.facts.OldTransaction). Nothing else in the
stack names it: the claims just get slower."""

from __future__ import annotations

import re

from leased.durations import format_duration
from leased.errors import ConfigurationError
from leased.admin import OldTransaction

# A session is named once its transaction has been open this long: many leases' worth, longer than
# any of leased's own transactions (a claim, a finish batch, a prune batch) takes.
OLD_TRANSACTION_AFTER = 60.0  # seconds; Leased(old_transaction_after=...) changes it


# A SQL statement's literals: E'' strings (backslash escapes), other quoted strings (B'', X'', N'',
# U&''), dollar-quoted strings, and numbers not part of a name or a $1 parameter. A literal cut off
# by the server's track_activity_query_size runs to the end.
_LITERAL = re.compile(r"""
    (?<!\w)[Ee]'(?:[^'\\]|''|\\.)*(?:'|$)
  | (?:(?<!\w)(?:[BbXxNn]|[Uu]&))?'(?:[^']|'')*(?:'|$)
  | \$(?P<tag>[A-Za-z_]\w*|)\$.*?(?:\$(?P=tag)\$|$)
  | (?<![\w$.])\d+(?:\.\d*)?(?:[eE][-+]?\d+)?
""", re.VERBOSE | re.DOTALL)


def without_literals(statement: str) -> str:
    """Another session's statement with each literal a `?`: its shape tells an operator whose it is,
    and its values (a password in ALTER ROLE, a customer's data in an INSERT) are not leased's to
    show to whoever can read `leased why` or the dashboard."""
    return _LITERAL.sub("?", statement)


def who(old: OldTransaction) -> str:
    """'pid 1234 (user app, application psql, from 10.0.0.5, idle in transaction)'"""
    parts = [f"user {old.user}" if old.user else "user not visible to this role",
             f"application {old.application_name}" if old.application_name else "no application_name",
             f"from {old.client_addr}" if old.client_addr else "over a local socket",
             old.state or "state not visible"]
    return f"pid {old.pid} ({', '.join(parts)})"


def cost(old: OldTransaction) -> str:
    return (f"until it ends, vacuum can remove no row version that died since it began, so dead rows pile up in "
            f"leased_jobs and its indexes and claims slow down stepping over them. End it (`SELECT "
            f"pg_terminate_backend({old.pid})`), or let the server end such sessions "
            f"(idle_in_transaction_session_timeout)")


def sentence(old: OldTransaction) -> str:
    """The whole story in one sentence."""
    statement = f", its last statement: {old.query}" if old.query else ""
    return (f"A transaction open for {format_duration(old.open_seconds)} holds back vacuum: {who(old)}"
            f"{statement}; {cost(old)}.")


def check_old_transaction_after(value: object) -> float:
    """Leased(old_transaction_after=...): seconds, zero or more."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigurationError(f"old_transaction_after must be a number of seconds, zero or more (got {value!r}): "
                                 f"e.g. old_transaction_after=60")
    return float(value)
