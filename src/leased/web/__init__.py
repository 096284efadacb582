"""The leased dashboard: a small server-rendered web UI over a Leased application (extra `leased[web]`).

    from leased.web import dashboard
    asgi_app = dashboard(app)                      # mount it in Starlette/FastAPI, or:
    # leased dashboard myproject.jobs:app           # serves it on http://127.0.0.1:8080/

Nothing here is imported by `import leased`; starlette and jinja2 load only when a dashboard is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from leased.app import Leased

REFRESH_SECONDS = 5.0
MISSING_EXTRA = "the dashboard needs the web extra: pip install 'leased[web]'"


def dashboard(leased: Leased, *, read_only: bool = False, token: str | None = None,
              secret: str | bytes | None = None, refresh_seconds: float = REFRESH_SECONDS,
              allowed_hosts: Iterable[str] | None = None, command_app: str | None = None) -> Starlette:
    """The dashboard for `leased` as an ASGI application.

    read_only: no action buttons, and every POST is refused (403).
    token: when given, every request must carry it as the HTTP Basic password (any user name) or as
        a Bearer token. Without it, protect the mount point yourself.
    secret: signs the CSRF and flash cookies. Defaults to one derived from the token, else a random one
        per process; give one when several processes serve the same address.
    refresh_seconds: how often open pages update themselves (0 turns it off).
    allowed_hosts: answer only requests whose Host header names one of these ('*.example' for the
        names under example; the port is not compared), 421 to any other. `leased dashboard` sets it
        on loopback without a token (leased.web.server.loopback_hosts), against DNS rebinding. None
        answers to any Host: mounted in your application, its own host checks apply.
    command_app: how the commands the pages suggest name your app (`leased worker shop.jobs:app`);
        `leased dashboard APP` passes its APP. None keeps the placeholder APP.
    """
    try:
        from leased.web.app import build
    except ImportError as error:
        if error.name in ("starlette", "jinja2", "multipart", "python_multipart"):
            from leased.errors import ConfigurationError

            raise ConfigurationError(MISSING_EXTRA) from error
        raise
    return build(leased, read_only=read_only, token=token, secret=secret, refresh_seconds=refresh_seconds,
                 allowed_hosts=allowed_hosts, command_app=command_app)
