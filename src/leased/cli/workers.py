"""`leased workers`: the workers' rows, live ones first, and a warning for each task name that live
workers register with different signatures (two apps on one database, leased.task_signatures)."""

from __future__ import annotations

import dataclasses

import click

from leased.admin import WorkerInfo
from leased.cli import output
from leased.cli.loading import open_app
from leased.cli.options import database_option
from leased.task_signatures import signature_clashes


@click.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@database_option
@click.option("--json", "as_json", is_flag=True, help="Print the workers as a JSON array.")
@click.pass_context
def workers(ctx: click.Context, app_spec: str | None, database: str | None, as_json: bool) -> None:
    """List the workers, live and recently gone: host, pid, jobs running, queues, tasks, last seen.

    Warns (on stderr) of a task name that live workers register with different signatures: two
    apps on one database, taking each other's jobs. `leased jobs --worker ID` lists a worker's jobs.
    """
    found = sorted(open_app(ctx, app_spec, database).workers(), key=lambda worker: not worker.alive)
    if as_json:
        output.echo(output.to_json([dataclasses.asdict(worker) for worker in found]))
    elif not found:
        output.echo("no workers: none has checked in within a day")
    else:
        output.echo(workers_table(found))
    for clash in signature_clashes(found):
        output.echo(f"warning: {clash}", err=True)


def workers_table(found: list[WorkerInfo]) -> str:
    rows = [(worker.id, "alive" if worker.alive else "gone", worker.host, worker.pid,
             f"{worker.running}/{worker.concurrency}", ",".join(worker.queues) if worker.queues else "all",
             output.local_time(worker.started_at), output.local_time(worker.last_seen_at), ", ".join(worker.tasks))
            for worker in found]
    return output.table(["ID", "STATUS", "HOST", "PID", "RUNNING", "QUEUES", "STARTED", "LAST SEEN", "TASKS"], rows,
                        right=[3], shrink=8, width=output.terminal_width())
