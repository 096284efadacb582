"""System checks of a LeasedBackend's configuration (`manage.py check` runs them; the check of
jobs waiting for a TASKS alias that is gone is in stranded.py)."""

from __future__ import annotations

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from leased.backends import dialect_named
from leased.backends.capabilities import Capabilities
from leased.contrib.django.connection import database_url

# What a database needs of Django's own transactions (the README's set-up), by what it can do: the
# OPTIONS key, the value it must have, and why.
_SINGLE_WRITER = ("transaction_mode", "IMMEDIATE",
                  "a transaction that reads and then writes may otherwise meet a worker's commit and fail "
                  "with 'database is locked'", "leased.W001")
_REPEATABLE_READ = ("isolation_level", "read committed",
                    "an enqueue or a transactional task in REPEATABLE READ takes gap locks on leased's indexes, "
                    "where they deadlock with workers' claims (leased's own transactions are READ COMMITTED)",
                    "leased.W002")


def _transaction_setting(capabilities: Capabilities) -> tuple[str, str, str, str] | None:
    if capabilities.single_writer:
        return _SINGLE_WRITER
    if capabilities.repeatable_read_by_default:
        return _REPEATABLE_READ
    return None


def backend_problems(alias: str, database: str) -> list[checks.CheckMessage]:
    """What is wrong with TASKS[alias], a LeasedBackend on Django's database `database`."""
    where = f"TASKS[{alias!r}]"
    problems = []
    if not apps.is_installed("leased.contrib.django"):
        problems.append(checks.Error(
            f"{where} uses leased's backend, but 'leased.contrib.django' is not in INSTALLED_APPS",
            hint="add it: it brings the migration that creates leased's tables, get_result() and the worker command",
            id="leased.E001"))
    if database not in connections.settings:
        problems.append(checks.Error(
            f"{where}['OPTIONS']['database'] is {database!r}, which is not in DATABASES",
            hint=f"use one of {', '.join(connections.settings)}", id="leased.E002"))
        return problems
    try:
        database_url(database)
    except ImproperlyConfigured as error:
        problems.append(checks.Error(str(error), id="leased.E003"))
    problems.extend(transaction_problems(where, database))
    return problems


def transaction_problems(where: str, database: str) -> list[checks.CheckMessage]:
    """A warning when DATABASES[database] lacks the transaction setting leased needs of its vendor."""
    connection = connections[database]
    dialect = dialect_named(connection.vendor)
    setting = _transaction_setting(dialect.capabilities) if dialect is not None else None
    if setting is None:
        return []
    key, wanted, why, check_id = setting
    value = (connection.settings_dict.get("OPTIONS") or {}).get(key)
    if isinstance(value, str) and value.lower() == wanted.lower():
        return []
    return [checks.Warning(
        f"{where} is on DATABASES[{database!r}], whose OPTIONS[{key!r}] is {value!r}, not {wanted!r}: {why}",
        hint=f"set DATABASES[{database!r}]['OPTIONS'][{key!r}] = {wanted!r}", id=check_id)]
