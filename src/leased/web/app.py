"""The dashboard as an ASGI application: routes, templates, static files, /metrics, security layers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, FileSystemLoader, StrictUndefined, pass_context
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from leased.app import Leased
from leased.errors import DatabaseUnavailable, SchemaNotReady
from leased.web import formatting
from leased.web.pages import Pages
from leased.web.security import Csrf, Flash, HostCheck, SecurityHeaders, TokenAuth, make_secret

HERE = Path(__file__).parent


class IdConvertor(Convertor):
    """A job's or a workflow's id in a path: 1-18 ASCII digits, which every database's 64-bit id
    holds. Starlette's int took 5,000 digits to int(), past Python's limit: a 500, not a 404."""

    regex = "[0-9]{1,18}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", IdConvertor())


def build(leased: Leased, *, read_only: bool, token: str | None, secret: str | bytes | None,
          refresh_seconds: float, allowed_hosts: Iterable[str] | None, command_app: str | None = None) -> Starlette:
    # Autoescape everything: payloads, results and tracebacks come from the database and may hold
    # markup, which must show as text.
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    formatting.install(env)
    env.globals["url_for"] = url_path
    env.globals["command_app"] = command_app or "APP"  # in the commands the pages suggest
    templates = Jinja2Templates(env=env)
    key = make_secret(secret, token)
    pages = Pages(leased, templates, Csrf(key), Flash(key), read_only=read_only, refresh_seconds=refresh_seconds,
                  command_app=command_app)
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/jobs/retry-failed", pages.retry_failed, methods=["POST"], name="retry_failed"),
        Route("/jobs/{job_id:id}", pages.job, name="job"),
        Route("/jobs/{job_id:id}/retry", pages.retry, methods=["POST"], name="retry"),
        Route("/jobs/{job_id:id}/cancel", pages.cancel, methods=["POST"], name="cancel"),
        Route("/jobs/{job_id:id}/signal", pages.signal, methods=["POST"], name="signal"),
        Route("/workflows", pages.workflows, name="workflows"),
        Route("/workflows/{workflow_id:id}", pages.workflow, name="workflow"),
        Route("/workflows/{workflow_id:id}/retry", pages.retry_workflow, methods=["POST"], name="retry_workflow"),
        Route("/workflows/{workflow_id:id}/cancel", pages.cancel_workflow, methods=["POST"], name="cancel_workflow"),
        Route("/schedules", pages.schedules, name="schedules"),
        Route("/workers", pages.workers, name="workers"),
        Route("/queues/{queue_name}/pause", pages.pause_queue, methods=["POST"], name="pause_queue"),
        Route("/queues/{queue_name}/resume", pages.resume_queue, methods=["POST"], name="resume_queue"),
        Route("/metrics", MetricsEndpoint(leased), name="metrics"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    # Outermost first. The token guards every route, static files and /metrics included.
    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(HostCheck, allowed=allowed_hosts))
    if token is not None:
        middleware.append(Middleware(TokenAuth, token=token))
    # What the database cannot answer is a page that says so and what to do, never a 500 with a
    # traceback. The exception's class is looked up by its bases, so DatabaseLocked is an outage too.
    exception_handlers = {
        SchemaNotReady: lambda request, error: pages.problem(request, 503, "leased's schema is not ready", str(error)),
        DatabaseUnavailable: lambda request, error: pages.problem(request, 503, "Database unavailable", str(error)),
    }
    return Starlette(routes=routes, middleware=middleware, exception_handlers=exception_handlers)


@pass_context
def url_path(context: dict[str, Any], name: str, /, **path_params: Any) -> str:
    """Links as paths (with the mount prefix), not absolute URLs: behind a proxy that terminates TLS,
    an absolute URL built from the request would say http:// and the wrong host."""
    request: Request = context["request"]
    return request.url_for(name, **path_params).path


class MetricsEndpoint:
    """/metrics: the database-derived gauges of leased.metrics, in Prometheus' text format.

    Collecting queries the database, so it runs in the thread pool, rather than through
    prometheus_client's ASGI app, which would collect on the event loop and stall every page.
    """

    def __init__(self, leased: Leased):
        self.leased = leased
        self.registry: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        response = await run_in_threadpool(self.render, request.headers.get("accept", ""))
        await response(scope, receive, send)

    def render(self, accept: str) -> Response:
        try:
            from prometheus_client.exposition import choose_encoder

            from leased.metrics import database_registry
        except ImportError as error:
            return PlainTextResponse(f"metrics unavailable: {error}\n", status_code=503)
        if self.registry is None:
            self.registry = database_registry(self.leased)
        encoder, content_type = choose_encoder(accept)
        return Response(encoder(self.registry), media_type=content_type)
