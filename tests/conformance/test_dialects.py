"""The one table of databases (leased.backends.DIALECTS) and the capabilities each declares: what
connect(), migrator(), the URL parser, Django, the pytest plugin and the test matrix read."""

from __future__ import annotations

import ast

import pytest

from leased.backends import DIALECTS, dialect_named, migrator, parse_database_url
from leased.errors import ConfigurationError
from paths import SRC

ENGINE = SRC / "leased" / "engine"
BACKENDS = ENGINE.parent / "backends"


def test_each_backend_declares_the_capabilities_of_its_row(app, backend_name):
    assert app.backend.capabilities is DIALECTS[backend_name].capabilities
    assert parse_database_url(app.database_url).dialect is DIALECTS[backend_name]


def test_every_name_of_a_database_finds_its_row():
    for kind in DIALECTS.values():
        for name in (kind.name, *kind.schemes, kind.django_vendor):
            assert dialect_named(name) is kind, name
        url = f"{kind.schemes[-1]}://{'/tmp/jobs.db' if kind.capabilities.file_database else 'user@host/db'}"
        assert parse_database_url(url).kind == kind.name
    assert dialect_named("oracle") is None
    with pytest.raises(ConfigurationError, match="leased supports SQLite, PostgreSQL, MariaDB, not oracle"):
        migrator("oracle")


def test_a_missing_driver_names_the_extra_that_installs_it():
    error = DIALECTS["postgres"].driver_missing(ImportError("No module named 'psycopg'"))
    assert str(error) == "PostgreSQL needs psycopg: pip install 'leased[postgres]' (No module named 'psycopg')"


@pytest.mark.needs("listen_notify")
def test_a_test_that_needs_a_capability_runs_only_where_it_is(backend_name, capabilities):
    assert capabilities.listen_notify and DIALECTS[backend_name].capabilities.listen_notify


def test_the_engine_reads_no_undeclared_member_of_what_it_is_given():
    """getattr(x, "name", default) is how an undeclared member is read: the ports and the Handler
    protocol declare what the engine reads instead."""
    allowed = {("children.py", "func")}  # a child resolves a Task (the decorator's result) or a plain function
    found = set()
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                found.add((path.name, node.args[1].value))
    assert found == allowed


def test_no_python_file_of_a_dialect_runs_past_300_lines():
    # What only one database has lives in parts of its own folder, each small enough to read whole
    # (CONTRIBUTING.md, "Adding a storage verb"); a file past this is a part waiting to be cut out.
    long = {str(path.relative_to(BACKENDS)): lines for kind in DIALECTS.values()
            for path in sorted((BACKENDS / kind.name).glob("*.py"))
            if (lines := len(path.read_text().splitlines())) > 300}
    assert not long, long
