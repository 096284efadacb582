"""Loading a backend's SQL: named queries from queries.sql, numbered migrations from migrations/."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
        queries[name] = body.strip().rstrip(";")
    return queries


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
    # Increasing and each number once. Branches developed in parallel reserve their numbers, so a
    # number may be missing until they are merged.
    if versions != sorted(set(versions)) or not versions or versions[0] != 1:
        raise ValueError(f"{folder}: migrations must be numbered from 0001 up, each number once, got {versions}")
    return migrations
