"""The schema: current once migrated, and printable."""

from __future__ import annotations

from leased.testing.conformance.suite import MakeBackend, check


@check
def the_schema_is_current_once_migrated(make: MakeBackend) -> None:
    backend = make()
    backend.check_schema()
    assert backend.migrate() == [], "a second migrate has nothing to do"
    assert "leased_jobs" in backend.migration_sql()
