"""The `leased` command: run a worker, enqueue and inspect jobs, apply the schema, try the demo.

Every mistake a user can make here (a wrong APP path, bad JSON, an unknown job, an unreachable
database) ends as one `error: ...` line on stderr and exit status 1; click's own usage errors exit
with 2. A traceback means a bug in leased or in the user's handlers, never a typo.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, Sequence

import click
from click.core import ParameterSource

from leased.cli import operations, output
from leased.cli.loading import Failure, load_existing_app, open_app
from leased.cli.options import ByteSize, Duration, Id, ProcessCount, database_option
from leased.cli.supervisor import CANNOT_START, Supervisor
from leased.app import Leased
from leased.backends.urls import redacted
from leased.backends.worker_calls import worker_calls
from leased.digits import whole_number
from leased.errors import LeasedError
from leased.terminal import printable
from leased.events import AttemptEnded, Event
from leased.jobs import DurableStep, Job, JobStatus, Outcome
from leased.logs import JsonFormatter
from leased.tracing import trace_id
from leased.suggest import did_you_mean
from leased.worker_ids import SUPERVISOR_VARIABLE


class LeasedGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order defined below: a tour, not the alphabet

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise _escaped(error) from None

    def invoke(self, ctx: click.Context) -> Any:
        # LeasedError messages are written for users (they name the problem and the fix), so every
        # command can let them propagate and they still end as one line.
        try:
            return super().invoke(ctx)
        except LeasedError as error:
            raise Failure(output.one_line(str(error))) from None
        except click.UsageError as error:  # a command's arguments, which click parses here
            raise _escaped(error) from None


def _escaped(error: click.UsageError) -> click.UsageError:
    """click's own usage errors quote what was typed, some with repr() and some (extra arguments)
    as typed: a control character in an argument reached the terminal. Written out, as leased's own
    messages write them (leased.terminal)."""
    error.message = printable(error.message)
    return error


def job_target(values: tuple[str, ...], noun: str = "job") -> tuple[str | None, int]:
    """[APP] JOB_ID: APP is optional before the id, so the arguments are split by count."""
    placeholder = f"{noun.upper()}_ID"
    if not values or len(values) > 2:
        raise click.UsageError(f"expected [APP] {placeholder}, got {len(values)} arguments")
    app_spec, raw = (None, values[0]) if len(values) == 1 else values
    if app_spec is None and ":" in raw:
        raise click.UsageError(f"missing {placeholder}")
    number = whole_number(raw)
    if number is None and raw.isascii() and raw.isdigit():  # more digits than any id has
        raise Failure(f"no {noun} with id {raw[:40]}{'...' if len(raw) > 40 else ''}")
    if number is None:
        raise Failure(f"a {noun} id is a whole number, got {raw[:40]!r}")
    return app_spec, number


JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
              type(None): "null"}


def parse_json(text: str, what: str, kind: type, example: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise Failure(f"{what} is not valid JSON ({error}); expected {example}") from None
    if not isinstance(value, kind):
        raise Failure(f"{what} must be {example}, got a JSON {JSON_TYPES.get(type(value), type(value).__name__)}")
    return value


# Commands.
@click.group(cls=LeasedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="leased", prog_name="leased")
def cli() -> None:
    """Durable background jobs in your database.

    APP names your Leased instance as module:attribute (e.g. myproject.jobs:app), imported with the
    current directory first on the path. Start with `leased demo`.
    """


@cli.command()
@click.option("--database", metavar="URL", help="Instead of a fresh ./leased-demo.db (must not be in use).")
@click.option("--jobs", "job_count", type=click.IntRange(1, 1000), default=40, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--seed", type=int, help="Replay the same failures (default: random).")
@click.option("--dashboard", "dashboard_port", type=click.IntRange(0, 65535), is_flag=False, flag_value=8080,
              default=None, metavar="[PORT]",
              help="Afterwards, serve the dashboard (default port 8080) with a worker, until Ctrl-C.")
def demo(database: str | None, job_count: int, concurrency: int, seed: int | None,
         dashboard_port: int | None) -> None:
    """Watch a worker run sample jobs: start here.

    A burst of sample jobs, some failing and retrying, on a fresh ./leased-demo.db.
    """
    from leased.cli.demo import run_demo  # its sample tasks are registered only when asked for

    sys.exit(run_demo(database, job_count=job_count, concurrency=concurrency, seed=seed,
                      dashboard_port=dashboard_port))


@cli.command()
@click.argument("app_spec", metavar="APP")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Jobs run at once.")
@click.option("--queues", metavar="A,B", help="Only these queues, comma-separated (default: all).")
@click.option("--poll-interval", type=Duration(positive=True), default="1s", show_default=True,
              help="How often to look for due jobs when idle (e.g. 500ms, 2s).")
@click.option("--shutdown-grace", type=Duration(), default="30s", show_default=True,
              help="On SIGINT/SIGTERM, how long running jobs may finish before they are released.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"], case_sensitive=False), default="text",
              show_default=True, help="json: one object per line, with the job's id, task, queue, attempt, "
                                      "worker id and outcome as fields (and the trace's ids when traced).")
@click.option("--metrics-port", type=click.IntRange(1, 65535), metavar="PORT",
              help="Serve this worker's Prometheus metrics on 127.0.0.1:PORT/metrics (needs leased[web]).")
@click.option("--no-push", is_flag=True,
              help="Poll only: no LISTEN/NOTIFY wake-ups (behind PgBouncer without a listen_url= in the URL, "
                   "the worker polls anyway).")
@click.option("--no-prune", is_flag=True, help="Delete no finished jobs (when `leased prune` runs from cron).")
@click.option("--log-jobs", is_flag=True,
              help="Log a line at INFO for every attempt that ends (failures are logged anyway).")
@click.option("--processes", type=ProcessCount(), default="1", show_default=True, metavar="N|auto",
              help="Worker processes, each with these options, under a supervisor that restarts one that "
                   "dies: for CPU-bound handlers (auto: one per core). With --metrics-port, process n "
                   "serves on PORT+n-1.")
@click.option("--max-tasks-per-child", type=click.IntRange(min=1), metavar="N",
              help="Retire a process-isolated task's child process after N jobs (default: never).")
@click.option("--max-memory-per-child", type=ByteSize(), metavar="SIZE",
              help="Retire such a child, between jobs, once its RSS passes SIZE (e.g. 512MB).")
def worker(app_spec: str, concurrency: int, queues: str | None, poll_interval: float, shutdown_grace: float,
           log_level: str, log_format: str, metrics_port: int | None, no_push: bool, no_prune: bool,
           log_jobs: bool, processes: int, max_tasks_per_child: int | None, max_memory_per_child: int | None) -> None:
    """Run jobs until SIGINT or SIGTERM.

    On the first signal no new jobs are claimed and running ones may finish within the grace
    period; a second signal cancels them and gives them back at once.
    """
    configure_logging(log_level, log_format)
    if processes > 1:
        if metrics_port is not None and metrics_port + processes - 1 > 65535:
            raise click.BadParameter(f"{processes} processes need ports {metrics_port} to "
                                     f"{metrics_port + processes - 1}; choose a lower one", param_hint="'--metrics-port'")
        arguments = [app_spec, "--concurrency", str(concurrency), "--poll-interval", f"{poll_interval!r}s",
                     "--shutdown-grace", f"{shutdown_grace!r}s", "--log-level", log_level,
                     "--log-format", log_format]
        arguments += ["--queues", queues] if queues else []
        arguments += ["--max-tasks-per-child", str(max_tasks_per_child)] if max_tasks_per_child else []
        arguments += ["--max-memory-per-child", str(max_memory_per_child)] if max_memory_per_child else []
        arguments += [flag for flag, on in (("--no-push", no_push), ("--no-prune", no_prune),
                                            ("--log-jobs", log_jobs)) if on]
        sys.exit(Supervisor(arguments, processes, metrics_port).run())
    try:
        # The process is the worker's: what it reads and writes before the worker starts (the schema,
        # at the first call) shares the worker's own connection (leased.backends.worker_calls).
        with worker_calls():
            run_worker(app_spec, concurrency, queues, poll_interval, shutdown_grace, metrics_port, no_push,
                       no_prune, log_jobs, max_tasks_per_child, max_memory_per_child)
    except (Failure, LeasedError) as error:
        if not os.environ.get(SUPERVISOR_VARIABLE):
            raise
        # A process of a supervisor: the same command would fail alike, so it says not to restart it.
        failure = error if isinstance(error, Failure) else Failure(output.one_line(str(error)))
        failure.exit_code = CANNOT_START
        raise failure from None


@cli.command("bury-worker", hidden=True)
@click.argument("app_spec", metavar="APP")
@click.argument("worker_id_prefix")
@click.argument("how")
def bury_worker(app_spec: str, worker_id_prefix: str, how: str) -> None:
    """For the --processes supervisor: the worker whose id starts WORKER_ID_PREFIX died (HOW); end
    its attempts now, as crashed, rather than a lease later."""
    configure_logging("info")
    app = load_existing_app(app_spec)
    try:
        ended = app.backend.bury_workers(worker_id_prefix, how)
    finally:
        app.close()
    logging.getLogger("leased.supervisor").info("worker %s… %s: ended its %d running attempt%s as crashed",
                                                worker_id_prefix, how, ended, "" if ended == 1 else "s")


def run_worker(app_spec: str, concurrency: int, queues: str | None, poll_interval: float, shutdown_grace: float,
               metrics_port: int | None, no_push: bool, no_prune: bool, log_jobs: bool,
               max_tasks_per_child: int | None = None, max_memory_per_child: int | None = None) -> None:
    app = load_existing_app(app_spec)
    queue_names = [name.strip() for name in queues.split(",") if name.strip()] if queues else None
    warn_about_unknown_queues(app, queue_names)
    if log_jobs:
        app.events.subscribe(log_attempt_end)
    if metrics_port is not None:
        try:
            from leased.metrics import serve_worker_metrics
        except ImportError:
            raise Failure("--metrics-port needs prometheus_client: pip install 'leased[web]'") from None
        try:
            serve_worker_metrics(app, metrics_port)
        except OSError as error:
            raise Failure(f"cannot serve metrics on port {metrics_port}: {error.strerror}") from None
        logging.getLogger("leased.worker").info("metrics on http://127.0.0.1:%d/metrics", metrics_port)
    try:
        app.worker(concurrency=concurrency, queues=queue_names, poll_interval=poll_interval,
                   shutdown_grace=shutdown_grace, push=not no_push, prune=not no_prune,
                   max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child).run()
    finally:
        app.close()


def log_attempt_end(event: Event) -> None:
    """--log-jobs: a line per attempt. Off by default: at 10,000 jobs a second a line each would cost
    more than the job, and a log nobody reads. Failures and timeouts are logged anyway, at WARNING
    or ERROR by the worker, so only the other ends are logged here."""
    log = logging.getLogger("leased.worker")
    if (isinstance(event, AttemptEnded) and event.outcome not in (Outcome.ERROR, Outcome.TIMEOUT, Outcome.CRASHED)
            and log.isEnabledFor(logging.INFO)):
        log.info("job %d (%s) attempt %d: %s in %s", event.job_id, event.task_name, event.attempt, event.outcome,
                 output.format_duration(event.seconds),
                 extra={"leased": {"job_id": event.job_id, "task": event.task_name, "queue": event.queue_name,
                                   "attempt": event.attempt, "worker_id": event.worker_id,
                                   "outcome": str(event.outcome), "duration_seconds": event.seconds}})


def warn_about_unknown_queues(app: Leased, queue_names: list[str] | None) -> None:
    """A typo in --queues would leave the worker idle without a word: name what was never seen."""
    known = app.known_queue_names() if queue_names else set()
    for name in queue_names or []:
        if name not in known:
            logging.getLogger("leased.worker").warning(
                "queue %r has no jobs and no task of this app uses it (a typo?); known queues: %s", name,
                ", ".join(sorted(known)) or "none")


def warn_about_new_queue(app: Leased, queue_name: str) -> None:
    """`enqueue --queue mial` would file the job where no worker looks, without a word: say so
    (the job is still enqueued: a new queue may be meant), as `leased worker --queues` does."""
    known = app.known_queue_names() | {queue for worker in app.workers() if worker.alive
                                       for queue in worker.queues or ()}
    if queue_name not in known:
        output.echo(f"warning: queue {queue_name!r}{did_you_mean(queue_name, known)} is new: no task, schedule, "
                   f"worker or job of this app uses it (known queues: {', '.join(sorted(known)) or 'none'}); "
                   "the job waits there until a worker serves it", err=True)


class PrintableFormatter(logging.Formatter):
    """Log lines carry handlers' error messages (and tracebacks): escaped as the commands' output is."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def configure_logging(level: str, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format.lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PrintableFormatter("%(asctime)s.%(msecs)03d %(levelname)-7s %(message)s",
                                                datefmt="%Y-%m-%d %H:%M:%S"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # The connection pool narrates every connection at INFO; its warnings are what a reader needs.
    logging.getLogger("psycopg").setLevel(max(logging.getLogger().level, logging.WARNING))


@cli.command()
@click.argument("app_spec", metavar="APP")
@click.argument("task_name", metavar="TASK")
@click.argument("args_json", required=False, default="[]")
@click.option("--kwargs", "kwargs_json", metavar="JSON", default="{}", help="Keyword arguments, a JSON object.")
@click.option("--delay", type=Duration(), help="Run no sooner than this from now (e.g. 250ms, 10s, 5m, 2h, 1d).")
@click.option("--idempotency-key", metavar="KEY", help="While a job with this key waits, enqueue returns it.")
@click.option("--queue", "queue_name", metavar="QUEUE", help="Instead of the task's queue.")
@click.option("--priority", type=int, help="Instead of the task's priority; higher runs first.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.pass_context
def enqueue(ctx: click.Context, app_spec: str, task_name: str, args_json: str, kwargs_json: str,
            delay: float | None, idempotency_key: str | None, queue_name: str | None, priority: int | None,
            as_json: bool) -> None:
    """Enqueue a job for TASK.

    ARGS_JSON is a JSON array of positional arguments, e.g. '[42, "ada@example.com"]'.
    """
    args = parse_json(args_json, "ARGS_JSON", list, "a JSON array of positional arguments, e.g. '[1, \"two\"]'")
    kwargs = parse_json(kwargs_json, "--kwargs", dict, "a JSON object of keyword arguments, e.g. '{\"to\": \"ada\"}'")
    app = load_existing_app(app_spec)
    ctx.call_on_close(app.close)
    options: dict[str, Any] = {}
    if delay is not None:
        options["run_after"] = timedelta(seconds=delay)
    if idempotency_key is not None:
        options["idempotency_key"] = idempotency_key
    if queue_name is not None:
        options["queue_name"] = queue_name
    if priority is not None:
        options["priority"] = priority
    task = app.get_task(task_name)
    if queue_name is not None:
        warn_about_new_queue(app, queue_name)
    job = task.using(**options).enqueue(*args, **kwargs)
    if as_json:
        output.echo(output.to_json(output.job_to_dict(job)))
        return
    if not job.created:
        output.echo(f"job {job.id} already {job.status} with idempotency key {job.idempotency_key} "
                   "(not enqueued again)")
        return
    wait = job.run_after - datetime.now(UTC)
    when = "now" if wait.total_seconds() < 1 else f"in {output.format_duration(wait)}"
    output.echo(f"job {job.id} {job.status}: {job.task_name} on queue {job.queue_name}, "
               f"runs {when} ({output.local_time(job.run_after)})")


@cli.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--status", type=click.Choice([status.value for status in JobStatus]))
@click.option("--queue", "queue_name", metavar="QUEUE")
@click.option("--task", "task_name", metavar="TASK")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--before-id", type=Id(), metavar="ID", help="Next page: jobs older than ID (the last id shown).")
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as a JSON array.")
@click.pass_context
def jobs(ctx: click.Context, app_spec: str | None, database: str | None, status: str | None,
         queue_name: str | None, task_name: str | None, limit: int, before_id: int | None, as_json: bool) -> None:
    """List jobs, newest first."""
    app = open_app(ctx, app_spec, database)
    found = app.list_jobs(status=status, queue_name=queue_name, task_name=task_name, limit=limit,
                          before_id=before_id)
    if as_json:
        output.echo(output.to_json([output.job_to_dict(job) for job in found]))
        if not found and (unknown := unknown_filters(app, task_name, queue_name)):
            output.echo(f"no jobs match: {unknown}", err=True)  # stdout stays the JSON a script reads
        return
    if not found:
        unknown = unknown_filters(app, task_name, queue_name)
        output.echo("no jobs" + (" match" if status or queue_name or task_name or before_id else "")
                   + (f": {unknown}" if unknown else ""))
        return
    output.echo(output.jobs_table(found))
    if len(found) == limit:
        output.echo(f"(first {limit}; next page: --before-id {found[-1].id})", err=True)


def unknown_filters(app: Leased, task_name: str | None, queue_name: str | None) -> str:
    """When nothing matched: a --task or --queue that nothing is named, most likely a typo."""
    notes = []
    if task_name is not None:
        known = set(app.task_names()) | set(app.tasks)
        if task_name not in known:
            notes.append(f"unknown task {task_name!r}{did_you_mean(task_name, known)}")
    if queue_name is not None:
        known = app.known_queue_names()
        if queue_name not in known:
            notes.append(f"unknown queue {queue_name!r}{did_you_mean(queue_name, known)}")
    return "; ".join(notes)


@cli.command()
@click.argument("target", nargs=-1, required=True, metavar="[APP] JOB_ID")
@database_option
@click.option("--json", "as_json", is_flag=True, help="Print the job and its attempts as JSON.")
@click.pass_context
def show(ctx: click.Context, target: tuple[str, ...], database: str | None, as_json: bool) -> None:
    """Show one job: its fields, arguments, result and every attempt."""
    app_spec, job_id = job_target(target)
    app = open_app(ctx, app_spec, database)
    job, steps = app.get_job(job_id), app.job_steps(job_id)
    if as_json:
        output.echo(output.to_json({**output.job_to_dict(job), "steps": [dataclasses.asdict(step) for step in steps]}))
        return
    output.echo(describe_job(job, steps))


def attempts_used(job: Job) -> str:
    """'2 of 3'; with the releases at shutdown named, since a release is counted but never fails
    the job, so the count can pass the budget ('4 of 3' alone reads as a bug)."""
    released = sum(1 for attempt in job.history if attempt.outcome == Outcome.SHUTDOWN)
    if not released:
        return f"{job.attempt} of {job.max_attempts}"
    return (f"{job.attempt} of {job.max_attempts}, {released} of them released at shutdown "
            "(counted, but a release never fails the job)")


def describe_job(job: Job, steps: Sequence[DurableStep] = ()) -> str:
    fields = [
        ("status", str(job.status)),
        ("queue", job.queue_name),
        ("priority", str(job.priority)),
        ("attempt", attempts_used(job)),
        ("time limit", "none" if job.timeout_seconds is None
         else f"{output.format_duration(job.timeout_seconds)} per attempt"),
        ("created", output.local_time(job.created_at)),
        ("run after", output.local_time(job.run_after)),
        ("finished", output.local_time(job.finished_at)),
    ]
    if job.isolation is not None:
        fields.append(("isolation", f"{job.isolation} (chosen at enqueue)"))
    if job.progress is not None:
        fields.append(("progress", output.progress_text(job)))
    if job.lease_owner:
        fields.append(("leased by", f"{job.lease_owner} until {output.local_time(job.lease_expires_at)} "
                                    f"(lease {output.format_duration(job.lease_seconds)})"))
    if job.idempotency_key:
        fields.append(("idempotency key", job.idempotency_key))
    if job.fairness_key:
        fields.append(("fairness key", job.fairness_key))
    if (trace := trace_id(job.trace_context)) is not None:  # its enqueue's, which its first attempt continues
        fields.append(("trace", trace))
    if job.explaining_error:
        fields.append(("last error", job.explaining_error))
    fields += [("args", output.readable_json(job.args)), ("kwargs", output.readable_json(job.kwargs))]
    if job.status == JobStatus.DONE:
        fields.append(("result", output.readable_json(job.result)))
    parts = [f"job {job.id}  {job.task_name}", output.labelled(fields)]
    if not job.history:
        parts.append("\nno attempts yet")
        return "\n".join(parts)
    with_progress = any(attempt.progress is not None for attempt in job.history)
    rows = [(attempt.number, attempt.worker_id, output.local_time(attempt.started_at),
             output.format_duration(attempt.duration), attempt.outcome or "running",
             *((str(attempt.progress or output.NONE),) if with_progress else ()),
             output.one_line(f"{attempt.error_type}: {attempt.error_message}" if attempt.error_type
                             else attempt.error_message))
            for attempt in job.history]
    headers = ["#", "WORKER", "STARTED", "DURATION", "OUTCOME", *(["PROGRESS"] if with_progress else []), "ERROR"]
    parts += ["", "attempts", output.table(headers, rows, right=[0, 3], shrink=len(headers) - 1,
                                           width=output.terminal_width(), indent="  ")]
    if steps:  # durable steps (TaskContext.step): what a next attempt gets without running them again
        step_rows = [(step.name, step.attempt, output.local_time(step.finished_at),
                      output.format_duration(step.finished_at - step.started_at),
                      output.one_line(output.readable_json(step.result))) for step in steps]
        parts += ["", "steps recorded", output.table(["STEP", "ATTEMPT", "FINISHED", "TOOK", "RESULT"], step_rows,
                                                     right=[1, 3], shrink=4, width=output.terminal_width(),
                                                     indent="  ")]
    # Earlier tracebacks are usually the same story; the last failure's is the one to read.
    # A timed-out sync handler's is where its thread was at the limit: where it hung.
    failed = [attempt for attempt in job.history
              if attempt.outcome in (Outcome.ERROR, Outcome.TIMEOUT) and attempt.traceback]
    if failed:
        parts += ["", f"traceback of attempt {failed[-1].number}",
                  "\n".join("  " + line for line in failed[-1].traceback.rstrip().splitlines())]
    return "\n".join(parts)


@cli.command()
@click.argument("target", nargs=-1, required=True, metavar="[APP] JOB_ID")
@database_option
@click.option("--json", "as_json", is_flag=True, help="Print the reasons as JSON: code, message and data of each.")
@click.pass_context
def why(ctx: click.Context, target: tuple[str, ...], database: str | None, as_json: bool) -> None:
    """Say why a job is waiting, running, failed, done or cancelled, and what would change it."""
    app_spec, job_id = job_target(target)
    explicit_database = ctx.get_parameter_source("database") is not ParameterSource.ENVIRONMENT
    explanation = open_app(ctx, app_spec, database).why(job_id).naming_app(
        app_spec, shlex.join(["--database", redacted(database)]) if database and explicit_database else None)
    if as_json:
        output.echo(output.to_json(dataclasses.asdict(explanation)))
        return
    output.echo(explanation.text)


@cli.command()
@click.argument("target", nargs=-1, metavar="[APP] JOB_ID | [APP] --failed")
@database_option
@click.option("--failed", "every_failed", is_flag=True, help="Every failed job (of --task, --queue) instead of one.")
@click.option("--task", "task_name", metavar="TASK", help="With --failed: only this task's jobs.")
@click.option("--queue", "queue_name", metavar="QUEUE", help="With --failed: only this queue's jobs.")
@click.option("--yes", "-y", is_flag=True, help="With --failed: do not ask for confirmation.")
@click.pass_context
def retry(ctx: click.Context, target: tuple[str, ...], database: str | None, every_failed: bool,
          task_name: str | None, queue_name: str | None, yes: bool) -> None:
    """Send a failed or cancelled job back to pending, to run now; or with --failed, every failed job."""
    if every_failed:
        app = open_app(ctx, bulk_target(target, "--failed"), database)
        if confirmed_bulk(app, "retry", JobStatus.FAILED, task_name, queue_name, yes):
            count = app.retry_failed(task_name=task_name, queue_name=queue_name)
            output.echo(f"{output.plural(count, 'failed job')}{bulk_scope(task_name, queue_name)} pending again, "
                       "to run now")
        return
    reject_bulk_filters("--failed", task_name, queue_name, yes)
    app_spec, job_id = job_target(target)
    job = open_app(ctx, app_spec, database).retry(job_id)
    output.echo(f"job {job.id} ({job.task_name}) is {job.status} again: up to {job.max_attempts - job.attempt} "
               f"more attempt(s), from now")


@cli.command()
@click.argument("target", nargs=-1, metavar="[APP] JOB_ID | [APP] --pending")
@database_option
@click.option("--pending", "every_pending", is_flag=True,
              help="Every pending job (of --task, --queue) instead of one; running jobs go on.")
@click.option("--task", "task_name", metavar="TASK", help="With --pending: only this task's jobs.")
@click.option("--queue", "queue_name", metavar="QUEUE", help="With --pending: only this queue's jobs.")
@click.option("--yes", "-y", is_flag=True, help="With --pending: do not ask for confirmation.")
@click.pass_context
def cancel(ctx: click.Context, target: tuple[str, ...], database: str | None, every_pending: bool,
           task_name: str | None, queue_name: str | None, yes: bool) -> None:
    """Cancel a pending or running job; or with --pending, every pending job.

    A running job's worker loses its lease and stops the handler.
    """
    if every_pending:
        app = open_app(ctx, bulk_target(target, "--pending"), database)
        if confirmed_bulk(app, "cancel", JobStatus.PENDING, task_name, queue_name, yes):
            count = app.cancel_pending(task_name=task_name, queue_name=queue_name)
            output.echo(f"{output.plural(count, 'pending job')}{bulk_scope(task_name, queue_name)} cancelled")
        return
    reject_bulk_filters("--pending", task_name, queue_name, yes)
    app_spec, job_id = job_target(target)
    app = open_app(ctx, app_spec, database)
    was_running = app.get_job(job_id).status == JobStatus.RUNNING  # only for the message; a race is harmless
    job = app.cancel(job_id)
    output.echo(f"job {job.id} ({job.task_name}) cancelled" + ("; its worker will stop the handler" if was_running
                                                              else ""))


# Bulk retry and cancel: which jobs, and the question before touching them.
def bulk_target(values: tuple[str, ...], flag: str) -> str | None:
    """[APP] alone: a bulk action takes no JOB_ID."""
    if len(values) > 1 or (values and ":" not in values[0]):
        raise click.UsageError(f"{flag} acts on many jobs: give [APP] and --task/--queue, not a JOB_ID")
    return values[0] if values else None


def reject_bulk_filters(flag: str, task_name: str | None, queue_name: str | None, yes: bool) -> None:
    if task_name or queue_name or yes:
        raise click.UsageError(f"--task, --queue and --yes go with {flag}; for one job give only its JOB_ID")


def bulk_scope(task_name: str | None, queue_name: str | None) -> str:
    scope = [f"task {task_name}" if task_name else "", f"queue {queue_name}" if queue_name else ""]
    return f" ({', '.join(part for part in scope if part)})" if task_name or queue_name else ""


def confirmed_bulk(app: Leased, verb: str, status: JobStatus, task_name: str | None, queue_name: str | None,
                   yes: bool) -> bool:
    """Count the jobs and ask (unless --yes); False when there is nothing to do or the answer is no."""
    count = app.count_jobs(status=status, task_name=task_name, queue_name=queue_name)
    what = f"{output.plural(count, f'{status} job')}{bulk_scope(task_name, queue_name)}"
    if count == 0:
        output.echo(f"no {status} jobs{bulk_scope(task_name, queue_name)}: nothing to {verb}"
                   + (f"; {unknown}" if (unknown := unknown_filters(app, task_name, queue_name)) else ""))
        return False
    if yes:
        return True
    if not sys.stdin.isatty():
        raise Failure(f"refusing to {verb} {what} without confirmation: stdin is not a terminal; add --yes")
    if click.confirm(f"{verb} {what}?", default=False):
        return True
    output.echo("nothing changed")
    return False


# Workflows: runs of steps that wait for each other (leased.workflows).
@cli.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--name", metavar="NAME", help="Only the runs of workflows of this name.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--before-id", type=Id(), metavar="ID", help="Next page: runs older than ID (the last id shown).")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as a JSON array.")
@click.pass_context
def workflows(ctx: click.Context, app_spec: str | None, database: str | None, name: str | None, limit: int,
              before_id: int | None, as_json: bool) -> None:
    """List workflow runs, newest first, with their status and progress."""
    found = open_app(ctx, app_spec, database).list_workflows(limit=limit, before_id=before_id, name=name)
    if as_json:
        output.echo(output.to_json([output.workflow_to_dict(info) for info in found]))
        return
    if not found:
        output.echo("no workflows" + (" match" if name or before_id else ""))
        return
    output.echo(output.workflows_table(found))
    if len(found) == limit:
        output.echo(f"(first {limit}; next page: --before-id {found[-1].id})", err=True)


@cli.command()
@click.argument("target", nargs=-1, required=True, metavar="[APP] WORKFLOW_ID")
@database_option
@click.option("--retry", "retry_run", is_flag=True,
              help="Retry the run's failed steps; the steps their failure cancelled wait again.")
@click.option("--cancel", "cancel_run", is_flag=True,
              help="Cancel every unfinished step of the run (running ones: their workers stop the handlers).")
@click.option("--json", "as_json", is_flag=True, help="Print the run and its steps as JSON.")
@click.pass_context
def workflow(ctx: click.Context, target: tuple[str, ...], database: str | None, retry_run: bool, cancel_run: bool,
             as_json: bool) -> None:
    """Show one workflow run: its status, progress and every step as a tree by dependency.

    With --retry or --cancel, act on the run first, then say what changed.
    """
    if retry_run and cancel_run:
        raise click.UsageError("give --retry or --cancel, not both")
    app_spec, workflow_id = job_target(target, "workflow")
    app = open_app(ctx, app_spec, database)
    if retry_run or cancel_run:
        name = app.get_workflow(workflow_id).name  # for the message, and a clear error for an unknown id
        if retry_run:
            count = app.retry_workflow(workflow_id)
            done = (f"{output.plural(count, 'failed step')} retried; the steps their failure cancelled wait again"
                    if count else "no failed steps to retry")
        else:
            count = app.cancel_workflow(workflow_id)
            done = f"{output.plural(count, 'step')} cancelled" if count else "nothing to cancel: every step has ended"
        output.echo(f"workflow {workflow_id} ({name}): {done}", err=as_json)
    info = app.get_workflow(workflow_id)
    if as_json:
        output.echo(output.to_json(output.workflow_to_dict(info)))
        return
    if retry_run or cancel_run:
        output.echo(f"now {info.status}: {info.progress}")
        return
    output.echo(describe_workflow(info))


def describe_workflow(info: Any) -> str:
    fields = [("status", str(info.status)),
              ("progress", f"{info.progress}: {output.step_counts(info.counts, info.skipped)}"),
              ("created", output.local_time(info.created_at))]
    if info.idempotency_key:
        fields.append(("idempotency key", info.idempotency_key))
    parts = [f"workflow {info.id}  {info.name}", output.labelled(fields), "", "steps",
             output.steps_table(info.steps, indent="  ")]
    return "\n".join(parts)


@cli.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--sql", "print_sql", is_flag=True,
              help="Print the schema SQL instead of applying it, for your own migration tool.")
@click.pass_context
def migrate(ctx: click.Context, app_spec: str | None, database: str | None, print_sql: bool) -> None:
    """Create or upgrade the jobs schema.

    Leased applies it on first use anyway, unless created with Leased(migrate=False).
    """
    app = open_app(ctx, app_spec, database, migrating=True)
    if print_sql:
        output.echo(app.migration_sql(), nl=False)
        return
    applied = app.migrate()
    if applied:
        output.echo("applied migration" + ("s " if len(applied) > 1 else " ") + ", ".join(f"{v:04d}" for v in applied))
    else:
        output.echo("schema up to date: no migrations to apply")


@cli.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback needs $LEASED_DASHBOARD_TOKEN.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--read-only", is_flag=True, help="No action buttons; every POST is refused.")
@click.option("--allow-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Without a token, answer to this Host name too (e.g. a proxy's); loopback names always work.")
@click.pass_context
def dashboard(ctx: click.Context, app_spec: str | None, database: str | None, host: str, port: int,
              read_only: bool, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the web dashboard: queues, workers, jobs, retry and cancel.

    With $LEASED_DASHBOARD_TOKEN set, the browser asks for it (as the password, any user name).
    Without it, only loopback names (localhost, 127.0.0.1) and --allow-host ones are answered, so
    that no web page can reach the dashboard by pointing its own name at this machine.
    """
    import importlib.util

    from leased.web import MISSING_EXTRA, server
    from leased.web import dashboard as make_dashboard

    if any(importlib.util.find_spec(name) is None for name in ("starlette", "jinja2", "uvicorn")):
        raise Failure(MISSING_EXTRA)
    token = os.environ.get(server.TOKEN_VARIABLE) or None
    if token is None and not server.is_loopback(host):
        raise Failure(f"refusing to serve on {host or 'every interface'} without a token: set "
                      f"{server.TOKEN_VARIABLE} to a long random secret, or listen on 127.0.0.1")
    app = open_app(ctx, app_spec, database)
    # With a token a rebinding page gets nowhere (the browser keeps the password for this origin only).
    asgi_app = make_dashboard(app, read_only=read_only, token=token, command_app=app_spec,
                              allowed_hosts=None if token else server.loopback_hosts(host, allowed_hosts))
    try:
        sock = server.listen(host, port)
    except OSError as error:
        raise Failure(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    notes = [note for note, on in (("read-only", read_only), ("token required", token)) if on]
    output.echo(f"leased dashboard on {server.url(sock)}, serving {app.backend.where}"
                + (f" ({', '.join(notes)})" if notes else "") + "; Ctrl-C stops it")
    with sock:
        server.run(asgi_app, sock)


for command in operations.COMMANDS:  # after the job commands: the tour goes on with the queues
    cli.add_command(command)


def main() -> None:
    cli(prog_name="leased")


if __name__ == "__main__":
    main()
