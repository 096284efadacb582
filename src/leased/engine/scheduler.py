"""The scheduler: a worker's service that enqueues the due ticks of its periodic tasks.

Every worker with periodic tasks runs one, and none leads: the database writes one job per tick
whoever gets there first (see backends/sql/schedules.py). It sleeps until the next tick is due by the
database's clock, at most a poll interval, then reads the schedules' state; only when a tick is
due does it open a write transaction, so an idle schedule costs a read per wake-up.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Callable, Protocol, Sequence

from leased.backends.ports import RuntimePort, TickSource
from leased.engine.retrying import Outage, is_transient, one_line

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
        due = [schedule for schedule in self.schedules if _moves(schedule, last_ticks.get(schedule.name), now)]
        if due:
            outcomes = self.backend.run_schedules(due)
            if any(outcome.job is not None for outcome in outcomes):
                self.wake_claimer()
            for outcome in outcomes:
                if outcome.job is None:
                    log.warning("schedule %s: tick %s skipped, its previous run is still pending or running",
                                outcome.schedule_name, outcome.tick_at.isoformat())
        next_tick = min(schedule.next_tick_after(now) for schedule in self.schedules)
        return min(max((next_tick - now).total_seconds(), SHORTEST_NAP), self.poll_interval)


def _moves(schedule: ScheduledTicks, last_tick: datetime | None, now: datetime) -> bool:
    """Whether a run would write anything: a tick to enqueue, or ticks passed over to record."""
    plan = schedule.plan(last_tick, now)
    return last_tick is None or bool(plan.ticks) or plan.last_tick != last_tick
