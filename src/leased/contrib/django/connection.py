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

from leased.backends import DIALECTS, DatabaseKind, dialect_named

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


def dialect_of(alias: str) -> DatabaseKind:
    """The database (backends.DIALECTS) under Django's connection `alias`."""
    vendor = connections[alias].vendor
    dialect = dialect_named(vendor)
    if dialect is None:
        supported = ", ".join(kind.title for kind in DIALECTS.values())
        raise ImproperlyConfigured(f"DATABASES[{alias!r}] uses {vendor}; leased's backend supports {supported}")
    return dialect


def database_url(alias: str) -> str:
    """A leased database URL for Django's database `alias`, from its current settings."""
    connection = connections[alias]
    settings = connection.settings_dict
    dialect = dialect_of(alias)
    scheme = dialect.schemes[0]
    if dialect.capabilities.file_database:
        if connection.is_in_memory_db():
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory {dialect.title} database, which leased's workers cannot "
                "open: give it a file (in tests: DATABASES[...]['TEST'] = {'NAME': 'a file path'})")
        return f"{scheme}:///" + os.path.abspath(str(settings["NAME"]))
    user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
    host, port = str(settings.get("HOST") or ""), str(settings.get("PORT") or "")
    query: dict[str, str] = {}
    if dialect.capabilities.libpq_url:  # a Unix socket directory, and libpq's options, go in the query
        query = {key: str(value) for key, value in (settings.get("OPTIONS") or {}).items() if key in _LIBPQ_OPTIONS}
        if host.startswith("/"):
            query["host"], host = host, ""
    elif host.startswith("/"):
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}]['HOST'] is a Unix socket, which leased's {dialect.title} workers cannot open: "
            "give a host name (e.g. 127.0.0.1) and PORT")
    else:
        host = host or "127.0.0.1"  # the driver's own default would be a Unix socket
    credentials = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    netloc = (credentials + "@" if credentials else "") + host + (":" + port if port else "")
    url = f"{scheme}://{netloc}/{quote(str(settings.get('NAME') or ''), safe='')}"
    return url + ("?" + urlencode(query, quote_via=quote) if query else "")
