"""Which layer may import which: the rules the folder tree promises, checked on every import.

test_imports.py refuses circles; this file refuses arrows that point the wrong way even without
one. Imports count as there (at the top, in a function, under TYPE_CHECKING): a module that names
another depends on it. The databases and their drivers come from backends.DIALECTS, so a fourth
database is covered by adding its row.
"""

from __future__ import annotations

import ast
from pathlib import Path

from leased.backends import DIALECTS
from test_imports import SOURCE, _imported, _modules

MODULES = _modules()
DIALECT_PACKAGES = ("leased.backends.sql", *(f"leased.backends.{name}" for name in DIALECTS))
DRIVERS = {driver for kind in DIALECTS.values() for driver in (kind.driver, kind.async_driver) if driver} | {
    "MySQLdb", "psycopg_pool", "asyncpg"}  # the others the backends use: mysqlclient, psycopg's pool, asyncpg
# What doing I/O takes: a database, a socket, a process, a file or a request of one's own.
INPUT_OUTPUT = DRIVERS | {"socket", "subprocess", "urllib", "http", "requests", "httpx", "shutil", "io"}


def _third_party(path: Path) -> set[str]:
    """The top-level names of what a module imports from outside leased."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names - {"leased"}


def _leased_imports(module: str) -> set[str]:
    return _imported(module, MODULES[module], MODULES)


def _within(module: str, packages: tuple[str, ...] | str) -> bool:
    packages = (packages,) if isinstance(packages, str) else packages
    return any(module == package or module.startswith(package + ".") for package in packages)


def _modules_of(package: str) -> list[str]:
    return sorted(module for module in MODULES if _within(module, package))


def _breaches(modules: list[str], refused_leased: tuple[str, ...], refused_outside: set[str]) -> list[str]:
    found = []
    for module in modules:
        found += [f"{module} imports {target}" for target in sorted(_leased_imports(module))
                  if _within(target, refused_leased)]
        found += [f"{module} imports {name}" for name in sorted(_third_party(MODULES[module]) & refused_outside)]
    return found


def test_the_engine_imports_no_dialect_no_driver_and_never_connects():
    # leased.backends itself is where connect() lives: the engine is handed a backend (and, for a
    # process-isolated handler's child, an opener) by the app that composes it.
    engine = _modules_of("leased.engine")
    assert engine
    assert not _breaches(engine, DIALECT_PACKAGES, DRIVERS)
    assert not [f"{module} imports leased.backends" for module in engine
                if "leased.backends" in _leased_imports(module)]


def test_tasks_and_workflows_import_no_dialect_and_no_driver():
    assert not _breaches(["leased.tasks", "leased.workflows"], DIALECT_PACKAGES, DRIVERS)


def test_the_explainer_does_no_input_or_output():
    """`leased why` turns facts read elsewhere into sentences: no backend, port, driver or socket."""
    assert not _breaches(["leased.explain"], ("leased.backends",), INPUT_OUTPUT)


def test_the_dashboard_does_not_import_the_command_line():
    assert not _breaches(_modules_of("leased.web"), ("leased.cli",), set())


def test_a_breach_is_found_when_there_is_one(tmp_path):
    assert _within("leased.backends.sqlite.backend", DIALECT_PACKAGES)
    assert not _within("leased.backends.sqlalchemy_sessions", DIALECT_PACKAGES)
    written = tmp_path / "example.py"
    written.write_text("import socket\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import psycopg.rows\n")
    assert _third_party(written) == {"socket", "typing", "psycopg"}
    assert SOURCE.is_dir()
