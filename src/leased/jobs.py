"""The values of a job: one to write (NewJob), a job as leased hands it out, one attempt at it, and
their statuses.

They are plain frozen data. Nothing here talks to a database; persistence is the backend's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from datetime import datetime, timedelta
from enum import StrEnum
import json
from typing import Any, Callable, NamedTuple


class JobStatus(StrEnum):
    """Where a job is: see the job state machine in the docs (reference/states)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING = "waiting"  #: a workflow's step whose parents have not all ended: nobody claims it yet


class NewJob(NamedTuple):
    """A job to write. A named tuple, not a frozen dataclass like the other parameter objects: a
    bulk enqueue makes one per job, and a frozen dataclass costs a call of object.__setattr__ per
    field to build (5 µs for these 17, more than the insert's own Python per job). Its fields are
    in the order in which each backend's insert_jobs reads a job's array (see jobs_json)."""

    task_name: str
    queue_name: str
    args_json: str
    kwargs_json: str
    priority: int
    max_attempts: int
    lease_seconds: float
    run_at: datetime | None = None  # an absolute time, or
    delay_seconds: float = 0.0  # seconds after the database's now
    idempotency_key: str | None = None
    timeout_seconds: float | None = None  # the handler's time limit per attempt; None: no limit
    # Limits per key (see leased.limits): at most key_concurrency running, key_rate_count starts
    # per key_rate_seconds; each None when not limited.
    concurrency_key: str | None = None
    key_concurrency: int | None = None
    key_rate_count: int | None = None
    key_rate_seconds: float | None = None
    # A workflow's step (leased.workflows): 'waiting' until its parents have ended, in its run.
    status: str = "pending"
    workflow_id: int | None = None
    isolation: str | None = None  # 'thread' or 'process', chosen for this job (Task.using); None: its task's
    max_crashes: int = 2  # attempts ended by a process's death before the job is quarantined (failed)
    # The W3C trace context of the span that enqueued it (leased.tracing), as JSON; None: untraced.
    trace_context: str | None = None
    # The key whose fair share of its queue's starts it waits for (docs/howto/fairness.md); None: none.
    fairness_key: str | None = None


class Outcome(StrEnum):
    """How one attempt ended."""

    DONE = "done"
    ERROR = "error"
    LEASE_LOST = "lease_lost"  #: the worker found its lease gone and abandoned the attempt
    EXPIRED = "expired"  #: the worker stopped renewing (crashed, stalled, partitioned)
    CANCELLED = "cancelled"  #: a user cancelled the job while it ran
    SHUTDOWN = "shutdown"  #: the worker shut down and released the job
    TIMEOUT = "timeout"  #: the handler ran past the job's time limit
    #: The attempt's process died: a process-isolated handler's child (a signal, the OOM killer,
    #: os._exit), or its worker (the supervisor saw it die, or its lease expired with the worker gone).
    CRASHED = "crashed"


def quarantined_error(crashes: int, message: str) -> str:
    """A poison job's last error: the crash that reached its max_crashes, and how many there were.
    (PostgreSQL's fused reclaim writes the same words in SQL.)"""
    return f"quarantined after {crashes} crash{'' if crashes == 1 else 'es'}: {message}"


def worker_gone_error(worker_id: str, silent_after: float) -> str:
    """Why an attempt whose lease expired with its worker gone (silent, or seen to die) counts as a crash."""
    return f"lease expired: worker {worker_id} is gone (silent for over {silent_after:g}s): its process died"


def worker_died_error(worker_id: str, how: str) -> str:
    """Why an attempt whose worker its supervisor saw die (`how`: "killed by SIGKILL", "exited with
    status 3") counts as a crash."""
    return f"worker {worker_id} died: {how} (seen by its supervisor)"


def worker_stalled_error(worker_id: str) -> str:
    return f"lease expired: worker {worker_id} stopped renewing it (crashed, stalled or cut off)"


@dataclass(frozen=True, slots=True)
class DurableStep:
    """A step of a job's handler (TaskContext.step) as recorded: by the attempt that ran it, with
    its result, which the job's later attempts get instead of running it again."""

    name: str
    attempt: int
    result: Any
    started_at: datetime
    finished_at: datetime


MAX_PROGRESS_NOTE = 200  # characters: a note travels with every renewal of the lease


@dataclass(frozen=True, slots=True)
class Progress:
    """How far an attempt got, as its handler last said (TaskContext.progress): `done` of `total`
    (None: not known), with a short note. `attempt` is the attempt that said it: a retried job
    keeps its last attempt's progress until the next one reports its own."""

    done: float
    total: float | None = None
    note: str | None = None
    attempt: int = 0

    @property
    def fraction(self) -> float | None:
        """done / total, from 0 to 1; None without a total (or with a total of 0)."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def __str__(self) -> str:
        """'40/100 (40%) copying rows': what a reader shows."""
        text = _number(self.done) if self.total is None else f"{_number(self.done)}/{_number(self.total)}"
        if self.fraction is not None:
            text += f" ({self.fraction:.0%})"
        return f"{text} {self.note}" if self.note else text

    def to_json(self) -> str:
        return json.dumps({"done": self.done, "total": self.total, "note": self.note, "attempt": self.attempt})

    @classmethod
    def from_json(cls, text: str | None) -> Progress | None:
        """The stored column as a Progress (None where no attempt reported any). A column that
        another program wrote and that does not read as one is no report either: progress is
        advisory, and a reader (the job list, `leased show`, the dashboard, a finish) must not fail
        on it."""
        if text is None:
            return None
        try:
            value = json.loads(text) if isinstance(text, (str, bytes)) else text
            done, total, note, attempt = value["done"], value.get("total"), value.get("note"), value.get("attempt", 0)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None
        numbers = isinstance(done, (int, float)) and (total is None or isinstance(total, (int, float)))
        if not numbers or not (note is None or isinstance(note, str)) or type(attempt) is not int:
            return None
        return cls(done, total, note, attempt)


def _number(value: float) -> str:
    """1000000 as 1000000 and 2.5 as 2.5, never 1e+06."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: Outcome | None  #: None while the attempt runs
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    progress: Progress | None = None  #: how far it got, as its handler last said
    #: its time limit ended it while its handler's thread still ran; None: not recorded (an end
    #: other than a finish, or one written before schema 0025)
    handler_outlived_limit: bool | None = None

    @property
    def duration(self) -> timedelta | None:
        if self.finished_at is None:
            return None
        return self.finished_at - self.started_at


def with_running_attempt(history: tuple[Attempt, ...], status: JobStatus | str, attempt: int,
                         lease_owner: str | None, attempt_started_at: datetime | None,
                         progress: Progress | None = None) -> tuple[Attempt, ...]:
    """A job's history as readers show it: the attempts' records, and the running attempt. An
    attempt's record is written once, when the attempt ends; while it runs, the job row holds its
    number, worker, start and latest progress, and this is the one place that turns them into an Attempt. A record
    already there for the attempt (opened by an older version at claim) is shown as it is."""
    if (status != JobStatus.RUNNING or lease_owner is None or attempt_started_at is None
            or any(recorded.number == attempt for recorded in history)):
        return history
    return (*history, Attempt(number=attempt, worker_id=lease_owner, started_at=attempt_started_at,
                              finished_at=None, outcome=None,
                              progress=progress if progress is not None and progress.attempt == attempt else None))


@dataclass(frozen=True, slots=True)
class Lease:
    """Who holds one attempt of a job. Every write after a claim is fenced on all three."""

    job_id: int
    attempt: int
    worker_id: str

    def __hash__(self) -> int:
        # The worker keys its attempts by lease several times per job; the job id tells them apart
        # (equality still compares all three), without the tuple the generated hash builds.
        return hash(self.job_id)


@dataclass(frozen=True, slots=True)
class Job:
    """A job as read or written. `created` says what an enqueue did: True, it wrote this job;
    False, a pending job already held the idempotency key and is returned instead (nothing was
    written); None, the job was not returned by an enqueue. It is not part of equality: the same
    row compares equal whichever call returned it."""

    id: int
    task_name: str
    queue_name: str
    status: JobStatus
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    attempt: int
    max_attempts: int
    lease_seconds: float
    run_after: datetime
    created_at: datetime
    finished_at: datetime | None = None
    last_error: str | None = None
    idempotency_key: str | None = None
    result: Any = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    timeout_seconds: float | None = None  #: the handler's time limit per attempt; None: no limit
    history: tuple[Attempt, ...] = field(default=())
    concurrency_key: str | None = None  #: the key whose limit this job waits on and counts against
    workflow_id: int | None = None  #: the workflow this job is a step of (leased.workflows), or None
    progress: Progress | None = None  #: how far its latest attempt to report any got (TaskContext.progress)
    isolation: str | None = None  #: 'thread' or 'process' if its enqueue chose (Task.using); None: its task's
    crashes: int = 0  #: its attempts that ended because their process died (outcome crashed)
    max_crashes: int = 2  #: crashes after which it is quarantined: ended failed, not retried
    created: bool | None = field(default=None, compare=False)
    #: The W3C trace context (JSON) of the span that enqueued it (leased.tracing), as a read of its
    #: row gives it (get_job, the listings); None: untraced, and on the Job an enqueue returns, which
    #: is built without reading the row back. Not compared: it names a span, not the job's state.
    trace_context: str | None = field(default=None, compare=False)
    fairness_key: str | None = None  #: the key whose fair share of its queue it waits for; None: none

    @property
    def lease(self) -> Lease:
        if self.lease_owner is None:
            raise ValueError(f"job {self.id} is not leased (status {self.status})")
        return Lease(self.id, self.attempt, self.lease_owner)

    @property
    def quarantined(self) -> bool:
        """A poison job: it failed because its attempts kept killing their process (max_crashes
        of them), not for its attempts running out."""
        return self.status == JobStatus.FAILED and self.crashes >= self.max_crashes

    @property
    def is_finished(self) -> bool:
        return self.status in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)

    @property
    def explaining_error(self) -> str | None:
        """The last error where it explains the status: a failed job, or one waiting or running
        again after a failed attempt. A job that ended done (after a retry) or was cancelled by a
        user keeps the old error in its row, but showing it beside that status would mislead; the
        history keeps every attempt's error."""
        if self.status == JobStatus.FAILED:
            return self.last_error
        if (self.status == JobStatus.PENDING and self.attempt > 0
                or self.status == JobStatus.RUNNING and self.attempt > 1):
            return self.last_error
        return None


def _as_job(draft: Any) -> Job:
    draft.__class__ = Job
    job: Job = draft  # the same object, a Job now (see JobDraft below)
    return job


# A frozen dataclass is slow to build: its __init__ sets each field through object.__setattr__,
# 5 µs for a Job's 22, more than the rest of a bulk enqueue's Python per job. A JobDraft has Job's
# fields and slots but is not frozen, so its __init__ assigns the slots directly; .job() then makes
# it a Job in place, which Python allows between classes with the same slots. What comes out is a
# Job in every way (type, equality, repr, frozen); the draft is not to be used after.
JobDraft = make_dataclass(
    "JobDraft", [(f.name, f.type, field(default=f.default, default_factory=f.default_factory)) for f in fields(Job)],
    slots=True, eq=False, repr=False, namespace={"job": _as_job})
JobDraft.__module__ = __name__  # make_dataclass's module= is Python 3.12's; the library runs on 3.11


class ClaimedJob:
    """A job as a worker claims it: what running it and fencing its writes need, read from its row
    at once; the full Job (`.job`) is built from the row on first use, since building one costs
    more than running a no-op job."""

    __slots__ = ("id", "task_name", "queue_name", "args", "kwargs", "attempt", "max_attempts", "lease_seconds",
                 "timeout_seconds", "workflow_id", "isolation", "crashes", "max_crashes", "trace_context", "lease",
                 "lease_from", "unreadable", "_build", "_job")

    def __init__(self, row: Any, args: list[Any], kwargs: dict[str, Any], build: Callable[[], Job],
                 unreadable: str | None = None):
        self.id: int = row["id"]
        self.task_name: str = row["task_name"]
        self.queue_name: str = row["queue_name"]
        self.args = args
        self.kwargs = kwargs
        self.attempt: int = row["attempt"]
        self.max_attempts: int = row["max_attempts"]
        self.lease_seconds: float = row["lease_seconds"]
        self.timeout_seconds: float | None = row["timeout_seconds"]  # the handler's time limit; None: no limit
        self.workflow_id: int | None = row["workflow_id"]  # its workflow, whose steps its end may release
        self.isolation: str | None = row["isolation"]  # chosen by its enqueue (Task.using); None: its task's
        self.crashes: int = row["crashes"]  # its earlier attempts' crashes; this attempt's, if it crashes, comes on top
        self.max_crashes: int = row["max_crashes"]
        self.trace_context: str | None = row["trace_context"]  # its enqueue's span (leased.tracing); None: untraced
        self.lease = Lease(self.id, self.attempt, row["lease_owner"])
        # When the claim statement was sent (time.monotonic()), if the backend knows: the lease runs
        # from no earlier. None: the engine counts it from the start of the claim call.
        self.lease_from: float | None = None
        # Why its stored arguments could not be read (None: they were): the attempt fails with it.
        self.unreadable = unreadable
        self._build = build
        self._job: Job | None = None

    @property
    def job(self) -> Job:
        if self._job is None:
            self._job = self._build()
        return self._job

    def __repr__(self) -> str:
        return f"<ClaimedJob {self.id} {self.task_name} attempt {self.attempt}>"
