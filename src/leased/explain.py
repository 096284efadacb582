"""Why a job is where it is: plain reasons, built from one snapshot of what the database knows.

The backend reads the facts about a job (leased.facts) in one consistent read (`InspectionPort.why_facts`: the job and
its attempts, the workers table, the jobs ahead of it, and the database's clock). `explain()` turns
them into reasons and is pure, so each rule is tested over a facts value as well as end to end.
Every time in a reason is relative to the database's clock, never the caller's.

Adding a reason takes three steps:
  1. a field on JobFacts (leased/facts.py), with a default that means "nothing known" (so a backend that does not
     read it yet still explains everything else);
  2. a named query in each backend's queries.sql, read in Inspection.why_facts
     (backends/sql/inspection.py) inside the same snapshot;
  3. a rule below: a function `(facts) -> list[Reason]`, put in PENDING_BLOCKERS if it keeps a
     due job from being claimed (then "it should start" is not said), or called from the status
     it concerns.

A workflow's step (leased.workflows) that waits for its parents, or that its parents' failure
cancelled, is explained by its parents: `step_facts(backend, job)` reads them (a second read, after
the snapshot: a parent may have moved on since) and `explain(facts, step)` names them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Callable, Sequence

from leased.admin import WORKER_SILENT_AFTER, WorkerInfo
from leased.durations import format_duration
from leased.errors import ArgumentsMismatch, PermanentError, ResultNotStored
from leased.facts import AHEAD_LIMIT, JobFacts, LimitFact
from leased.horizon import sentence
from leased.jobs import Attempt, Job, JobStatus, Outcome
from leased.limits import Rate
from leased.runs import ParentEnd, RunWhen

DEFAULT_POLL_INTERVAL = 1.0  # Leased.worker's default; a worker's own setting is not recorded


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a job is where it is, from `app.why()`."""

    code: str  #: stable, for scripts: e.g. "no_worker_for_queue"
    message: str  #: one plain sentence
    data: dict[str, Any] = field(default_factory=dict)  #: the facts it rests on; times are UTC datetimes


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job is where it is: `app.why(job_id)`, and `leased why`."""

    job_id: int
    status: JobStatus
    summary: str  #: "Job 42 (charge on queue billing) is pending."
    reasons: tuple[Reason, ...]
    checked_at: datetime  #: the database's clock when the facts were read

    @property
    def text(self) -> str:
        """The summary, then one line per reason."""
        return "\n".join([self.summary, *(reason.message for reason in self.reasons)])

    def naming_app(self, app: str | None, database: str | None = None) -> Explanation:
        """The reasons with the commands they suggest written as the user would type them: `app`
        (the APP they gave) for the placeholder APP, else `database` (e.g. "--database URL") for the
        commands that need no handlers, else nothing for those (the URL is in the environment)."""
        def command(match: re.Match) -> str:
            verb, after = match[1], match[2]
            if verb in _NEEDS_HANDLERS:
                words = app or "APP"  # only an APP has the handlers: the placeholder stays
            else:
                words = app or database
            return f"`leased {verb} {words}{after}" if words else f"`leased {verb}{after}"

        reasons = tuple(replace(reason, message=_APP_COMMAND.sub(command, reason.message)) for reason in self.reasons)
        return replace(self, reasons=reasons)


# A command a reason suggests, with the placeholder APP (see Explanation.naming_app).
_APP_COMMAND = re.compile(r"`leased (\w+) APP([ `])")
_NEEDS_HANDLERS = {"worker"}


def explain(facts: JobFacts, step: StepFacts | None = None, recorded_steps: Sequence[str] = ()) -> Explanation:
    """Why the job is where it is. `step`: a workflow step's parents (step_facts), for a step that
    waits for them or that their failure cancelled; without it such a step is explained from its
    own row, and `leased workflow` is named for the rest. `recorded_steps`: the names of its durable
    steps recorded so far (TaskContext.step), in the order they ran."""
    job = facts.job
    if job.status is JobStatus.WAITING:
        reasons = _explain_waiting(facts, step)
    elif job.status is JobStatus.CANCELLED and cancelled_by_parents(facts):
        reasons = _explain_cancelled_by_parents(facts, step)
    else:
        reasons = _BY_STATUS[job.status](facts)
    if job.progress is not None and job.status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED):
        reasons = [*reasons, _progress(job)]
    if recorded_steps and job.status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SLEEPING):
        reasons = [*reasons, _resumes_after(job, recorded_steps)]
    of = f", a step of workflow {job.workflow_id}" if job.workflow_id is not None else ""
    summary = f"Job {job.id} ({job.task_name} on queue {job.queue_name}{of}) {_IS[job.status]}."
    return Explanation(job.id, job.status, summary, tuple([*_scheduled_by(facts), *reasons]), facts.now)


def _progress(job: Job) -> Reason:
    """How far the running attempt has got, or where the last one to report got to before it ended."""
    progress = job.progress
    data = {"done": progress.done, "total": progress.total, "note": progress.note, "attempt": progress.attempt,
            "fraction": progress.fraction}
    if job.status is JobStatus.RUNNING and progress.attempt == job.attempt:
        return Reason("progress", f"It has got to {progress}, as its handler last reported.", data)
    return Reason("progress", f"Attempt {progress.attempt} got to {progress} before it ended.", data)


def _resumes_after(job: Job, names: Sequence[str]) -> Reason:
    listed = ", ".join(repr(name) for name in names[:WAITING_NAMED]) + (
        f" and {len(names) - WAITING_NAMED} more" if len(names) > WAITING_NAMED else "")
    attempt = ("Its next attempt resumes" if job.status in (JobStatus.PENDING, JobStatus.SLEEPING)
               else "This attempt resumed")
    recorded = (f"step {names[0]!r} is recorded, so it does not run again" if len(names) == 1
                else f"its {len(names)} recorded steps ({listed}) do not run again")
    return Reason("resumes_after_step", f"{attempt} after step {names[-1]!r}: {recorded}.",
                  {"recorded_steps": list(names)})


_IS = {JobStatus.PENDING: "is pending", JobStatus.RUNNING: "is running", JobStatus.DONE: "is done",
       JobStatus.FAILED: "has failed", JobStatus.CANCELLED: "was cancelled", JobStatus.WAITING: "is waiting",
       JobStatus.SLEEPING: "is sleeping"}


# A workflow's step: its parents.
WAITING_NAMED = 5  # a waiting step's reason names this many of the parents it waits for, then counts the rest
_NOT_ENDED = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)
_ENDED_AS_FAILED = (JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class StepFacts:
    """A workflow step's parents, as `why` tells them: how each ended (or where it is), and the
    first WAITING_NAMED of those not ended read whole (their worker, lease and due time)."""

    parents: tuple[ParentEnd, ...]
    not_ended: tuple[Job, ...] = ()


def reads_parents(facts: JobFacts) -> bool:
    """Whether explain() tells more given the step's parents (StepFacts): a step that waits for
    them, or that their ends cancelled."""
    job = facts.job
    return job.workflow_id is not None and (job.status is JobStatus.WAITING or (
        job.status is JobStatus.CANCELLED and cancelled_by_parents(facts)))


def parents_to_read(parents: Sequence[ParentEnd]) -> list[int]:
    """Of a step's parents, those whose own rows StepFacts.not_ended holds."""
    return [parent.job_id for parent in parents if parent.status in _NOT_ENDED][:WAITING_NAMED]


def cancelled_by_parents(facts: JobFacts) -> bool:
    """A step cancelled because a parent failed, or skipped as its when= asked: what its step row says."""
    return facts.step is not None and facts.step.cancelled_by_parents


def _shows_run(job: Job) -> str:
    return f"`leased workflow APP {job.workflow_id}` shows the whole run"


def _explain_waiting(facts: JobFacts, step: StepFacts | None) -> list[Reason]:
    job = facts.job
    if step is None:
        return [Reason("waiting_for_parents", f"It waits for its parent steps in workflow {job.workflow_id} to end; "
                                              f"no worker takes it before then. {_upper_first(_shows_run(job))}.",
                       {"workflow_id": job.workflow_id})]
    waiting = [parent for parent in step.parents if parent.status in _NOT_ENDED]
    total = len(step.parents)
    data: dict[str, Any] = {"workflow_id": job.workflow_id, "parents": total, "waiting_for": len(waiting),
                            "parents_waited_for": [_parent_data(parent, step) for parent in waiting[:WAITING_NAMED]]}
    if not waiting:
        return [Reason("parents_ended", f"Every one of its {_count(total, 'parent')} has ended, yet it still waits: "
                                        f"the step that ended last was settled in its own transaction, so this "
                                        f"reads a moment in between; ask again. {_upper_first(_shows_run(job))}.",
                       data)]
    named = [_parent_state(parent, step, facts.now) for parent in waiting[:WAITING_NAMED]]
    more = len(waiting) - len(named)
    listed = ", ".join(named) + (f", and {more} more" if more else "")
    if total == 1:
        of = "its parent"
    else:
        of = f"all {total} of its parents" if len(waiting) == total else f"{len(waiting)} of its {total} parents"
    reasons = [Reason("waiting_for_parents", f"Waiting for {of}: {listed}; no worker takes it before then.", data)]
    ended = [parent for parent in step.parents if parent.status not in _NOT_ENDED]
    if ended:
        by_status: dict[str, int] = {}
        for parent in ended:
            by_status[parent.status.value] = by_status.get(parent.status.value, 0) + 1
        outcomes = _names([f"{count} {status}" for status, count in by_status.items()])
        reasons.append(Reason("parents_ended", f"{_count(len(ended), 'parent')} {'has' if len(ended) == 1 else 'have'} "
                                               f"ended: {outcomes}.", {"ended": by_status}))
    first = waiting[0]
    reasons.append(Reason("ask_parent", f"`leased why APP {first.job_id}` says why parent {first.name} has not ended; "
                                        f"{_shows_run(job)}.", {"job_id": first.job_id}))
    return reasons


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _parent_job(parent: ParentEnd, step: StepFacts) -> Job | None:
    return next((job for job in step.not_ended if job.id == parent.job_id), None)


def _parent_state(parent: ParentEnd, step: StepFacts, now: datetime) -> str:
    """'job 12 extract (running on worker w1, lease until 12:55:40 UTC)'"""
    job = _parent_job(parent, step)
    status = job.status if job is not None else parent.status
    if job is None or status is JobStatus.WAITING:
        state = "waiting for its own parents" if status is JobStatus.WAITING else status.value
    elif status is JobStatus.RUNNING:
        lease = job.lease_expires_at
        if lease is None:
            until = ""
        elif lease <= now:
            until = f", whose lease expired {_relative(lease, now)}"
        else:
            until = f", lease until {_utc(lease)}"
        state = f"running attempt {job.attempt} of {job.max_attempts} on worker {job.lease_owner or '?'}{until}"
    elif status is JobStatus.PENDING:
        due = "due now" if job.run_after <= now else f"due {_when(job.run_after, now)}"
        again = f" for attempt {job.attempt + 1} of {job.max_attempts}" if job.attempt else ""
        state = f"pending{again}, {due}"
    else:  # it ended since its parents were read
        state = f"{status.value} just now"
    return f"job {parent.job_id} {parent.name} ({state})"


def _parent_data(parent: ParentEnd, step: StepFacts) -> dict[str, Any]:
    job = _parent_job(parent, step)
    data: dict[str, Any] = {"job_id": parent.job_id, "name": parent.name, "status": parent.status.value}
    if job is not None:
        data.update(status=job.status.value, worker_id=job.lease_owner, lease_expires_at=job.lease_expires_at,
                    run_after=job.run_after, attempt=job.attempt, max_attempts=job.max_attempts)
    return data


def _explain_cancelled_by_parents(facts: JobFacts, step: StepFacts | None) -> list[Reason]:
    job = facts.job
    finished = job.finished_at or facts.now
    data: dict[str, Any] = {"workflow_id": job.workflow_id, "finished_at": job.finished_at}
    if facts.step is not None and facts.step.run_when is RunWhen.FAILED:  # a compensation step, cancelled
        return [Reason("skipped", f"It was skipped {_when(finished, facts.now)}: it runs only if one of its parents "
                                  f"fails or is cancelled (when=\"failed\", a compensation step), and none did.", data),
                _retry_would(job)]
    failed = [parent for parent in (step.parents if step else ()) if parent.status in _ENDED_AS_FAILED]
    parent = failed[0] if failed else None
    if parent is None:  # its parents unread, or retried since
        data.update(parent=None)
        return [Reason("parent_failed", f"It was cancelled {_when(finished, facts.now)} without running, because a "
                                        f"parent step failed or was cancelled; it runs only once all of its parents "
                                        f"have succeeded. {_upper_first(_shows_run(job))}.", data)]
    data.update(parent=parent.name, parent_job_id=parent.job_id, parent_status=parent.status.value,
                parent_error=parent.error, parents_failed=[p.job_id for p in failed])
    how = "failed" if parent.status is JobStatus.FAILED else "was cancelled"
    error_note = f" ({_one_line(parent.error)})" if parent.error and parent.status is JobStatus.FAILED else ""
    others = ""
    if len(failed) > 1:
        others = f"; {_count(len(failed) - 1, 'other parent')} failed or {'was' if len(failed) == 2 else 'were'} " \
                 "cancelled too"
    reasons = [Reason("parent_failed", f"It was cancelled {_when(finished, facts.now)} without running, because its "
                                       f"parent job {parent.job_id} {parent.name} {how}{error_note}{others}; it runs "
                                       f"only once all of its parents have succeeded.", data)]
    retry = (f"`leased workflow APP {job.workflow_id} --retry` retries the run's failed steps; the steps their "
             f"failure cancelled, this one among them, wait for them again" if parent.status is JobStatus.FAILED
             else f"`leased retry APP {parent.job_id}` runs parent {parent.name} again, and this step waits for it "
                  "again")
    reasons.append(Reason("retry_parent", f"{retry}.", {"parent_job_id": parent.job_id}))
    return reasons


def _one_line(text: str) -> str:
    """An error as one line, cut short: a traceback's message may span many."""
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:197] + "..."


# How times read: relative to the database's now, with the absolute UTC time beside it.
def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _relative(value: datetime, now: datetime) -> str:
    seconds = (value - now).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    return f"in {format_duration(seconds)}" if seconds > 0 else f"{format_duration(-seconds)} ago"


def _when(value: datetime, now: datetime) -> str:
    """'in 4m00s (at 2026-12-01 10:14:00 UTC)'"""
    return f"{_relative(value, now)} (at {_utc(value)})"


def _names(values: list[str]) -> str:
    """a; a and b; a, b and c"""
    if not values:
        return "nothing"
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _error(attempt: Attempt) -> str:
    text = attempt.error_message or "no message"
    return f"{attempt.error_type}: {text}" if attempt.error_type else text


def _last_attempt(job: Job) -> Attempt | None:
    return job.history[-1] if job.history else None


def _scheduled_by(facts: JobFacts) -> list[Reason]:
    tick = facts.scheduled_by
    if tick is None:
        return []
    return [Reason("scheduled", f"It was enqueued by schedule {tick.schedule_name} for its tick at "
                                f"{_utc(tick.tick_at)} ({_relative(tick.tick_at, facts.now)}).",
                   {"schedule_name": tick.schedule_name, "tick_at": tick.tick_at})]


# Pending.
def _explain_pending(facts: JobFacts) -> list[Reason]:
    blockers = [reason for rule in PENDING_BLOCKERS for reason in rule(facts)]
    return [*_previous_attempt(facts), *_handler_stuck(facts), *(blockers or [_should_start(facts)]),
            *_old_transactions(facts)]


def _old_transactions(facts: JobFacts) -> list[Reason]:
    """Not a blocker: claims still happen, only slower, so it is told after what decides the wait."""
    return [Reason("old_transaction", sentence(old),
                   {"pid": old.pid, "user": old.user, "application_name": old.application_name,
                    "client_addr": old.client_addr, "state": old.state, "open_seconds": old.open_seconds,
                    "query": old.query}) for old in facts.old_transactions]


def _is_due(facts: JobFacts) -> bool:
    return facts.job.run_after <= facts.now


def _previous_attempt(facts: JobFacts) -> list[Reason]:
    """A due job that ran before: how its last attempt ended (a job not yet due says so in _not_due)."""
    job, last = facts.job, _last_attempt(facts.job)
    if last is None or not _is_due(facts) or last.outcome is None:
        return []
    data = {"attempt": last.number, "max_attempts": job.max_attempts, "outcome": last.outcome.value,
            "worker_id": last.worker_id, "error_type": last.error_type, "error_message": last.error_message}
    how = {
        Outcome.ERROR: f"failed with {_error(last)}",
        Outcome.EXPIRED: f"was lost when its lease expired (worker {last.worker_id} stopped renewing it)",
        Outcome.LEASE_LOST: f"was given up by worker {last.worker_id}, which found its lease gone",
        Outcome.SHUTDOWN: f"was handed back when worker {last.worker_id} shut down",
        Outcome.CANCELLED: "was cancelled by a user, and the job retried since",
        Outcome.DONE: "finished, and the job was retried since",
        Outcome.TIMEOUT: f"ran past its time limit of {_time_limit(job)}",
        Outcome.CRASHED: f"crashed: {last.error_message or 'its child process died'}",
        Outcome.WAITED: "ended in a wait (not counted), which is over: its handler runs again from the top, "
                        "its steps and waits replayed",
    }[last.outcome]
    return [Reason("previous_attempt", f"Attempt {last.number} of {job.max_attempts} {how}; {_due_for(facts)}.",
                   data)]


def _due_for(facts: JobFacts) -> str:
    seconds = (facts.now - facts.job.run_after).total_seconds()
    return "it is due now" if seconds < 1 else f"it has been due for {format_duration(seconds)}"


def _not_due(facts: JobFacts) -> list[Reason]:
    job, last = facts.job, _last_attempt(facts.job)
    if _is_due(facts):
        return []
    data: dict[str, Any] = {"run_after": job.run_after, "seconds": (job.run_after - facts.now).total_seconds()}
    if last is not None and last.outcome in (Outcome.ERROR, Outcome.TIMEOUT, Outcome.CRASHED):
        data.update(attempt=last.number, max_attempts=job.max_attempts, error_type=last.error_type,
                    error_message=last.error_message, outcome=last.outcome.value)
        when = _when(job.run_after, facts.now)
        how = {Outcome.ERROR: f"failed with {_error(last)}",
               Outcome.TIMEOUT: f"ran past its time limit of {_time_limit(job)}",
               Outcome.CRASHED: f"crashed ({last.error_message or 'its child process died'})"}[last.outcome]
        return [Reason("backing_off", f"Backing off after attempt {last.number} of {job.max_attempts} {how}; "
                                      f"attempt {last.number + 1} is due {when}.", data)]
    return [Reason("not_due", f"It is due {_when(job.run_after, facts.now)}; no worker takes it before then.",
                   data)]


def _live(facts: JobFacts) -> list[WorkerInfo]:
    return [worker for worker in facts.workers if worker.alive]


def _serves_queue(worker: WorkerInfo, queue: str) -> bool:
    return worker.queues is None or queue in worker.queues


def _able(facts: JobFacts) -> list[WorkerInfo]:
    """Live workers that would claim this job: they serve its queue and have its handler."""
    job = facts.job
    return [w for w in _live(facts) if _serves_queue(w, job.queue_name) and job.task_name in w.tasks]


def _no_worker(facts: JobFacts) -> list[Reason]:
    job, live = facts.job, _live(facts)
    if not live:
        silent = [worker.id for worker in facts.workers]
        also = f" ({len(silent)} silent for over {WORKER_SILENT_AFTER:g}s)" if silent else ""
        return [Reason("no_workers", f"No live worker: none has announced itself in the last "
                                     f"{WORKER_SILENT_AFTER:g}s{also}, so nothing claims jobs. Start one with "
                                     f"`leased worker APP`.", {"silent_workers": silent})]
    on_queue = [worker for worker in live if _serves_queue(worker, job.queue_name)]
    if not on_queue:
        served = sorted({queue for worker in live for queue in worker.queues or ()})
        return [Reason("no_worker_for_queue",
                       f"No live worker serves queue {job.queue_name}: the live workers serve {_names(served)}.",
                       {"queue_name": job.queue_name, "served_queues": served, "workers": [w.id for w in live]})]
    if _able(facts):
        return []
    elsewhere = sorted(worker.id for worker in live if job.task_name in worker.tasks)
    note = (f" ({_names(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} it, but serve"
            f"{'s' if len(elsewhere) == 1 else ''} other queues)") if elsewhere else ""
    return [Reason("no_worker_for_task",
                   f"No live worker that serves queue {job.queue_name} has a handler for task {job.task_name}"
                   f"{note}: deploy it, or check the task's name=.",
                   {"task_name": job.task_name, "queue_name": job.queue_name,
                    "workers_on_queue": [w.id for w in on_queue], "workers_with_task": elsewhere})]


def _workers_busy(facts: JobFacts) -> list[Reason]:
    able = _able(facts)
    if not _is_due(facts) or not able or any(_slots_taken(worker) < worker.concurrency for worker in able):
        return []
    busy = ", ".join(_busy_worker(w) for w in able)
    return [Reason("workers_busy", f"Every live worker that can run it is busy ({busy}): it waits for a free slot.",
                   {"workers": {w.id: {"running": w.running, "concurrency": w.concurrency,
                                       "stuck_handlers": w.stuck_handlers} for w in able}})]


def _slots_taken(worker: WorkerInfo) -> int:
    """Its running jobs, and the handler threads that outlived their time limit, each holding a slot."""
    return worker.running + worker.stuck_handlers


def _busy_worker(worker: WorkerInfo) -> str:
    """A busy worker's slots: "w1 runs 2 of 2", or, when stuck handlers hold some (so that "runs 0
    of 2" would read as idle), "w1 has no free slot: 0 jobs running, 2 held by ..."."""
    stuck = worker.stuck_handlers
    if not stuck:
        return f"{worker.id} runs {worker.running} of {worker.concurrency}"
    held = ("1 held by a handler thread stuck past its time limit" if stuck == 1
            else f"{stuck} held by handler threads stuck past their time limit")
    return f"{worker.id} has no free slot: {_count(worker.running, 'job')} running, {held}"


def _jobs_ahead(facts: JobFacts) -> list[Reason]:
    ahead, job = facts.jobs_ahead, facts.job
    if not ahead or not _is_due(facts):
        return []
    count = f"more than {AHEAD_LIMIT:,}" if ahead > AHEAD_LIMIT else f"{ahead:,}"
    are = "is" if ahead == 1 else "are"
    return [Reason("jobs_ahead", f"{count} due job{'' if ahead == 1 else 's'} of queue {job.queue_name} {are} ahead of "
                                 f"it in claim order (higher priority, due earlier, or enqueued before it).",
                   {"jobs_ahead": min(ahead, AHEAD_LIMIT), "more": ahead > AHEAD_LIMIT,
                    "queue_name": job.queue_name})]


def _should_start(facts: JobFacts) -> Reason:
    job, able = facts.job, _able(facts)
    waited = (facts.now - job.run_after).total_seconds()
    names = _names(sorted(worker.id for worker in able))
    message = (f"{_upper_first(_due_for(facts))}, and {names} can run it with a free slot: "
               f"it should start within a poll interval ({DEFAULT_POLL_INTERVAL:g}s by default), sooner when a "
               f"worker is woken for it.")
    if waited > 60:  # a minute is many poll intervals: say so rather than promise
        message += " It has waited longer than that, so look at those workers' logs."
    return Reason("should_start", message, {"workers": sorted(worker.id for worker in able), "due_seconds": waited})


def _queue_paused(facts: JobFacts) -> list[Reason]:
    """Told whether or not the job is due: waiting out a delay will not be enough either."""
    paused, queue = facts.queue_paused_at, facts.job.queue_name
    if paused is None:
        return []
    since = facts.now - paused
    how_long = f"for {format_duration(since)}" if since.total_seconds() >= 1 else "just now"
    return [Reason("queue_paused", f"Queue {queue} has been paused since {_utc(paused)} ({how_long}): no worker "
                                   f"claims its jobs until it is resumed with `leased resume APP {queue}`.",
                   {"queue_name": queue, "paused_at": paused, "paused_seconds": (facts.now - paused).total_seconds()})]


def _limit_name(limit: LimitFact) -> str:
    return f"key {limit.name}" if limit.scope == "key" else f"queue {limit.name}"


def _concurrency_full(facts: JobFacts) -> list[Reason]:
    reasons = []
    for limit in facts.limits:
        if not _is_due(facts) or not limit.concurrency_full:
            continue
        named = [f"job {job_id} on worker {worker or '?'}" for job_id, worker in limit.running_jobs]
        if limit.running > len(named):
            named.append(f"{limit.running - len(named)} more")
        message = (f"It waits on the concurrency limit of {_limit_name(limit)}: {limit.running} of "
                   f"{limit.concurrency} running ({_names(named)}).")
        reasons.append(Reason(f"{limit.scope}_concurrency_full", message,
                              {"scope": limit.scope, "name": limit.name, "concurrency": limit.concurrency,
                               "running": limit.running,
                               "running_jobs": [{"job_id": job_id, "worker_id": worker}
                                                for job_id, worker in limit.running_jobs]}))
    return reasons


def _rate_full(facts: JobFacts) -> list[Reason]:
    reasons = []
    for limit in facts.limits:
        if not _is_due(facts) or not limit.rate_full:
            continue
        slot = limit.next_slot_at
        when = f"the next slot opens {_when(slot, facts.now)}" if slot is not None else "no start is known"
        message = (f"The rate limit of {_limit_name(limit)} ({_rate(limit.rate)}) is reached: {limit.starts} "
                   f"start{'' if limit.starts == 1 else 's'} in the last {format_duration(limit.rate.seconds)}; "
                   f"{when}.")
        reasons.append(Reason(f"{limit.scope}_rate_full", message,
                              {"scope": limit.scope, "name": limit.name, "rate_count": limit.rate.count,
                               "rate_seconds": limit.rate.seconds, "starts": limit.starts, "next_slot_at": slot,
                               "next_slot_seconds": None if slot is None else
                               max((slot - facts.now).total_seconds(), 0.0)}))
    return reasons


def _rate(rate: Rate) -> str:
    """'10/m'; any other window (a row written by hand) as its count per duration."""
    try:
        return str(rate)
    except StopIteration:
        return f"{rate.count} per {format_duration(rate.seconds)}"


# Rules that keep a pending job from being claimed now, in the order they are told.
PENDING_BLOCKERS: tuple[Callable[[JobFacts], list[Reason]], ...] = (
    _not_due, _queue_paused, _no_worker, _workers_busy, _concurrency_full, _rate_full, _jobs_ahead)


# Running.
def _explain_running(facts: JobFacts) -> list[Reason]:
    job, now = facts.job, facts.now
    owner = job.lease_owner or "?"
    current = next((a for a in job.history if a.number == job.attempt), None)
    started = f", started {_when(current.started_at, now)}" if current else ""
    reasons = [Reason("running", f"Attempt {job.attempt} of {job.max_attempts} is running on worker {owner}{started}.",
                      {"worker_id": owner, "attempt": job.attempt, "max_attempts": job.max_attempts,
                       "started_at": current.started_at if current else None})]
    return reasons + _time_limit_of_running(facts, current) + [_lease(facts, owner)]


def _time_limit(job: Job) -> str:
    return format_duration(job.timeout_seconds) if job.timeout_seconds is not None else "none"


def _time_limit_of_running(facts: JobFacts, current: Attempt | None) -> list[Reason]:
    job, now = facts.job, facts.now
    if job.timeout_seconds is None or current is None:
        return []
    limit_at = current.started_at + timedelta(seconds=job.timeout_seconds)
    data = {"timeout_seconds": job.timeout_seconds, "limit_at": limit_at,
            "past_seconds": max((now - limit_at).total_seconds(), 0.0)}
    if limit_at > now:
        return [Reason("time_limit", f"Its time limit of {_time_limit(job)} ends {_when(limit_at, now)}.", data)]
    # The worker ends an attempt at its limit; one still running past it was not ended by anyone.
    return [Reason("past_time_limit", f"Its time limit of {_time_limit(job)} passed {_relative(limit_at, now)} "
                                      f"(at {_utc(limit_at)}), yet attempt {job.attempt} has not ended: the handler "
                                      f"is still running and worker {job.lease_owner or '?'} has not stopped it, so "
                                      f"the worker is stuck (its event loop blocked, e.g. by a blocking call in an "
                                      f"async handler) or gone (then its lease runs out).", data)]


def _handler_stuck(facts: JobFacts) -> list[Reason]:
    """A timed-out last attempt whose thread outlived it (as its record says), on a worker that still
    reports stuck threads. An attempt ended before schema 0025 has no such record: if its worker
    reports stuck threads, the reason says the attempt's may be one of them."""
    last = _last_attempt(facts.job)
    if last is None or last.outcome is not Outcome.TIMEOUT or last.handler_outlived_limit is False:
        return []
    worker = next((w for w in facts.workers if w.id == last.worker_id and w.alive), None)
    if worker is None or not worker.stuck_handlers:
        return []
    stuck = worker.stuck_handlers
    threads = f"{stuck} stuck handler thread{'' if stuck == 1 else 's'}, each holding a slot until it returns"
    data = {"attempt": last.number, "worker_id": worker.id, "stuck_handlers": stuck,
            "recorded": last.handler_outlived_limit is not None}
    if last.handler_outlived_limit is None:
        return [Reason("handler_stuck", f"Worker {worker.id}, which ran attempt {last.number} until its time limit "
                                        f"ended it, reports {threads}; whether this attempt's thread is one of them "
                                        f"was not recorded (it ended before schema 0025).", data)]
    return [Reason("handler_stuck", f"The handler thread of attempt {last.number} was still running when its time "
                                    f"limit ended the attempt, and worker {worker.id} still reports {threads}: the "
                                    f"handler does not check context.cancelled.", data)]


def _after_expiry(job: Job) -> str:
    return "the job returns to the pool" if job.attempt < job.max_attempts else "the job fails (no attempts are left)"


def _lease(facts: JobFacts, owner: str) -> Reason:
    job, now, expires = facts.job, facts.now, facts.job.lease_expires_at
    data: dict[str, Any] = {"worker_id": owner, "lease_expires_at": expires}
    if expires is None:
        return Reason("no_lease", "It holds no lease expiry, which leased never writes: the row was edited by hand.",
                      data)
    if expires <= now:
        returns = "returns it to the pool" if job.attempt < job.max_attempts else "fails it (no attempts are left)"
        who = ("the next live worker to look for work (each does so about once a second)" if _live(facts)
               else "no live worker is running; the first to start")
        return Reason("lease_expired", f"Its lease expired {_relative(expires, now)} (at {_utc(expires)}): {who} "
                                       f"{returns}.", data)
    worker = next((w for w in facts.workers if w.id == owner), None)
    lease_end = f"the lease expires {_when(expires, now)} and {_after_expiry(job)} then"
    if worker is None:
        return Reason("worker_unknown", f"Worker {owner} is not in the workers table (it signed off, or never "
                                        f"announced itself); unless it renews, {lease_end}.", data)
    data.update(last_seen_at=worker.last_seen_at, silent_seconds=(now - worker.last_seen_at).total_seconds())
    if worker.alive:
        return Reason("worker_alive", f"Worker {owner} was last seen {_relative(worker.last_seen_at, now)}; it renews "
                                      f"the lease while the handler runs (now until {_utc(expires)}).", data)
    return Reason("worker_silent", f"Worker {owner} has been silent for "
                                   f"{format_duration(now - worker.last_seen_at)} (last seen at "
                                   f"{_utc(worker.last_seen_at)}): unless it renews, {lease_end}.", data)


# Finished.
def _explain_failed(facts: JobFacts) -> list[Reason]:
    return [_why_failed(facts.job), *_handler_stuck(facts), _retry_would(facts.job)]


def _why_failed(job: Job) -> Reason:
    last = _last_attempt(job)
    data: dict[str, Any] = {"attempt": job.attempt, "max_attempts": job.max_attempts, "finished_at": job.finished_at,
                            "last_error": job.last_error}
    at = f"attempt {job.attempt} of {job.max_attempts}"
    if job.quarantined:
        return _quarantined(job, data)
    if last is not None and last.outcome is Outcome.TIMEOUT:
        data.update(outcome=last.outcome.value, timeout_seconds=job.timeout_seconds)
        limit = f"the time limit of {_time_limit(job)}"
        if job.attempt >= job.max_attempts:
            return Reason("attempts_exhausted", f"It used {_all_attempts(job)} hit {limit}.", data)
        return Reason("time_limit_hit", f"{_upper_first(at)} hit {limit} and was not retried.", data)
    if last is not None and last.outcome is Outcome.CRASHED:
        data.update(outcome=last.outcome.value, error_message=last.error_message)
        # An isolated handler's child records its death as ChildProcessDied; a worker's has no type.
        whose = "handler's child" if last.error_type == "ChildProcessDied" else "worker"
        return Reason("crashed", f"Its {whose} process died at {at}: {last.error_message}. A segfault or the "
                                 "OOM killer is the usual cause (`dmesg` says which); retry it from the job's page "
                                 "or with `leased retry`.", data)
    if last is None or last.outcome not in (Outcome.ERROR, Outcome.EXPIRED):
        return Reason("failed", f"It failed at {at}: {job.last_error or 'no error was recorded'}.", data)
    data.update(error_type=last.error_type, error_message=last.error_message, outcome=last.outcome.value)
    # What the worker recorded the attempt as (engine/executor.py), not the words of its message.
    message = last.error_message or ""
    if last.error_type == ArgumentsMismatch.__name__:
        return Reason("arguments_mismatch", f"Its stored arguments no longer fit the handler ({message}), so {at} "
                                            f"failed it at once, without retrying.", data)
    if last.error_type == ResultNotStored.__name__:
        return Reason("result_not_stored", f"The handler's result could not be stored ({message}), so {at} failed "
                                           f"it at once, without retrying.", data)
    if last.error_type == PermanentError.__name__:
        return Reason("permanent_error", f"{_upper_first(at)} raised {_error(last)}, and a PermanentError fails "
                                         f"the job at once, without retrying.", data)
    if last.outcome is Outcome.EXPIRED:
        return Reason("attempts_exhausted", f"It used {_all_attempts(job)} was lost when worker {last.worker_id} "
                                            f"stopped renewing its lease (crashed, stalled or cut off).", data)
    if job.attempt >= job.max_attempts:
        return Reason("attempts_exhausted", f"It used {_all_attempts(job)} failed with {_error(last)}.", data)
    return Reason("not_retried", f"{_upper_first(at)} failed with {_error(last)} and was not retried (an exception "
                                 f"derived from PermanentError fails a job at once).", data)


def _quarantined(job: Job, data: dict[str, Any]) -> Reason:
    """A poison job: read from its stored count (job.crashes) and its attempts' outcomes, each
    crash with the signal or exit status its record names."""
    crashes = [attempt for attempt in job.history if attempt.outcome is Outcome.CRASHED]
    data.update(crashes=job.crashes, max_crashes=job.max_crashes,
                crashed_attempts=[{"attempt": attempt.number, "worker_id": attempt.worker_id,
                                   "error_message": attempt.error_message} for attempt in crashes])
    each = "; ".join(f"attempt {attempt.number}: {attempt.error_message}" for attempt in crashes)
    return Reason("quarantined", f"It was quarantined after {job.crashes} crash{'' if job.crashes == 1 else 'es'} "
                                 "(its task's max_crashes is "
                                 f"{job.max_crashes}): a poison job, whose attempts kill the process that runs them, "
                                 f"is failed rather than retried up to its {job.max_attempts} attempts"
                                 f"{' (' + each + ')' if each else ''}. A segfault in a C extension, the OOM killer "
                                 "or os._exit is the usual cause (`dmesg` says which); a retry allows one more crash.",
                  data)


def _all_attempts(job: Job) -> str:
    return f"all {job.max_attempts} attempts; the last" if job.max_attempts > 1 else "its only attempt, which"


def _retry_would(job: Job) -> Reason:
    """What app.retry does, as the backends' retry query does it: pending and due now, with at
    least one more attempt (max_attempts grows to attempt + 1 if it must)."""
    following = job.attempt + 1
    max_attempts = max(job.max_attempts, following)
    if max_attempts > job.max_attempts:
        more = f"one more attempt (attempt {following} of {max_attempts})"
    elif following == max_attempts:
        more = f"its last attempt (attempt {following} of {max_attempts})"
    else:
        more = f"the attempts it has left ({following} to {max_attempts})"
    caveat = (f", unless another waiting job holds its idempotency key {job.idempotency_key}"
              if job.attempt == 0 and job.idempotency_key else "")
    return Reason("retry", f"`leased retry APP {job.id}` (or Retry on the dashboard) puts it back to pending, due now, "
                           f"with {more}{caveat}.",
                  {"next_attempt": following, "max_attempts": max_attempts})


def _explain_done(facts: JobFacts) -> list[Reason]:
    job = facts.job
    finished = job.finished_at or facts.now
    stored = "its result is stored" if job.result is not None else "the handler returned nothing (None)"
    attempts = "1 attempt" if job.attempt == 1 else f"{job.attempt} attempts"
    return [Reason("done", f"It finished {_when(finished, facts.now)} after {attempts}; {stored}.",
                   {"finished_at": job.finished_at, "attempts": job.attempt, "has_result": job.result is not None})]


def _explain_cancelled(facts: JobFacts) -> list[Reason]:
    job, last = facts.job, _last_attempt(facts.job)
    finished = job.finished_at or facts.now
    if last is not None and last.number == job.attempt and last.outcome is Outcome.CANCELLED:
        during = f"while attempt {last.number} ran on worker {last.worker_id}, whose handler was told to stop"
    elif job.attempt == 0:
        during = "before its first attempt"
    else:
        during = f"while it waited for attempt {job.attempt + 1}"
    return [Reason("cancelled", f"A user cancelled it {_when(finished, facts.now)}, {during}.",
                   {"finished_at": job.finished_at, "attempt": job.attempt}),
            _retry_would(job)]


# Sleeping: its handler waits (TaskContext.sleep, wait_for).
def _explain_sleeping(facts: JobFacts) -> list[Reason]:
    job, wait, now = facts.job, facts.sleeping_on, facts.now
    if wait is None:  # its wait was just ended (its signal came, or its time) and the job not yet woken
        return [Reason("sleeping", "Its handler waits; what for was not found: it is about to wake.", {})]
    data = {"signal_name": wait.signal_name, "since": wait.since, "wakes_at": wait.wakes_at}
    after = f"attempt {job.attempt} ended there (not counted against max_attempts {job.max_attempts})"
    if wait.signal_name is None:
        text = f"Sleeping until {_utc(wait.wakes_at or now)} ({_relative(wait.wakes_at or now, now)}): {after}."
    else:
        times_out = "it has no timeout" if wait.wakes_at is None else f"times out {_when(wait.wakes_at, now)}"
        text = (f"Waiting for signal {wait.signal_name!r} since {_utc(wait.since)}, {times_out}: {after}; "
                f"`leased signal APP {job.id} {wait.signal_name}` sends it.")
    return [Reason("sleeping", text, data)]


_BY_STATUS: dict[JobStatus, Callable[[JobFacts], list[Reason]]] = {
    JobStatus.PENDING: _explain_pending, JobStatus.RUNNING: _explain_running, JobStatus.FAILED: _explain_failed,
    JobStatus.DONE: _explain_done, JobStatus.CANCELLED: _explain_cancelled, JobStatus.SLEEPING: _explain_sleeping,
}
