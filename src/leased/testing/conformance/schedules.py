"""Schedules: each due tick of a periodic job enqueued once, whoever runs the schedules, planned
against the database's clock and the tick last recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from leased.backends.ports import TickPlan
from leased.facts import ScheduleTick
from leased.jobs import JobStatus, NewJob
from leased.testing.conformance.helpers import claim, done, job, new_job
from leased.testing.conformance.suite import MakeBackend, check


@dataclass
class EveryMinute:
    """A TickSource ticking on each whole minute, that catches up every missed tick. Its jobs' task
    is named as the schedule is, as a periodic task's is (why_facts finds the tick by it)."""

    name: str
    skip_overlap: bool = False
    expression: str = "every minute"
    timezone: str = "UTC"

    def plan(self, last_tick: datetime | None, now: datetime) -> TickPlan:
        minute = now.replace(second=0, microsecond=0)
        if last_tick is None:  # first seen: nothing runs until the next tick
            return TickPlan((), minute)
        ticks: list[datetime] = []
        while (tick := (ticks[-1] if ticks else last_tick) + timedelta(minutes=1)) <= now:
            ticks.append(tick)
        return TickPlan(tuple(ticks), ticks[-1] if ticks else last_tick)

    def new_job(self, tick: datetime) -> NewJob:
        return new_job(self.name, args_json=json.dumps([tick.isoformat()]))


@dataclass
class Replaying(EveryMinute):
    """A source that plans the same tick again, as a second worker with a stale view would."""

    tick: datetime | None = None

    def plan(self, last_tick: datetime | None, now: datetime) -> TickPlan:
        assert self.tick is not None
        return TickPlan((self.tick,), self.tick)


@check
def each_due_tick_is_enqueued_once(make: MakeBackend) -> None:
    backend = make()
    nightly = EveryMinute("a")
    assert backend.run_schedules([nightly]) == [], "a schedule seen first starts counting from now"
    now, (state,) = backend.schedule_states()
    assert (state.name, state.expression, state.timezone, state.last_job_id) == ("a", "every minute", "UTC", None)
    assert state.last_tick_at == now.replace(second=0, microsecond=0) and now.tzinfo is not None
    # To half a minute past the second tick: two are due, wherever in its minute the check began.
    backend.clock.advance((state.last_tick_at + timedelta(minutes=2, seconds=30) - now).total_seconds())
    outcomes = backend.run_schedules([nightly])
    first_tick = state.last_tick_at + timedelta(minutes=1)
    assert [outcome.tick_at for outcome in outcomes] == [first_tick, first_tick + timedelta(minutes=1)]
    assert all(outcome.schedule_name == "a" and outcome.job is not None for outcome in outcomes)
    jobs = [job(backend, outcome.job.id) for outcome in outcomes if outcome.job is not None]
    assert [each.args for each in jobs] == [[outcome.tick_at.isoformat()] for outcome in outcomes]
    assert backend.run_schedules([nightly]) == [], "a tick is handled once"
    facts = backend.why_facts(jobs[0].id)
    assert facts is not None and facts.scheduled_by == ScheduleTick("a", first_tick)
    _, (state,) = backend.schedule_states()
    assert (state.last_tick_at, state.last_job_id, state.last_job_status) == (
        outcomes[-1].tick_at, jobs[-1].id, JobStatus.PENDING)
    assert state.last_success_at is None
    for claimed in claim(backend):
        backend.finish([done(claimed.lease)])
    _, (state,) = backend.schedule_states()
    assert state.last_job_status is JobStatus.DONE and state.last_success_at is not None
    assert backend.run_schedules([Replaying("a", tick=first_tick)]) == [], \
        "a tick another worker wrote is not enqueued again"


@check
def a_tick_is_skipped_while_the_last_run_is_unfinished_if_asked(make: MakeBackend) -> None:
    backend = make()
    single = EveryMinute("b", skip_overlap=True)
    backend.run_schedules([single])
    backend.clock.advance(60)
    (ran,) = backend.run_schedules([single])
    assert ran.job is not None
    backend.clock.advance(60)
    (skipped,) = backend.run_schedules([single])
    assert skipped.job is None and skipped.tick_at == ran.tick_at + timedelta(minutes=1)
    _, (state,) = backend.schedule_states()
    assert (state.skipped_ticks, state.last_skipped_at, state.last_job_id) == (1, skipped.tick_at, ran.job.id)
    (claimed,) = claim(backend)
    backend.finish([done(claimed.lease)])
    backend.clock.advance(60)
    (again,) = backend.run_schedules([single])
    assert again.job is not None, "once the last run ended, the next tick runs"
