"""Who may see the dashboard, and proof that a POST came from one of its own pages.

- Token: with a token configured, every request (pages, static files, /metrics) carries it as the
  HTTP Basic password (any user name; browsers ask once and remember it) or as a Bearer token
  (for Prometheus). Compared in constant time.
- CSRF: a signed double-submit token. A random session id lives in an HttpOnly cookie; forms carry
  HMAC(secret, session id). A page on another site can neither read the cookie nor compute the
  HMAC, and a cookie planted by a neighbouring subdomain does not verify without the secret.
- Origin: a browser names the page a POST comes from; one from another host is refused before its
  CSRF token is looked at. The token already stops a foreign page (it cannot read it); this refuses
  the request even where a token leaked, as Django does. Only the host and port are compared: behind
  a proxy that ends TLS the page says https and the request arrives as http. A POST without Origin
  (curl, scripts) is left to the token.
- Host: `leased dashboard` on loopback without a token answers only to loopback names (see
  allowed_hosts in leased.web.dashboard). Otherwise a page elsewhere could point its own name at
  127.0.0.1 (DNS rebinding), become same-origin with the dashboard, and read and submit its forms.
- Flash: the one-line confirmation shown after an action's redirect, in a signed cookie read once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any, Iterable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_COOKIE = "leased_session"
FLASH_COOKIE = "leased_flash"
CSRF_FIELD = "csrf_token"
REALM = 'Basic realm="leased dashboard", charset="UTF-8"'


def make_secret(secret: str | bytes | None, token: str | None) -> bytes:
    """An explicit secret, else one derived from the token (the same in every process), else random."""
    if isinstance(secret, str):
        return secret.encode()
    if secret:
        return secret
    if token:
        return hmac.new(token.encode(), b"leased dashboard csrf", hashlib.sha256).digest()
    return secrets.token_bytes(32)


def _sign(secret: bytes, purpose: str, value: str) -> str:
    digest = hmac.new(secret, f"{purpose}:{value}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class TokenAuth:
    """ASGI middleware: 401 unless the request carries the token."""

    def __init__(self, app: ASGIApp, token: str):
        if not token:
            raise ValueError("the dashboard token must not be empty")
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._authorized(Request(scope).headers.get("authorization", "")):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse("the leased dashboard needs its token (LEASED_DASHBOARD_TOKEN) "
                                     "as the HTTP Basic password\n", status_code=401,
                                     headers={"WWW-Authenticate": REALM})
        await response(scope, receive, send)

    def _authorized(self, header: str) -> bool:
        scheme, _, credentials = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return _same(credentials.strip(), self.token)
        if scheme != "basic":
            return False
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        _, _, password = decoded.partition(":")
        return _same(password, self.token)


def host_name(host_header: str) -> str:
    """The name in a Host header, without its port, in lower case and without a final dot
    ('LocalHost.:8080' -> 'localhost', '[::1]:8080' -> '[::1]')."""
    host = host_header.strip().lower()
    name = host[:host.find("]") + 1] if host.startswith("[") else host.partition(":")[0]
    return name.rstrip(".")


def host_allowed(name: str, allowed: Iterable[str]) -> bool:
    """Whether `name` is one of `allowed`, where '*.example' stands for every name under example."""
    for pattern in allowed:
        suffix = pattern[1:]
        if name == pattern or (pattern.startswith("*.") and name.endswith(suffix) and name != suffix):
            return True
    return False


class HostCheck:
    """ASGI middleware: 421 for a Host header that names none of `allowed` (the port is not compared:
    a forwarded port, such as ssh -L 9000:localhost:8080, changes it, and a rebinding page must use
    the real one anyway)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]):
        self.app = app
        self.allowed = tuple(host_name(name) if not name.startswith("*.") else name.lower() for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = Request(scope).headers.get("host", "")
        if scope["type"] != "http" or host_allowed(host_name(host), self.allowed):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            f"this dashboard has no token, so it answers only to {', '.join(self.allowed)}, not to "
            f"{host[:100]!r}: another name could be a web page that points its own name at this machine "
            "(DNS rebinding). To open it under that name, set LEASED_DASHBOARD_TOKEN, or name the host with "
            "`leased dashboard --allow-host NAME`.\n", status_code=421)
        await response(scope, receive, send)


def foreign_origin(request: Request) -> str | None:
    """Why a POST must be refused because a page on another host sent it, or None."""
    origin = request.headers.get("origin")
    if origin is None:
        return None
    host = request.headers.get("host", "").lower()
    if origin != "null" and urlsplit(origin).netloc.lower() == host and host:
        return None
    return (f"this POST came from a page at Origin {origin[:100]!r}, not from this dashboard at {host[:100]!r}; "
            "behind a proxy, pass the Host header on (nginx: proxy_set_header Host $host)\n")


def _cookie_path(request: Request) -> str:
    # Mounted under /admin/jobs, the cookies belong to that prefix, not to the host application.
    return (request.scope.get("root_path") or "") + "/"


class Csrf:
    def __init__(self, secret: bytes):
        self.secret = secret

    def session(self, request: Request) -> tuple[str, bool]:
        """The request's session id, and whether it is new (and so must be set on the response)."""
        session = request.cookies.get(SESSION_COOKIE, "")
        if 20 <= len(session) <= 100:
            return session, False
        return secrets.token_urlsafe(32), True

    def token(self, session: str) -> str:
        return _sign(self.secret, "csrf", session)

    def remember(self, request: Request, response: Response, session: str) -> None:
        # Lax, not Strict: Strict drops the cookie on arrival from a link elsewhere, which would mint
        # a new session and invalidate the forms of tabs already open. Lax still withholds it from
        # cross-site POSTs.
        response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="lax", path=_cookie_path(request),
                            secure=request.url.scheme == "https")

    def valid(self, request: Request, submitted: Any) -> bool:
        session = request.cookies.get(SESSION_COOKIE)
        if not session or not isinstance(submitted, str) or not submitted:
            return False
        return _same(submitted, self.token(session))


class Flash:
    """A message that survives exactly one redirect."""

    def __init__(self, secret: bytes):
        self.secret = secret

    def set(self, request: Request, response: Response, kind: str, text: str) -> None:
        payload = base64.urlsafe_b64encode(json.dumps({"kind": kind, "text": text}).encode()).decode()
        response.set_cookie(FLASH_COOKIE, f"{payload}.{_sign(self.secret, 'flash', payload)}", httponly=True,
                            samesite="lax", path=_cookie_path(request), secure=request.url.scheme == "https")

    def read(self, request: Request) -> dict[str, str] | None:
        raw = request.cookies.get(FLASH_COOKIE)
        if raw is None:
            return None
        payload, _, signature = raw.partition(".")
        if not _same(signature, _sign(self.secret, "flash", payload)):
            return None
        try:
            message = json.loads(base64.urlsafe_b64decode(payload))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(message, dict) or message.get("kind") not in ("ok", "error"):
            return None
        return {"kind": message["kind"], "text": str(message.get("text", ""))}

    def clear(self, request: Request, response: Response) -> None:
        if FLASH_COOKIE in request.cookies:
            response.delete_cookie(FLASH_COOKIE, path=_cookie_path(request))

SECURITY_HEADERS = {
    # Everything is served from the package itself: no inline script or style, no third party.
    "content-security-policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


class SecurityHeaders:
    """ASGI middleware adding SECURITY_HEADERS to every response."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()
                         if name.encode() not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
