"""The commands for queues as a whole: counts, pause and resume, limits, fairness, schedules, pruning."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import click

from leased.cli import output
from leased.cli.loading import Failure, open_app
from leased.cli.options import Duration, database_option
from leased.counts import JobCounts
from leased.limits import QueueLimit


@click.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--json", "as_json", is_flag=True, help="Print {queue: {status: count}} as JSON.")
@click.option("--exact", is_flag=True, help="Count every job exactly: reads the whole table, slow on a big one.")
@click.pass_context
def stats(ctx: click.Context, app_spec: str | None, database: str | None, as_json: bool, exact: bool) -> None:
    """Count jobs per queue and status; name the paused queues and show the queues' limits.

    Pending and running are exact; done, and failed or cancelled beyond 10,000 jobs each, are
    estimated from a sample of job ids (marked ≈, and named on stderr with --json) unless --exact.
    """
    app = open_app(ctx, app_spec, database)
    counts = JobCounts(app.counts()) if exact else app.job_counts()
    if as_json:
        output.echo(output.to_json(counts.by_queue))
        if counts.estimated:
            output.echo("estimated: " + ", ".join(sorted(counts.estimated)), err=True)
        return
    output.echo(output.counts_table(counts.by_queue, counts.estimated) if counts.by_queue else "no jobs yet")
    paused = app.backend.paused_queues()
    if paused:
        output.echo("paused: " + ", ".join(f"{queue} (for {output.format_duration(seconds)})"
                                           for queue, seconds in paused.items()))
    limits = app.limits()
    if limits:
        output.echo("\n" + limits_table(limits))


@click.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--json", "as_json", is_flag=True, help="Print the schedules as a JSON array.")
@click.pass_context
def schedules(ctx: click.Context, app_spec: str | None, database: str | None, as_json: bool) -> None:
    """List periodic tasks: schedule, next run, the last tick's job and its status, skipped ticks.

    With APP, also those no worker has seen yet, and which stored ones the code no longer has.
    """
    found = open_app(ctx, app_spec, database).list_schedules()
    if as_json:
        output.echo(output.to_json([dataclasses.asdict(info) for info in found]))
    elif not found:
        output.echo("no schedules" + ("" if app_spec else " stored yet"))
    else:
        output.echo(output.schedules_table(found, datetime.now(UTC)))


# Limits per queue, across all workers.
@click.command()
@click.argument("app_spec", metavar="APP")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--concurrency", type=int, metavar="N", help="At most N of the queue's jobs running at once.")
@click.option("--rate", "rate_limit", metavar="N/UNIT", help="At most N starts per second, minute or hour: 100/m.")
@click.option("--clear", is_flag=True, help="Remove the queue's limits.")
@click.option("--force", is_flag=True, help="Limit a queue that no task or job uses yet.")
@click.pass_context
def limit(ctx: click.Context, app_spec: str, queue_name: str, concurrency: int | None, rate_limit: str | None,
          clear: bool, force: bool) -> None:
    """Set a queue's limits (replacing any before), or --clear them."""
    if clear == (concurrency is not None or rate_limit is not None):
        raise Failure("give --concurrency N and/or --rate N/UNIT, or --clear alone")
    if concurrency is not None and concurrency < 1:  # the library's own message names None, not a flag
        raise Failure(f"invalid --concurrency {concurrency}: use a whole number >= 1 (--clear removes the limits)")
    app = open_app(ctx, app_spec, None)
    if not force:
        app.check_known_queue(queue_name, "limit", force_option="--force")  # as `leased pause`: a typo is named, not stored
    queue_limit = app.limit(queue_name, concurrency=concurrency, rate_limit=rate_limit)
    output.echo(f"queue {queue_name}: " + ("no limits" if clear else queue_limit.describe()))


@click.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--json", "as_json", is_flag=True, help="Print {queue: {concurrency, rate_limit}} as JSON.")
@click.pass_context
def limits(ctx: click.Context, app_spec: str | None, database: str | None, as_json: bool) -> None:
    """List the queues' limits."""
    found = open_app(ctx, app_spec, database).limits()
    if as_json:
        output.echo(output.to_json({name: {"concurrency": queue_limit.concurrency,
                                          "rate_limit": queue_limit.rate_limit and str(queue_limit.rate_limit)}
                                   for name, queue_limit in found.items()}))
    else:
        output.echo(limits_table(found) if found else "no queue has a limit")


def limits_table(found: dict[str, QueueLimit]) -> str:
    return output.table(["QUEUE", "CONCURRENCY", "RATE"], [
        (name, "-" if queue_limit.concurrency is None else queue_limit.concurrency,
         "-" if queue_limit.rate_limit is None else queue_limit.rate_limit) for name, queue_limit in found.items()])


# Fairness by key within a queue.
def parse_weight(text: str) -> tuple[str, float]:
    """--weight KEY=N as (KEY, N); the library then checks N > 0 and KEY as any fairness key."""
    key, equals, weight = text.rpartition("=")
    try:
        if equals and key:
            return key, float(weight)
    except ValueError:
        pass
    raise Failure(f"invalid --weight {text!r}: write KEY=N with N a number > 0, e.g. --weight tenant-42=3")


@click.command()
@click.argument("app_spec", metavar="APP")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--weight", "weights", multiple=True, metavar="KEY=N",
              help="A key's weight (repeat for more keys): weight 3 starts three jobs for each of weight 1.")
@click.option("--default", "default_weight", type=float, metavar="N",
              help="The weight of keys given none (1 unless set).")
@click.option("--keys", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="How many waiting keys to list.")
@click.pass_context
def fairness(ctx: click.Context, app_spec: str, queue_name: str, weights: tuple[str, ...],
             default_weight: float | None, keys: int) -> None:
    """Set fairness weights of QUEUE's keys, and list its waiting keys, next served first."""
    parsed = dict(parse_weight(text) for text in weights)
    app = open_app(ctx, app_spec, None)
    if weights or default_weight is not None:
        current = app.fairness_of(queue_name, keys=keys)
        app.fairness(queue_name, weights=parsed,
                     default=current.default_weight if default_weight is None else default_weight)
    found = app.fairness_of(queue_name, keys=keys)
    listed = ", ".join(f"{key}={weight:g}" for key, weight in sorted(found.weights.items()))
    output.echo(f"queue {queue_name}: default weight {found.default_weight:g}" + (f"; {listed}" if listed else ""))
    if found.waiting_keys:
        output.echo(output.table(["KEY", "WAITING", "WEIGHT", "PASS"], [
            (key.fairness_key, key.waiting, f"{key.weight:g}", f"{key.pass_:.2f}") for key in found.waiting_keys]))
    else:
        output.echo("no key has jobs waiting")


# Pausing queues, and pruning finished jobs.
def queue_target(values: tuple[str, ...]) -> tuple[str | None, str]:
    """[APP] QUEUE: split by count, since a queue name may hold a colon as APP does."""
    if len(values) > 2:
        raise click.UsageError(f"expected [APP] QUEUE, got {len(values)} arguments")
    return (None, values[0]) if len(values) == 1 else (values[0], values[1])


@click.command()
@click.argument("target", nargs=-1, required=True, metavar="[APP] QUEUE")
@database_option
@click.option("--force", is_flag=True, help="Pause a queue that no job has used yet.")
@click.pass_context
def pause(ctx: click.Context, target: tuple[str, ...], database: str | None, force: bool) -> None:
    """Stop workers claiming QUEUE's jobs; running jobs finish and enqueue still works."""
    app_spec, queue = queue_target(target)
    app = open_app(ctx, app_spec, database)
    if not force:  # checked here, to name the command line's --force rather than Python's force=True
        app.check_known_queue(queue, "pause", force_option="--force")
    paused = app.pause(queue, force=True)
    output.echo(f"queue {queue} " + ("paused: workers claim none of its jobs until `leased resume`" if paused
                                    else "was paused already"))


@click.command()
@click.argument("target", nargs=-1, required=True, metavar="[APP] QUEUE")
@database_option
@click.pass_context
def resume(ctx: click.Context, target: tuple[str, ...], database: str | None) -> None:
    """Let workers claim QUEUE's jobs again, at once."""
    app_spec, queue = queue_target(target)
    resumed = open_app(ctx, app_spec, database).resume(queue)
    output.echo(f"queue {queue} " + ("resumed" if resumed else "was not paused"))


@click.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--older-than", type=Duration(positive=True), metavar="DURATION",
              help="Every finished job older than this (e.g. 3d), whatever its status and task; "
                   "default: the app's retention settings.")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.pass_context
def prune(ctx: click.Context, app_spec: str | None, database: str | None, older_than: float | None,
          dry_run: bool) -> None:
    """Delete finished jobs past their retention, with their attempts, for your own cron.

    Give APP (not --database) for the retention your Leased(...) and tasks set.
    """
    app = open_app(ctx, app_spec, database)
    counts = app.prune(older_than=older_than, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    output.echo(f"{verb} " + ", ".join(f"{count:,} {status}" for status, count in counts.items())
               + f" ({sum(counts.values()):,} jobs)")


COMMANDS = [stats, pause, resume, limit, limits, fairness, schedules, prune]
