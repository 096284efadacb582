"""The MariaDB driver, named in one place: everything else imports it from here, never a driver.

Two DB-API drivers speak to MariaDB with the same paramstyle, cursors and error numbers:
- PyMySQL, pure Python: a wheel on every platform, so `pip install 'leased[mariadb]'` needs no C
  compiler, headers or pkg-config. It is what the extra installs and what a fresh machine gets.
- mysqlclient (`MySQLdb`), the C driver: faster per query (see docs/benchmarks.md, "MariaDB
  drivers"), but it builds from source on Linux, against libmariadb or libmysqlclient. Installed
  beside leased (`pip install mysqlclient`), leased's own connections use it.

LEASED_MARIADB_DRIVER=pymysql (or mysqlclient) picks one regardless; CI sets pymysql, so the suite
runs on the driver a fresh machine gets. A caller's connection (`task.using(connection=...)`, or
Django's) may come from either driver installed: `connection_driver()` finds its own.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

CHOICE_VARIABLE = "LEASED_MARIADB_DRIVER"
INSTALL_HINT = "pip install 'leased[mariadb]' (PyMySQL; or mysqlclient, the faster C driver, where it builds)"


@dataclass(frozen=True)
class Driver:
    """One driver: its module (the DB-API errors), connection class and cursor classes."""

    name: str  # as on PyPI
    module: ModuleType
    connection_class: type
    cursor_class: type  # rows as tuples
    dict_cursor_class: type  # rows as dicts by column name
    found_rows_flag: int  # CLIENT.FOUND_ROWS
    refuses_multi_statements: dict[str, Any]  # the argument that keeps one statement per call, if any

    def connect(self, **arguments: Any) -> Any:
        """A connection with connect_arguments()'s keywords (host, port, user, password, database,
        charset, connect_timeout, autocommit), plus what every connection of leased's gets: rowcount
        counts rows matched, as on the other databases, and one statement per call (a second one, a
        stray semicolon, would leave a result unread and the connection out of sync; refused, it is
        a syntax error at once)."""
        return self.module.connect(**arguments, client_flag=self.found_rows_flag, **self.refuses_multi_statements)


def _pymysql() -> Driver:
    import pymysql
    import pymysql.cursors
    from pymysql.constants import CLIENT

    # PyMySQL never asks for CLIENT.MULTI_STATEMENTS unless told to.
    return Driver("PyMySQL", pymysql, pymysql.connections.Connection, pymysql.cursors.Cursor,
                  pymysql.cursors.DictCursor, CLIENT.FOUND_ROWS, {})


def _mysqlclient() -> Driver:
    import MySQLdb

    if MySQLdb.__name__ != "MySQLdb":  # pymysql.install_as_MySQLdb(): PyMySQL under mysqlclient's name
        raise ImportError("MySQLdb is PyMySQL posing as mysqlclient (pymysql.install_as_MySQLdb())")
    import MySQLdb.connections
    import MySQLdb.cursors
    from MySQLdb.constants import CLIENT

    return Driver("mysqlclient", MySQLdb, MySQLdb.connections.Connection, MySQLdb.cursors.Cursor,
                  MySQLdb.cursors.DictCursor, CLIENT.FOUND_ROWS, {"multi_statements": False})


_LOADERS = {"pymysql": _pymysql, "mysqlclient": _mysqlclient}


def installed_drivers() -> list[Driver]:
    """Every driver importable here, the faster first."""
    drivers = []
    for load in (_mysqlclient, _pymysql):
        try:
            drivers.append(load())
        except ImportError:
            pass
    return drivers


def load_driver(name: str) -> Driver:
    """The driver named `name` (pymysql or mysqlclient); ModuleNotFoundError (naming the missing
    module, as for the other optional drivers) if it is not installed."""
    try:
        load = _LOADERS[name.lower()]
    except KeyError:
        raise ValueError(f"{CHOICE_VARIABLE}={name!r}: use pymysql or mysqlclient") from None
    try:
        return load()
    except ImportError as error:
        raise ModuleNotFoundError(f"{CHOICE_VARIABLE}={name} names a driver that is not installed ({error}): "
                                  f"{INSTALL_HINT}", name=getattr(error, "name", None) or name) from None


def _chosen() -> Driver:
    name = os.environ.get(CHOICE_VARIABLE, "").strip()
    if name:
        return load_driver(name)
    drivers = installed_drivers()
    if not drivers:
        raise ModuleNotFoundError(f"no MariaDB driver is installed: {INSTALL_HINT}", name="pymysql")
    return drivers[0]


DRIVER = _chosen()  # what leased's own connections use; read at each connect (the bench and tests swap it)
_DRIVERS = installed_drivers()
_BY_CONNECTION_CLASS = {driver.connection_class: driver for driver in _DRIVERS}


def _classes(name: str) -> tuple[type[Exception], ...]:
    """The exception class `name` (a DB-API name) of every installed driver: a caller's connection
    may come from the other one."""
    return tuple(getattr(driver.module, name) for driver in _DRIVERS)


Error = _classes("Error")
OperationalError = _classes("OperationalError")
ProgrammingError = _classes("ProgrammingError")
IntegrityError = _classes("IntegrityError")
InterfaceError = _classes("InterfaceError")  # PyMySQL's answer to a query on a connection it closed


def connection_driver(connection: Any) -> Driver | None:
    """The installed driver `connection` belongs to, or None for anything else (by its class first:
    every query of the backend asks)."""
    return _BY_CONNECTION_CLASS.get(type(connection)) or next(
        (driver for driver in _DRIVERS if isinstance(connection, driver.connection_class)), None)


def dict_cursor(connection: Any) -> Any:
    """A cursor giving rows as dicts, of the connection's own driver."""
    return connection.cursor((connection_driver(connection) or DRIVER).dict_cursor_class)


def tuple_cursor(connection: Any) -> Any:
    """A cursor giving rows as tuples, of the connection's own driver."""
    return connection.cursor((connection_driver(connection) or DRIVER).cursor_class)


def pose_as_mysqldb() -> None:
    """Lets Django's MySQL backend (which imports MySQLdb) run on PyMySQL when mysqlclient is not
    installed; does nothing when it is. Call it once, before Django loads its database backend
    (in settings.py). PyMySQL reports a mysqlclient version Django accepts."""
    try:
        importlib.import_module("MySQLdb")
    except ImportError:
        import pymysql

        pymysql.install_as_MySQLdb()
