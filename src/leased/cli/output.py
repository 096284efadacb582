"""Terminal output: aligned tables, compact local times and durations, JSON for scripts.

Pure functions returning strings, so the commands stay short and the formats are easy to test.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime, timedelta
from typing import Any, Collection, Iterable, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from leased.counts import format_count
from leased.durations import format_duration, parse_duration  # noqa: F401  (re-exported for the commands)
from leased.jobs import Job, JobStatus, Progress

NONE = "-"
ELLIPSIS = "..."  # ASCII: some terminals and log collectors mangle the Unicode ellipsis


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
def terminal_width() -> int:
    # Falls back to 120 columns when stdout is not a terminal (pipes, CI logs), or honours $COLUMNS.
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
    rows = [[queue, *(by_status[s] for s in statuses), sum(by_status.values())] for queue, by_status in counts.items()]
    if len(rows) > 1:
        rows.append(["(all)", *(sum(row[i] for row in rows) for i in range(1, len(statuses) + 2))])
    marked = [status in estimated for status in statuses] + [bool(estimated)]
    shown = [[row[0], *(format_count(n, guess) for n, guess in zip(row[1:], marked))] for row in rows]
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
        skipped = str(info.skipped_ticks) + (f" (last {local_time(info.last_skipped_at)})" if info.skipped_ticks else "")
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
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any, *, pretty: bool = True) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False, indent=2 if pretty else None)


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


# Workflows.
STEP_STATUSES = ("waiting", "pending", "running", "done", "failed", "cancelled")


@dataclasses.dataclass(frozen=True, slots=True)
class TreeRow:
    depth: int  # how far it is indented: under the parent that comes last in dependency order
    step: Any  # a leased.runs.StepInfo
    others: tuple[str, ...]  # its other parents, which the indent does not show


def step_tree(steps: Sequence[Any]) -> list[TreeRow]:
    """A run's steps as a tree by dependency: each step under one of its parents (the one that
    comes last in dependency order, so that every parent is listed before it in a batch's fan-in),
    its other parents named beside it. Steps added at run time may have parents with higher job ids
    than their own, so the order is a topological sort, not the ids'."""
    by_name = {step.name: step for step in steps}
    order = {step.name: index for index, step in enumerate(steps)}
    parents = {step.name: [name for name in step.parents if name in by_name] for step in steps}
    waiting = {name: len(names) for name, names in parents.items()}
    children: dict[str, list[str]] = {name: [] for name in by_name}
    for name, names in parents.items():
        for parent in names:
            children[parent].append(name)
    ready = sorted((name for name, count in waiting.items() if count == 0), key=order.__getitem__)
    position: dict[str, int] = {}
    while ready:  # Kahn's sort, taking the lowest job id first
        name = ready.pop(0)
        position[name] = len(position)
        for child in children[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
        ready.sort(key=order.__getitem__)
    for step in steps:  # a cycle, which leased never writes: shown at the end, unindented
        position.setdefault(step.name, len(position))
    under: dict[str | None, list[str]] = {}
    primary: dict[str, str | None] = {}
    for name in sorted(by_name, key=position.__getitem__):
        placed = [parent for parent in parents[name] if position[parent] < position[name]]
        primary[name] = max(placed, key=position.__getitem__) if placed else None
        under.setdefault(primary[name], []).append(name)
    rows: list[TreeRow] = []

    def visit(name: str, depth: int) -> None:
        step = by_name[name]
        rows.append(TreeRow(depth, step, tuple(parent for parent in step.parents if parent != primary[name])))
        for child in under.get(name, ()):
            visit(child, depth + 1)

    for root in under.get(None, ()):
        visit(root, 0)
    return rows


def step_counts(counts: dict[str, int], skipped: int = 0) -> str:
    """'3 done, 1 failed, 1 cancelled (1 skipped)', in the order a step goes through."""
    parts = [f"{counts[status]} {status}" for status in STEP_STATUSES if counts.get(status)]
    parts += [f"{count} {status}" for status, count in counts.items() if status not in STEP_STATUSES and count]
    text = ", ".join(parts) or "no steps"
    return text + (f" ({skipped} skipped)" if skipped else "")


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


def parents_note(row: TreeRow, named: int = 2) -> str:
    """The parents the tree's indent does not show, its when= if not the default, who added it."""
    notes = []
    if row.others:
        shown = ", ".join(row.others[:named]) + (f" +{len(row.others) - named} more" if len(row.others) > named else "")
        notes.append(f"after {shown}")
    if str(row.step.run_when) != "succeeded":
        notes.append(f"when {row.step.run_when}")
    if row.step.added_by:
        notes.append(f"added by {row.step.added_by}")
    return "; ".join(notes) or NONE


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
