"""A postgresql:// URL as leased reads it: its own options taken out, the rest for libpq, and the
database named for messages without its password."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from leased.backends.postgres.outages import first_line
from leased.backends.urls import redacted, scrubbed
from leased.errors import ConfigurationError

CONNECT_TIMEOUT_SECONDS = 10
# Options of leased's own in a postgresql:// URL's query, taken out before libpq reads it (libpq
# refuses parameters it does not know).
OWN_URL_PARAMETERS = ("listen_url",)


def own_parameters(url: str) -> tuple[str, dict[str, str]]:
    """The URL without leased's parameters, and those parameters. The rest of the query is passed
    on byte for byte: decoding and encoding it again could change what libpq reads."""
    parts = urlsplit(url)
    kept, ours = [], {}
    for piece in parts.query.split("&") if parts.query else ():
        key, _, value = piece.partition("=")
        if unquote(key) in OWN_URL_PARAMETERS:
            ours[unquote(key)] = unquote(value)
        else:
            kept.append(piece)
    return (urlunsplit(parts._replace(query="&".join(kept))) if ours else url), ours


def parsed(url: str, what: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        # libpq's message may quote the URL, or the piece of it that it could not read: the password.
        raise ConfigurationError(f"invalid {what} {redacted(url)!r}: {scrubbed(first_line(error), url)}") from None


def described(params: dict[str, Any]) -> str:
    """A database named without the password, for messages and repr; a multi-host URL's hosts each
    with its port (a single port serves them all)."""
    hosts = (params.get("host") or "the default host").split(",")
    ports = str(params.get("port") or "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    # Not strict: a URL with more hosts than ports is libpq's to refuse, in its words, at connect.
    where = ", ".join(f"{host}:{port}" if port else host for host, port in zip(hosts, ports, strict=False))
    return f"PostgreSQL database {params.get('dbname') or '(default)'!r} on {where}"


def connect_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    return kwargs


def listen_target(own: dict[str, str]) -> tuple[str, dict[str, Any], str] | None:
    """The URL's listen_url (a direct connection for LISTEN, when the URL goes through a pooler):
    the URL, its connection arguments and how it is named; None when it has none."""
    url = own.get("listen_url")
    if url is None:
        return None
    params = parsed(url, "listen_url in the PostgreSQL URL")
    return url, connect_kwargs(params), f"{described(params)} (listen_url)"
