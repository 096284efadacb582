"""Django's database connections, as leased needs them.

Producers write jobs on Django's own connection (so `transaction.atomic()` covers them). Workers
and admin actions use leased's connections, opened from the same settings: the URL below.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

# libpq parameters worth carrying over from a PostgreSQL database's OPTIONS (Django's own, such
# as "pool" or "server_side_binding", mean nothing to libpq).
_LIBPQ_OPTIONS = ("options", "sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout",
                  "application_name", "target_session_attrs", "service", "passfile", "sslpassword")


def raw_connection(alias: str) -> Any:
    """The driver's connection under Django's connection `alias` (sqlite3, psycopg 3, or MySQLdb:
    mysqlclient, or PyMySQL posing as it)."""
    connection = connections[alias]
    connection.ensure_connection()
    return connection.connection


def database_url(alias: str) -> str:
    """A leased database URL for Django's database `alias`, from its current settings."""
    connection = connections[alias]
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        if connection.is_in_memory_db():
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which leased's workers cannot open: "
                "give it a file (in tests: DATABASES[...]['TEST'] = {'NAME': 'a file path'})")
        return "sqlite:///" + os.path.abspath(str(settings["NAME"]))
    if connection.vendor == "postgresql":
        return _postgres_url(settings)
    if connection.vendor == "mysql":
        return _mariadb_url(alias, settings)
    raise ImproperlyConfigured(
        f"DATABASES[{alias!r}] uses {connection.vendor}; leased's backend supports SQLite, PostgreSQL and MariaDB")


def _postgres_url(settings: dict[str, Any]) -> str:
    user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
    host, port = str(settings.get("HOST") or ""), str(settings.get("PORT") or "")
    credentials = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    query = {key: str(value) for key, value in (settings.get("OPTIONS") or {}).items() if key in _LIBPQ_OPTIONS}
    if host.startswith("/"):  # a Unix socket directory goes in the query, not the authority
        query["host"], host = host, ""
    netloc = (credentials + "@" if credentials else "") + host + (":" + port if port else "")
    url = f"postgresql://{netloc}/{quote(str(settings.get('NAME') or ''), safe='')}"
    return url + ("?" + urlencode(query, quote_via=quote) if query else "")


def _mariadb_url(alias: str, settings: dict[str, Any]) -> str:
    host, port = str(settings.get("HOST") or "127.0.0.1"), str(settings.get("PORT") or "")
    if host.startswith("/"):
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}]['HOST'] is a Unix socket, which leased's MariaDB workers cannot open: "
            "give a host name (e.g. 127.0.0.1) and PORT")
    user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
    credentials = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    netloc = (credentials + "@" if credentials else "") + host + (":" + port if port else "")
    return f"mariadb://{netloc}/{quote(str(settings.get('NAME') or ''), safe='')}"
