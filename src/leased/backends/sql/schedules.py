"""Periodic jobs in storage, one part over a database (database.py): each statement is the
same-named query of the dialect's queries.sql, and a tick's job is written by the database's
`insert(connection, jobs)`, enqueue's algorithm.

Exactly one job per tick, without a leader: the tick's row in leased_schedule_ticks has a primary
key on (schedule, tick time) and is written in the transaction that writes the job, so a second
worker's insert of the same tick conflicts and it writes nothing. The schedule's row is locked
for the transaction too (SQLite's write lock; FOR UPDATE on PostgreSQL), so workers take turns
and each plans from the last tick the previous one recorded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from leased.backends.sql.database import Database
from leased.backends.ports import ScheduleState, TickOutcome, TickSource
from leased.jobs import JobStatus

TICKS_KEPT = 100  # tick rows kept per schedule; older ones are pruned as new ones are written


class Schedules:
    def __init__(self, database: Database):
        self._database = database
        self._time_out = database.time_out
        self._time_in = database.time_in

    def schedule_states(self) -> tuple[datetime, list[ScheduleState]]:
        rows = self._database.rows
        now = self._time_out(rows("database_now")[0]["now"])
        return now, [self._state(row) for row in rows("list_schedules")]

    def _state(self, row: Any) -> ScheduleState:
        status = row["last_job_status"]
        return ScheduleState(
            name=row["name"], expression=row["expression"], timezone=row["timezone"],
            last_tick_at=self._time_out(row["last_tick_at"]), last_job_id=row["last_job_id"],
            last_job_status=None if status is None else JobStatus(status),
            last_success_at=self._time_out(row["last_success_at"]), skipped_ticks=row["skipped_ticks"],
            last_skipped_at=self._time_out(row["last_skipped_at"]), updated_at=self._time_out(row["updated_at"]))

    def run_schedules(self, sources: Sequence[TickSource]) -> list[TickOutcome]:
        outcomes: list[TickOutcome] = []
        with self._database.transaction() as connection:
            def run(query: str, **params: Any) -> Any:
                return self._database.execute(connection, query, **params)

            def one(query: str, **params: Any) -> Any:
                return run(query, **params).fetchone()

            now = self._time_out(one("database_now")["now"])
            for source in sources:
                run("ensure_schedule", name=source.name, expression=source.expression, timezone=source.timezone)
                state = one("lock_schedule", name=source.name)
                plan = source.plan(self._time_out(state["last_tick_at"]), now)
                last_job_id, skipped, last_skipped = state["last_job_id"], 0, None
                for tick in plan.ticks:
                    if one("claim_tick", schedule_name=source.name, tick_at=self._time_in(tick)) is None:
                        continue  # another worker wrote this tick
                    if source.skip_overlap and last_job_id is not None and one("job_active", job_id=last_job_id):
                        skipped, last_skipped = skipped + 1, tick
                        outcomes.append(TickOutcome(source.name, tick, None))
                        continue
                    ((job, _),) = self._database.insert(connection, [source.new_job(tick)])
                    run("set_tick_job", schedule_name=source.name, tick_at=self._time_in(tick), job_id=job.id)
                    last_job_id = job.id
                    outcomes.append(TickOutcome(source.name, tick, job))
                run("update_schedule", name=source.name, expression=source.expression, timezone=source.timezone,
                    last_tick_at=self._time_in(plan.last_tick), last_job_id=last_job_id, skipped=skipped,
                    last_skipped_at=None if last_skipped is None else self._time_in(last_skipped))
                if plan.ticks:
                    run("prune_ticks", schedule_name=source.name, keep=TICKS_KEPT)
        # After the commit; where the commit itself notifies (PostgreSQL) there is nothing to send.
        self._database.wake(outcome.job.queue_name for outcome in outcomes if outcome.job is not None)
        return outcomes
