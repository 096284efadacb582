"""The dashboard's pages and actions, as Starlette endpoints over a Leased application.

GET endpoints only read. Actions are POSTs that check the CSRF token (and read-only mode), do one
thing, and redirect back with a flash message, so a reload never repeats them.

Database calls are blocking, so every endpoint that makes one is a plain `def` (Starlette runs those
in its thread pool) or hands the call to the pool itself.
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Callable
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from leased.admin import WorkerInfo
from leased.app import Leased
from leased.digits import whole_number
from leased.errors import ConfigurationError, InvalidTransition, JobNotFound, PayloadError, WorkflowNotFound
from leased.jobs import Job, JobStatus
from leased.run_views import STEP_STATUSES, parents_note, step_counts, step_tree
from leased.runs import WorkflowInfo, WorkflowStatus
from leased.task_signatures import signature_clashes
from leased.web.charts import throughput_chart
from leased.web.graph import FAN_OUT_SHOWN, step_graph
from leased.web.security import CSRF_FIELD, Csrf, Flash, foreign_origin

PAGE_SIZE = 50
HELD_SHOWN = 1_000  # running jobs listed on the Workers page, beside the workers holding them
ORDERS = ("newest", "oldest")


class BadRequest(Exception):
    """A query parameter the page cannot use; shown as a 400 page naming it."""


@dataclass(frozen=True)
class JobsQuery:
    """The jobs page's filters and position, parsed from (and turned back into) its query string."""

    status: str | None = None
    queue: str | None = None
    task: str | None = None
    search: str | None = None
    worker: str | None = None  # a worker's id: the jobs it ran an attempt of, or holds now
    order: str = "newest"
    before_id: int | None = None
    after_id: int | None = None

    @classmethod
    def parse(cls, params: Any) -> JobsQuery:
        def text(name: str) -> str | None:
            value = (params.get(name) or "").strip()
            return value or None

        def whole(name: str) -> int | None:
            value = text(name)
            if value is None:
                return None
            number = whole_number(value)
            if number is None:
                raise BadRequest(f"{name} must be a job id (a whole number), got {value[:40]!r}")
            return number

        status, order = text("status"), text("order") or "newest"
        if status is not None and status not in {s.value for s in JobStatus}:
            raise BadRequest(f"unknown status {status!r}: use one of {', '.join(s.value for s in JobStatus)}")
        if order not in ORDERS:
            raise BadRequest(f"order must be newest or oldest, got {order!r}")
        return cls(status, text("queue"), text("task"), text("q"), text("worker"), order, whole("before_id"),
                   whole("after_id"))

    def link(self, **changes: Any) -> str:
        """This query's string with some fields changed; a new filter starts again at the first page."""
        fields = {"status": self.status, "queue": self.queue, "task": self.task, "q": self.search,
                  "worker": self.worker, "order": None if self.order == "newest" else self.order}
        fields.update(changes)
        return "?" + urlencode({key: value for key, value in fields.items() if value is not None})

    @property
    def filtered(self) -> bool:
        return any((self.status, self.queue, self.task, self.search, self.worker))


def jobs_page(leased: Leased, query: JobsQuery) -> dict[str, Any]:
    """One page of jobs in the chosen order, with links to the pages on either side.

    Keyset paging both ways: going forward reads `limit + 1` rows past the cursor in display order;
    going back reads them in the opposite order and reverses, so every page is one index range scan
    however deep it is.
    """
    newest = query.order == "newest"
    backward_cursor = query.after_id if newest else query.before_id
    forward_cursor = query.before_id if newest else query.after_id
    backward = backward_cursor is not None
    read_newest = newest != backward
    cursor = backward_cursor if backward else forward_cursor
    rows = leased.list_jobs(status=query.status, queue_name=query.queue, task_name=query.task,
                            search=query.search, worker_id=query.worker, limit=PAGE_SIZE + 1,
                            before_id=cursor if read_newest else None,
                            after_id=None if read_newest else cursor, order="newest" if read_newest else "oldest")
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    if backward:
        rows.reverse()
    has_next = (not backward and more) or backward
    has_previous = (backward and more) or (not backward and cursor is not None)
    next_link = previous_link = None
    if rows:
        first, last = rows[0].id, rows[-1].id
        if has_next:
            next_link = query.link(before_id=last) if newest else query.link(order="oldest", after_id=last)
        if has_previous:
            previous_link = query.link(after_id=first) if newest else query.link(order="oldest", before_id=first)
    return {"jobs": rows, "next_link": next_link, "previous_link": previous_link,
            "first_link": query.link() if has_previous else None}


@dataclass(frozen=True, slots=True)
class Segment:
    """One status's part of a run's progress bar, in percent of its steps (SVG lengths, not styles:
    the page's CSP allows no inline style)."""

    status: str
    x: float
    width: float
    count: int


def progress_segments(info: WorkflowInfo) -> list[Segment]:
    """The run's steps by status, ended ones first (done, failed, cancelled), then those to come."""
    total = info.total or 1
    segments, x = [], 0.0
    for status in ("done", "failed", "cancelled", "running", "sleeping", "pending", "waiting"):
        count = info.counts.get(status, 0)
        if count:
            width = 100.0 * count / total
            segments.append(Segment(status, round(x, 3), round(width, 3), count))
            x += width
    return segments


def workflow_actions(info: WorkflowInfo) -> dict[str, bool]:
    """Retry: some step failed (retry_workflow retries those). Cancel: some step can still run."""
    return {"can_retry": info.counts.get("failed", 0) > 0,
            "can_cancel": info.status is WorkflowStatus.RUNNING}


@dataclass(frozen=True)
class WorkerGroup:
    """The processes of one supervisor on one host, or a worker of its own (supervisor None)."""

    host: str
    supervisor: int | None
    workers: list[WorkerInfo]


def worker_groups(workers: list[WorkerInfo]) -> list[WorkerGroup]:
    """The workers table's rows: groups with a live worker first, then by host and supervisor (a worker of
    its own by its pid); in a group, live processes first, by pid."""
    groups: dict[tuple[str, int | None, str], list[WorkerInfo]] = {}
    for worker in workers:
        supervisor = worker.supervisor_pid
        groups.setdefault((worker.host, supervisor, "" if supervisor is not None else worker.id), []).append(worker)
    ordered = sorted(groups.items(), key=lambda item: (not any(worker.alive for worker in item[1]), item[0][0],
                                                       item[0][1] if item[0][1] is not None else item[1][0].pid))
    return [WorkerGroup(host, supervisor, sorted(members, key=lambda worker: (not worker.alive, worker.pid)))
            for (host, supervisor, _), members in ordered]


class Pages:
    def __init__(self, leased: Leased, templates: Jinja2Templates, csrf: Csrf, flash: Flash, *, read_only: bool,
                 refresh_seconds: float, command_app: str | None = None):
        self.leased = leased
        self.command_app = command_app  # the APP in the commands `why` suggests, if known
        self.templates = templates
        self.csrf = csrf
        self.flash = flash
        self.read_only = read_only
        self.refresh_seconds = refresh_seconds

    def render(self, request: Request, template: str, context: dict[str, Any], status_code: int = 200) -> Response:
        session, new_session = self.csrf.session(request)
        context = {**context, "csrf_field": CSRF_FIELD, "csrf_token": self.csrf.token(session),
                   "read_only": self.read_only, "flash": self.flash.read(request),
                   "refresh_seconds": self.refresh_seconds, "statuses": [s.value for s in JobStatus]}
        response = self.templates.TemplateResponse(request, template, context, status_code=status_code)
        response.headers["cache-control"] = "no-store"
        self.flash.clear(request, response)
        if new_session:
            self.csrf.remember(request, response, session)
        return response

    def problem(self, request: Request, status_code: int, title: str, message: str) -> Response:
        return self.render(request, "problem.html", {"title": title, "message": message}, status_code)

    # Pages.
    def overview(self, request: Request) -> Response:
        overview = self.leased.overview()
        return self.render(request, "overview.html", {
            "overview": overview, "totals": overview.totals,
            "chart": throughput_chart(self.leased.throughput(timedelta(seconds=overview.window_seconds),
                                                             by_task=False)),
            "done_recently": sum(queue.done_recently for queue in overview.queues),
            "failed_recently": sum(queue.failed_recently for queue in overview.queues),
            "alive_workers": sum(1 for worker in overview.workers if worker.alive),
            "worker_groups": worker_groups(overview.workers),
        })

    def jobs(self, request: Request) -> Response:
        try:
            query = JobsQuery.parse(request.query_params)
            page = jobs_page(self.leased, query)
        except (BadRequest, ConfigurationError) as error:
            return self.problem(request, 400, "Bad request", str(error))
        return self.render(request, "jobs.html", {
            "query": query, **page, "task_names": self.leased.task_names(), "queue_names": self.leased.queue_names(),
            "worker_ids": [worker.id for worker in self.leased.workers()],
        })

    def workers(self, request: Request) -> Response:
        workers = self.leased.workers()
        held: dict[str | None, list[Job]] = {}
        # One read of the running jobs (their number is bounded by the workers' slots), not one per worker.
        for job in reversed(self.leased.list_jobs(status=JobStatus.RUNNING, limit=HELD_SHOWN)):
            held.setdefault(job.lease_owner, []).append(job)
        return self.render(request, "workers.html", {
            "workers": workers, "worker_groups": worker_groups(workers), "held": held,
            "alive_workers": sum(1 for worker in workers if worker.alive), "clashes": signature_clashes(workers),
        })

    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            job, why = self.leased.job_and_why(job_id)
        except JobNotFound:
            return self.problem(request, 404, "No such job", f"There is no job with id {job_id}.")
        if self.command_app:
            why = why.naming_app(self.command_app)
        started = job.history[0].started_at if job.history else None
        return self.render(request, "job.html", {
            "job": job, "started_at": started, "why": why, "steps": self.leased.job_steps(job.id),
            "total": job.finished_at - job.created_at if job.finished_at else None,
            "can_retry": job.status in (JobStatus.FAILED, JobStatus.CANCELLED),
            "can_cancel": job.status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING,
                                         JobStatus.SLEEPING),
            # A job that has not ended takes signals (before its wait_for too); a sleeping one names
            # the signal it waits for, which the form offers.
            "signals": self.leased.job_signals(job.id),
            "can_signal": not job.is_finished,
            "awaited": next((reason.data["signal_name"] for reason in why.reasons
                             if reason.code == "sleeping" and reason.data.get("signal_name")), None),
        })

    def workflows(self, request: Request) -> Response:
        name = (request.query_params.get("name") or "").strip() or None
        raw = (request.query_params.get("before_id") or "").strip()
        before_id = whole_number(raw)
        if raw and before_id is None:
            return self.problem(request, 400, "Bad request", f"before_id must be a workflow id (a whole number), "
                                                             f"got {raw[:40]!r}")
        runs = self.leased.list_workflows(limit=PAGE_SIZE + 1, before_id=before_id, name=name)
        more = len(runs) > PAGE_SIZE
        runs = runs[:PAGE_SIZE]
        query = {"name": name} if name else {}
        next_link = "?" + urlencode({**query, "before_id": runs[-1].id}) if more else None
        first_link = ("?" + urlencode(query)) if before_id is not None else None
        return self.render(request, "workflows.html", {
            "runs": [(info, progress_segments(info), step_counts(info.counts, info.skipped)) for info in runs],
            "name": name, "next_link": next_link, "first_link": first_link,
        })

    def workflow(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        try:
            info = self.leased.get_workflow(workflow_id)
        except WorkflowNotFound:
            return self.problem(request, 404, "No such workflow", f"There is no workflow with id {workflow_id}.")
        rows = [(row, parents_note(row)) for row in step_tree(info.steps)]
        return self.render(request, "workflow.html", {
            "run": info, "rows": rows, "segments": progress_segments(info), "graph": step_graph(info.steps),
            "fan_out_shown": FAN_OUT_SHOWN,
            "summary": step_counts(info.counts, info.skipped), "step_statuses": STEP_STATUSES,
            **workflow_actions(info),
        })

    def schedules(self, request: Request) -> Response:
        return self.render(request, "schedules.html", {"schedules": self.leased.list_schedules(),
                                                       "now": datetime.now(UTC)})

    # Actions.
    async def _checked_form(self, request: Request) -> Any:
        """The POSTed form, or a 403 response if this POST must not do anything."""
        if self.read_only:
            return PlainTextResponse("the dashboard is read-only\n", status_code=403)
        refused = foreign_origin(request)
        if refused is not None:
            return PlainTextResponse(refused, status_code=403)
        form = await request.form()
        if not self.csrf.valid(request, form.get(CSRF_FIELD)):
            return PlainTextResponse("missing or invalid CSRF token: reload the page and try again\n",
                                     status_code=403)
        return form

    def _redirect(self, request: Request, url: str, kind: str, text: str) -> Response:
        response = RedirectResponse(url, status_code=303)
        self.flash.set(request, response, kind, text)
        return response

    async def _on_job(self, request: Request, refused: str, act: Callable[[int], str]) -> Response:
        """Run one action on the job in the path; back to its page saying what happened."""
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        job_id = request.path_params["job_id"]  # 1-18 digits (IdConvertor): within every database's ids
        back = request.url_for("job", job_id=job_id).path
        try:
            done = await run_in_threadpool(act, job_id)
        except (JobNotFound, InvalidTransition) as error:
            return self._redirect(request, back, "error", f"{refused}: {error}")
        return self._redirect(request, back, "ok", done)

    async def retry(self, request: Request) -> Response:
        def retry(job_id: int) -> str:
            job = self.leased.retry(job_id)
            return f"Job {job.id} ({job.task_name}) is pending again and will run as soon as a worker is free."

        return await self._on_job(request, "Not retried", retry)

    async def cancel(self, request: Request) -> Response:
        def cancel(job_id: int) -> str:
            was_running = self.leased.get_job(job_id).status == JobStatus.RUNNING
            job = self.leased.cancel(job_id)
            stopping = " Its worker will stop the handler." if was_running else ""
            return f"Job {job.id} ({job.task_name}) is cancelled.{stopping}"

        return await self._on_job(request, "Not cancelled", cancel)

    async def signal(self, request: Request) -> Response:
        """The job page's form: a signal name, and its payload as JSON (empty: none)."""
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        job_id = request.path_params["job_id"]
        back = request.url_for("job", job_id=job_id).path
        name, text = str(form.get("name") or "").strip(), str(form.get("payload") or "").strip()
        try:
            payload = json.loads(text) if text else None
        except ValueError as error:
            return self._redirect(request, back, "error", f"Not sent: the payload is not JSON ({error}); "
                                                          "write it as JSON, e.g. {\"by\": \"ann\"}, or leave it empty")
        try:
            sent = await run_in_threadpool(self.leased.signal, job_id, name, payload)
        except (JobNotFound, InvalidTransition, ConfigurationError, PayloadError) as error:
            return self._redirect(request, back, "error", f"Not sent: {error}")
        return self._redirect(request, back, "ok", f"Signal {sent.name!r} is in job {job_id}'s mailbox; a job "
                                                   "waiting for it wakes now.")

    async def _on_workflow(self, request: Request, refused: str, act: Callable[[int], str]) -> Response:
        """Run one action on the workflow in the path; back to its page saying what happened."""
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        workflow_id = request.path_params["workflow_id"]
        back = request.url_for("workflow", workflow_id=workflow_id).path
        try:
            done = await run_in_threadpool(act, workflow_id)
        except WorkflowNotFound as error:
            return self._redirect(request, request.url_for("workflows").path, "error", f"{refused}: {error}")
        except InvalidTransition as error:
            return self._redirect(request, back, "error", f"{refused}: {error}")
        return self._redirect(request, back, "ok", done)

    async def retry_workflow(self, request: Request) -> Response:
        def retry(workflow_id: int) -> str:
            count = self.leased.retry_workflow(workflow_id)
            if not count:
                return f"Workflow {workflow_id} has no failed steps to retry."
            steps = "step is" if count == 1 else "steps are"
            return (f"{count:,} failed {steps} pending again in workflow {workflow_id}; the steps their failure "
                    f"cancelled wait for them again.")

        return await self._on_workflow(request, "Not retried", retry)

    async def cancel_workflow(self, request: Request) -> Response:
        def cancel(workflow_id: int) -> str:
            count = self.leased.cancel_workflow(workflow_id)
            if not count:
                return f"Workflow {workflow_id} had no unfinished steps: nothing cancelled."
            steps = "step" if count == 1 else "steps"
            return (f"{count:,} unfinished {steps} of workflow {workflow_id} cancelled (any running ones: their "
                    f"workers stop the handlers).")

        return await self._on_workflow(request, "Not cancelled", cancel)

    async def retry_failed(self, request: Request) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        task = (form.get("task") or "").strip() or None
        queue = (form.get("queue") or "").strip() or None
        back = request.url_for("jobs").path + JobsQuery(task=task, queue=queue).link()
        if task is None:
            return self._redirect(request, back, "error", "Choose a task first: retry-all works one task at a time.")
        try:
            count = await run_in_threadpool(self.leased.retry_failed, task_name=task, queue_name=queue)
        except ConfigurationError as error:
            return self._redirect(request, back, "error", f"Nothing retried: {error}")
        where = f"task {task}" + (f" on queue {queue}" if queue else "")
        if count == 0:
            return self._redirect(request, back, "ok", f"No failed jobs of {where} to retry.")
        plural = "job" if count == 1 else "jobs"
        return self._redirect(request, back, "ok", f"{count:,} failed {plural} of {where} sent back to pending.")

    # Pausing queues.
    async def pause_queue(self, request: Request) -> Response:
        return await self._on_queue(request, pause=True)

    async def resume_queue(self, request: Request) -> Response:
        return await self._on_queue(request, pause=False)

    async def _on_queue(self, request: Request, *, pause: bool) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        queue = request.path_params["queue_name"]
        back = request.url_for("overview").path
        act = self.leased.pause if pause else self.leased.resume
        try:
            changed = await run_in_threadpool(act, queue)
        except ConfigurationError as error:
            return self._redirect(request, back, "error", f"Not {'paused' if pause else 'resumed'}: {error}")
        if pause:
            text = (f"Queue {queue} is paused: no worker claims its jobs; running ones finish." if changed
                    else f"Queue {queue} was paused already.")
        else:
            text = f"Queue {queue} runs again." if changed else f"Queue {queue} was not paused."
        return self._redirect(request, back, "ok", text)
