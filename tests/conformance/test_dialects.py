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


def _base_names(node: ast.ClassDef) -> list[str]:
    """The names a class's bases go by (Generic[T] as Generic, module.Name as Name)."""
    names = []
    for base in node.bases:
        base = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(base, (ast.Name, ast.Attribute)):
            names.append(base.id if isinstance(base, ast.Name) else base.attr)
    return names


def test_no_class_of_the_backends_inherits_a_leased_class_but_a_protocol_or_an_error():
    """Storage is parts composed over a dialect (CONTRIBUTING.md, "Adding a database"), not a tower
    of subclasses: a class under backends/ may name a protocol it satisfies or an error it refines,
    never another leased class whose body it would inherit."""
    bases_of: dict[str, list[str]] = {}
    for path in ENGINE.parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases_of.setdefault(node.name, []).extend(_base_names(node))

    def reaches(name: str, roots: set[str], seen: frozenset[str] = frozenset()) -> bool:
        return name in roots or any(reaches(base, roots, seen | {name}) for base in bases_of.get(name, ())
                                    if base not in seen)

    errors = {"BaseException", "Exception", "ValueError", "RuntimeError", "OSError", "ConnectionError"}
    towers = set()
    for path in BACKENDS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                towers |= {(str(path.relative_to(BACKENDS)), node.name, base) for base in _base_names(node)
                           if base in bases_of and not reaches(base, {"Protocol"}) and not reaches(base, errors)}
    assert not towers, towers
