"""Loading a backend's SQL: named queries from queries.sql, numbered migrations from migrations/."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


def load_queries(path: Path) -> dict[str, str]:
    """Split a file of `-- name: x` sections into {name: sql}."""
    text = path.read_text()
    parts = _NAME.split(text)
    queries = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"{path}: query {name!r} is defined twice")
        queries[name] = _without_trailing_comments(body).rstrip(";")
    return queries


def _without_trailing_comments(body: str) -> str:
    """A query's text without the comment lines after its end, which introduce the next section:
    sent after the semicolon they would be a second, empty statement (MariaDB answers it with a
    second result, and the connection is out of sync until it is read)."""
    lines = body.strip().splitlines()
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
        lines.pop()
    return "\n".join(lines).strip()


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(folder: Path) -> list[Migration]:
    migrations = []
    for path in sorted(folder.iterdir()):
        match = _MIGRATION_FILE.match(path.name)
        if match:
            migrations.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [m.version for m in migrations]
    # Branches developed side by side reserve numbers ahead (0006 while 0003-0005 are elsewhere), so
    # a gap is allowed: migrate() applies every version not yet recorded, not only those above the
    # highest. Each number once is not negotiable.
    if not versions or versions[0] != 1 or any(a >= b for a, b in zip(versions, versions[1:])):
        raise ValueError(f"{folder}: migrations must be numbered 0001, 0002, ..., each once, got {versions}")
    return migrations


MIGRATE_HINT = "run `leased migrate APP` (or app.migrate() in your code)"


def schema_problem(applied: set[int], migrations: Sequence[Migration], where: str,
                   compatibility: Mapping[int, int] | None = None) -> str | None:
    """Why a database whose recorded versions are `applied` cannot run this leased, or None.
    One text for every entry point (worker, CLI, dashboard, producers), said in one line.
    `compatibility` is {version: the oldest code version that runs on it} (migration 0022), read
    for a schema newer than this code: versions it does not know stop it only where they say so,
    and a version without a row (before 0022, or a branch's) needs code of its own version."""
    known = {migration.version for migration in migrations}
    if not applied:
        return f"leased's schema is missing from {where}: {MIGRATE_HINT} to create it"
    needing_newer = sorted(version for version in applied - known
                           if (compatibility or {}).get(version, version) > max(known))
    if needing_newer:
        return (f"leased's schema in {where} is newer than this leased (it has version {max(applied)}, this leased "
                f"knows up to {max(known)}, and version {needing_newer[0]} needs newer code): upgrade leased to "
                "the release that migrated it, or a later one")
    missing = sorted(known - applied)
    if missing:
        return (f"leased's schema in {where} is older than this leased (version{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(str, missing))} not applied): {MIGRATE_HINT} to upgrade it")
    return None


BODY_END = "\nEND"  # how a trigger's body ends its statement


def statements(script: str) -> list[str]:
    """A script's statements one by one, for drivers that run a single statement per call (sqlite3,
    MySQLdb) and for sqlite3 inside a transaction (executescript would commit it). SQLite's own
    tokenizer finds where each ends, on MariaDB's scripts too: neither has semicolons in strings,
    comments or trigger bodies that a line-by-line split would cut; comment lines between
    statements go with the next one, and a script's trailing comments are no statement."""
    found, current = [], []
    for line in script.splitlines():
        if line.startswith("DELIMITER "):  # a printed MariaDB script's (Migrator.delimits_bodies)
            continue
        if line == "END//":
            line = "END;"
        current.append(line)
        if sqlite3.complete_statement("\n".join(current)):
            found.append("\n".join(current).strip().removesuffix(";").strip())
            current = []
    return [statement for statement in found if _has_code(statement)]


def _has_code(statement: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in statement.splitlines())
