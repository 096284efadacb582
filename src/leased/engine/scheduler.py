"""The scheduler: a worker's service that enqueues the due ticks of its periodic tasks.

Every worker with periodic tasks runs one, and none leads: the database writes one job per tick
whoever gets there first (see backends/sql/schedules.py). It sleeps until the next tick is due by the
database's clock, at most a poll interval, then reads the schedules' state; only when a tick is
due does it open a write transaction, so an idle schedule costs a read per wake-up.

A schedule whose ticks cannot be computed (its stored last tick edited to the end of year 9999, or
written by another version) is that schedule's failure, not the worker's: it is logged once, with
its name and why, and left out while the other schedules keep ticking.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Callable, Protocol, Sequence

from leased.backends.ports import RuntimePort, TickOutcome, TickPlan, TickSource
from leased.engine.retrying import Outage, is_transient, one_line
from leased.jobs import NewJob
from leased.schedules import TICK_ERRORS

log = logging.getLogger("leased.scheduler")

SHORTEST_NAP = 0.005  # woken a little before the database's clock reaches the tick: look again soon


class ScheduledTicks(TickSource, Protocol):
    def next_tick_after(self, moment: datetime) -> datetime: ...


class Scheduler:
    def __init__(self, backend: RuntimePort, schedules: Sequence[ScheduledTicks], *, wake_claimer: Callable[[], None],
                 poll_interval: float, worker_id: str):
        self.backend = backend
        self.schedules = list(schedules)
        self.wake_claimer = wake_claimer
        self.poll_interval = poll_interval
        self.worker_id = worker_id
        self._uncomputable: dict[str, str] = {}  # schedule name: why its ticks cannot be computed, as logged

    async def run(self) -> None:
        outage = Outage()
        while True:
            try:
                nap = await asyncio.to_thread(self.run_once)
            except Exception as error:
                if not is_transient(error):
                    raise
                nap = outage.failed()
                log.warning("worker %s: scheduler cannot reach the database (%s); retrying in %.1fs",
                            self.worker_id, one_line(error), nap)
            else:
                outage.ended()
            await asyncio.sleep(nap)

    def run_once(self) -> float:
        """Enqueue every due tick; returns the seconds until the next one is due (at most the poll interval)."""
        now, states = self.backend.schedule_states()
        last_ticks = {state.name: state.last_tick_at for state in states}
        due, next_ticks = [], []
        for schedule in self.schedules:
            last_tick = last_ticks.get(schedule.name)
            try:
                moves = _moves(schedule, last_tick, now)
                next_ticks.append(schedule.next_tick_after(now))
            except TICK_ERRORS as error:
                self._cannot_compute(schedule, last_tick, error)
                continue
            if self._uncomputable.pop(schedule.name, None) is not None:
                log.info("schedule %s: its ticks can be computed again; it runs again", schedule.name)
            if moves:
                due.append(schedule)
        if due:
            outcomes = self._run(due)
            if any(outcome.job is not None for outcome in outcomes):
                self.wake_claimer()
            for outcome in outcomes:
                if outcome.job is None:
                    log.warning("schedule %s: tick %s skipped, its previous run is still pending or running",
                                outcome.schedule_name, outcome.tick_at.isoformat())
        if not next_ticks:
            return self.poll_interval
        return min(max((min(next_ticks) - now).total_seconds(), SHORTEST_NAP), self.poll_interval)

    def _run(self, due: list[ScheduledTicks]) -> list[TickOutcome]:
        """The due schedules' ticks, written in one transaction. Each plans again there, from its row as
        locked: a row changed since it was read can fail to compute, and then the others go on without it."""
        while due:
            try:
                return self.backend.run_schedules([_Contained(schedule) for schedule in due])
            except _Uncomputable as failed:  # nothing was written: the transaction rolled back
                self._cannot_compute(failed.schedule, failed.last_tick, failed.cause)
                due = [schedule for schedule in due if schedule is not failed.schedule]
        return []

    def _cannot_compute(self, schedule: ScheduledTicks, last_tick: datetime | None, error: Exception) -> None:
        reason = f"{type(error).__name__}: {one_line(error)}"
        if self._uncomputable.get(schedule.name) != reason:  # once, not at every wake-up
            self._uncomputable[schedule.name] = reason
            log.error("schedule %s: cannot compute its ticks (%s; its stored last tick: %s); skipped until it "
                      "can, while the other schedules go on", schedule.name, reason,
                      "none" if last_tick is None else last_tick.isoformat())


def _moves(schedule: ScheduledTicks, last_tick: datetime | None, now: datetime) -> bool:
    """Whether a run would write anything: a tick to enqueue, or ticks passed over to record."""
    plan = schedule.plan(last_tick, now)
    return last_tick is None or bool(plan.ticks) or plan.last_tick != last_tick


class _Uncomputable(Exception):
    def __init__(self, schedule: ScheduledTicks, last_tick: datetime | None, cause: Exception):
        super().__init__(f"schedule {schedule.name}: {cause}")
        self.schedule, self.last_tick, self.cause = schedule, last_tick, cause


class _Contained:
    """A schedule as run_schedules sees it, whose plan failing names the schedule that failed."""

    def __init__(self, schedule: ScheduledTicks):
        self.schedule = schedule
        self.name, self.expression, self.timezone = schedule.name, schedule.expression, schedule.timezone
        self.skip_overlap = schedule.skip_overlap

    def plan(self, last_tick: datetime | None, now: datetime) -> TickPlan:
        try:
            return self.schedule.plan(last_tick, now)
        except TICK_ERRORS as error:
            raise _Uncomputable(self.schedule, last_tick, error) from error

    def new_job(self, tick: datetime) -> NewJob:
        return self.schedule.new_job(tick)
