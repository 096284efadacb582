"""Terminal output: aligned tables, compact local times and durations, JSON for scripts.

Pure functions returning strings, so the commands stay short and the formats are easy to test;
`echo` is the one way they reach the terminal, with what a job holds escaped (leased.terminal).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from datetime import datetime, timedelta
from typing import Any, Collection, Iterable, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from leased.counts import format_count
from leased.durations import format_duration, parse_duration  # noqa: F401  (re-exported for the commands)
from leased.jobs import Job, JobStatus, Progress
from leased.payloads import Unreadable
from leased.run_views import parents_note, step_counts, step_tree
from leased.terminal import printable, printable_json

NONE = "-"
ELLIPSIS = "..."  # ASCII: some terminals and log collectors mangle the Unicode ellipsis


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print for a command. Error messages, names and payloads come from handlers and producers, so
    a control character in them is shown escaped, never sent to the terminal to obey."""
    click.echo(printable(text), err=err, nl=nl)


# Times and durations.
def local_time(value: datetime | None) -> str:
    """2026-11-29 13:40:02 CET: in the viewer's time zone (the database stores UTC), named, since a
    time without its zone reads as any of them."""
    if value is None:
        return NONE
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def zoned_time(value: datetime, zone: str) -> str:
    """local_time(), and beside it the time in `zone` (a schedule's) when that reads differently:
    '2026-11-29 13:00:00 UTC (08:00:00 EST in America/New_York)', the date too when it differs."""
    shown = local_time(value)
    try:
        there = value.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return shown
    here = value.astimezone()
    if there.utcoffset() == here.utcoffset() and there.tzname() == here.tzname():
        return shown
    when = there.strftime("%H:%M:%S %Z" if there.date() == here.date() else "%Y-%m-%d %H:%M:%S %Z")
    return f"{shown} ({when} in {zone})"


def plural(count: int, noun: str) -> str:
    """'1 failed job', '3 failed jobs'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# Text fitting.
def terminal_width() -> int | None:
    """The columns to fit a table to: the terminal's, or $COLUMNS. None when stdout is no terminal
    and $COLUMNS is unset (a pipe, a log, grep): the text is printed whole, not cut at 120."""
    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((120, 24)).columns


def one_line(text: str | None) -> str:
    """Errors can span lines (tracebacks, SQL); a table cell must not."""
    if not text:
        return NONE
    return " ".join(text.split())


def truncate(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[:width]
    return text[: width - len(ELLIPSIS)] + ELLIPSIS


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = (),
          shrink: int | None = None, width: int | None = None, indent: str = "") -> str:
    """Columns padded to their widest cell, two spaces apart.

    `right` lists the columns to right-align (numbers). When the table is wider than `width`, the
    column `shrink` (the free text one, such as the last error) is cut to fit, keeping at least a
    few characters so that it still says something.
    """
    cells = [[str(cell) for cell in row] for row in rows]
    right = set(right)
    widths = [max([len(header)] + [len(row[i]) for row in cells]) for i, header in enumerate(headers)]
    if shrink is not None and width is not None:
        others = sum(w for i, w in enumerate(widths) if i != shrink) + 2 * (len(widths) - 1) + len(indent)
        widths[shrink] = max(min(widths[shrink], width - others), len(headers[shrink]), 12)
        for row in cells:
            row[shrink] = truncate(row[shrink], widths[shrink])

    def line(values: Sequence[str]) -> str:
        padded = [value.rjust(widths[i]) if i in right else value.ljust(widths[i]) for i, value in enumerate(values)]
        return (indent + "  ".join(padded)).rstrip()

    return "\n".join([line(headers)] + [line(row) for row in cells])


def labelled(pairs: Sequence[tuple[str, str]], indent: str = "  ") -> str:
    """'label   value' lines; a multi-line value (pretty JSON) continues under its first line."""
    width = max(len(label) for label, _ in pairs)
    lines = []
    for label, value in pairs:
        first, *rest = str(value).splitlines() or [""]
        lines.append(f"{indent}{label.ljust(width)}  {first}".rstrip())
        lines.extend(f"{indent}{' ' * width}  {more}".rstrip() for more in rest)
    return "\n".join(lines)


# The tables several commands share.
def jobs_table(found: list[Job], indent: str = "") -> str:
    """One line per job; the time column is when it may run, or when it finished. A PROGRESS
    column comes in when a job listed has reported any (TaskContext.progress)."""
    with_progress = any(job.progress is not None for job in found)
    rows = [(job.id, job.task_name, job.queue_name, job.status, f"{job.attempt}/{job.max_attempts}",
             *((progress_text(job),) if with_progress else ()),
             local_time(job.finished_at if job.is_finished else job.run_after), one_line(job.explaining_error))
            for job in found]
    headers = ["ID", "TASK", "QUEUE", "STATUS", "ATTEMPT", *(["PROGRESS"] if with_progress else []),
               "RUN AFTER/FINISHED", "LAST ERROR"]
    # The last error is cut to the terminal's width: `leased show ID` has all of it.
    return table(headers, rows, right=[0], shrink=len(headers) - 1, width=terminal_width(), indent=indent)


def progress_text(job: Job) -> str:
    """'40/100 (40%) copying rows', and whose it is when not the job's current attempt's."""
    progress = job.progress
    if progress is None:
        return ""
    if progress.attempt == job.attempt and not (job.status == "pending" and job.attempt > 0):
        return str(progress)
    return f"{progress} (attempt {progress.attempt})"


def counts_table(counts: dict[str, dict[str, int]], estimated: Collection[str] = (), indent: str = "") -> str:
    """app.counts() as queues by statuses, with a total column (and row, for several queues); the
    `estimated` statuses, and any total over them, marked ≈ (leased.counts)."""
    statuses = [status.value for status in JobStatus]
    rows = [(queue, [*(by_status[s] for s in statuses), sum(by_status.values())])
            for queue, by_status in counts.items()]
    if len(rows) > 1:
        rows.append(("(all)", [sum(column) for column in zip(*(numbers for _, numbers in rows), strict=True)]))
    marked = [status in estimated for status in statuses] + [bool(estimated)]
    shown = [[queue, *(format_count(n, guess) for n, guess in zip(numbers, marked, strict=True))]
             for queue, numbers in rows]
    note = "\n≈ estimated from a sample of job ids; --exact counts every job" if estimated else ""
    return table(["QUEUE", *(s.upper() for s in statuses), "TOTAL"], shown,
                 right=range(1, len(statuses) + 2), indent=indent) + note


def schedules_table(found: list[Any], now: datetime, indent: str = "") -> str:
    """app.list_schedules(): a schedule that no worker runs any more shows when it was due."""
    rows = []
    for info in found:
        if info.registered is False:
            next_run = "removed from the code"
        elif info.next_run_at is not None and info.next_run_at < now:
            next_run = f"overdue since {zoned_time(info.next_run_at, info.timezone)}"
        else:
            next_run = NONE if info.next_run_at is None else zoned_time(info.next_run_at, info.timezone)
        last_job = NONE if info.last_job_id is None else f"{info.last_job_id} {info.last_job_status or 'deleted'}"
        skipped = str(info.skipped_ticks) + (f" (last {local_time(info.last_skipped_at)})"
                                             if info.skipped_ticks else "")
        rows.append((info.name, info.expression, info.timezone, next_run, last_job, local_time(info.last_success_at),
                     skipped))
    return table(["NAME", "SCHEDULE", "TIMEZONE", "NEXT RUN", "LAST JOB", "LAST SUCCESS", "SKIPPED"], rows,
                 indent=indent)


# JSON.
def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()  # UTC with offset: unambiguous for scripts, unlike the local display
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Progress):
        return {**dataclasses.asdict(value), "fraction": value.fraction}
    if isinstance(value, Unreadable):  # a stored value that is not JSON: said as the readers say it
        return f"<unreadable: {value.error[:200]}>"
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any, *, pretty: bool = True) -> str:
    # Still JSON for scripts, and still the same values: the controls become \\u escapes.
    return printable_json(json.dumps(value, default=_json_default, ensure_ascii=False, indent=2 if pretty else None))


def readable_json(value: Any, width: int = 72) -> str:
    """On one line when it fits, indented otherwise: `[1, 2]` reads better than four lines."""
    compact = json.dumps(value, default=_json_default, ensure_ascii=False)
    return compact if len(compact) <= width else to_json(value)


def job_to_dict(job: Job) -> dict[str, Any]:
    """Every field of the job, and each attempt with its duration in seconds."""
    data = {field.name: getattr(job, field.name) for field in dataclasses.fields(job) if field.name != "history"}
    data["history"] = [
        {**{field.name: getattr(attempt, field.name) for field in dataclasses.fields(attempt)},
         "duration_seconds": attempt.duration.total_seconds() if attempt.duration is not None else None}
        for attempt in job.history
    ]
    return data


# Workflows (their tree and counts: leased/run_views.py, shared with the dashboard).
def short_json(value: Any, width: int = 60) -> str:
    compact = json.dumps(value, default=_json_default, ensure_ascii=False)
    return truncate(compact, width)


def step_note(step: Any) -> str:
    """A step's result, or why it has none: its error, or the parents it waits for."""
    status = str(step.status)
    if status == "waiting":
        return f"{step.parents_left} of {len(step.parents)} parents left"
    if status == "done":
        return short_json(step.result)
    if step.last_error and (status in ("failed", "cancelled") or step.attempt > 0):
        return one_line(step.last_error)
    return NONE


def steps_table(steps: Sequence[Any], indent: str = "") -> str:
    rows = []
    for row in step_tree(steps):
        step = row.step
        finished = local_time(step.finished_at) if step.finished_at else NONE
        rows.append(("  " * row.depth + step.name, step.job_id, step.status, f"{step.attempt}/{step.max_attempts}",
                     finished, parents_note(row), step_note(step)))
    return table(["STEP", "JOB", "STATUS", "ATTEMPT", "FINISHED", "AFTER", "RESULT / ERROR"], rows, right=[1],
                 shrink=6, width=terminal_width(), indent=indent)


def workflows_table(found: Sequence[Any], indent: str = "") -> str:
    rows = [(info.id, info.name, info.status, info.progress, step_counts(info.counts, info.skipped),
             local_time(info.created_at)) for info in found]
    return table(["ID", "NAME", "STATUS", "PROGRESS", "STEPS", "CREATED"], rows, right=[0], indent=indent)


def workflow_to_dict(info: Any) -> dict[str, Any]:
    """Every field of the run, its status and progress, and each step (none in a list)."""
    data = dataclasses.asdict(info)
    data.update(status=info.status, progress=info.progress, total=info.total, finished=info.finished)
    if not info.steps:
        data.pop("steps")
    return data
