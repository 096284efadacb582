"""What the database knew about one job at one instant: the value a backend's why_facts() reads in
one snapshot and leased.explain turns into reasons. Values only, so the storage seam and the
explainer both depend on it and not on each other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from leased.admin import OldTransaction, WorkerInfo
from leased.jobs import Job
from leased.limits import Rate
from leased.runs import RunWhen

# Jobs ahead are counted up to this many; beyond it, "more than 10,000" says enough.
AHEAD_LIMIT = 10_000
RUNNING_NAMED = 3  # a full concurrency limit names this many of its running jobs


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the database knew about one job at one instant (`now`, by its own clock)."""

    job: Job  # with its history
    now: datetime
    workers: tuple[WorkerInfo, ...]  # every row of the workers table, alive or silent
    jobs_ahead: int | None = None  # pending jobs only: due jobs of its queue a claim takes first, up to AHEAD_LIMIT + 1
    queue_paused_at: datetime | None = None  # when its queue was paused; None: the queue runs
    limits: tuple[LimitFact, ...] = ()  # pending jobs only: the limits of its key and of its queue
    scheduled_by: ScheduleTick | None = None  # the schedule tick that enqueued it, if one did
    old_transactions: tuple[OldTransaction, ...] = ()  # pending jobs only: what holds back vacuum (PostgreSQL)
    step: StepRow | None = None  # a workflow step's own row; None for a job of no workflow
    fairness: FairnessFact | None = None  # pending jobs with a fairness key only: its key's share


@dataclass(frozen=True, slots=True)
class FairnessFact:
    """A fair job's key among its queue's waiting keys (up to AHEAD_LIMIT of them read)."""

    fairness_key: str
    weight: float
    keys_waiting: int  # keys of the queue with jobs waiting, its own included
    total_weight: float  # of those keys
    keys_ahead: int  # keys of a lesser pass: a claim serves them before this key's next job
    running_with_key: int  # the queue's running jobs of this key
    running_in_queue: int  # the queue's running jobs


@dataclass(frozen=True, slots=True)
class StepRow:
    """A workflow step's own row, as the finish that settled it wrote it."""

    run_when: RunWhen
    cancelled_by_parents: bool  # its parents' ends cancelled it (or skipped it), not a person


@dataclass(frozen=True, slots=True)
class LimitFact:
    """One concurrency or rate limit a claim of the job must fit in, counted as claim_limited counts."""

    scope: str  # "key" (the job's concurrency key, with its head job's limits) or "queue"
    name: str  # the key, or the queue's name
    concurrency: int | None  # None: no cap on running jobs
    running: int  # its running jobs
    rate: Rate | None  # None: no rate limit
    starts: int  # its starts within the rate window
    running_jobs: tuple[tuple[int, str | None], ...] = ()  # (job id, worker) of up to RUNNING_NAMED of them
    next_slot_at: datetime | None = None  # when a full rate window next lets one start

    @property
    def concurrency_full(self) -> bool:
        return self.concurrency is not None and self.running >= self.concurrency

    @property
    def rate_full(self) -> bool:
        return self.rate is not None and self.starts >= self.rate.count


@dataclass(frozen=True, slots=True)
class ScheduleTick:
    schedule_name: str
    tick_at: datetime

