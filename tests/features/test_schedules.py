"""Periodic jobs through the database, on every backend: one job per tick whoever ticks, catch-up
after downtime, overlap, removed and changed schedules, DST days, and what inspection shows.

Time is driven by writing a schedule's last tick into the past, as if every worker had been down
since: the scheduler then sees exactly what it would see after that downtime.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from conftest import raw_scalar, raw_sql, running_worker, time_literal, wait_for
from leased import Leased
from leased.engine.scheduler import Scheduler
from leased.testing import advance


def scheduler(app: Leased) -> Scheduler:
    """The worker's scheduler service for this app, run one wake-up at a time by the test."""
    return Scheduler(app.backend, list(app.schedules.values()), wake_claimer=lambda: None,
                     poll_interval=1.0, worker_id="test")


def set_last_tick(app: Leased, name: str, when: datetime) -> None:
    raw_sql(app, f"UPDATE leased_schedules SET last_tick_at = {time_literal(app, when)} WHERE name = '{name}'")


def scheduled_times(app: Leased, name: str) -> list[datetime]:
    jobs = app.list_jobs(task_name=name, limit=10_000, order="oldest")
    return [datetime.fromisoformat(job.kwargs["scheduled_at"]) for job in jobs]


def state(app: Leased, name: str):
    return next(info for info in app.list_schedules() if info.name == name)


def hourly_half_an_hour_from_now() -> str:
    """An hourly cron whose latest tick is about 30 minutes old whenever the test runs."""
    return f"{(datetime.now(UTC).minute + 30) % 60} * * * *"


def test_a_new_schedule_runs_nothing_until_its_first_tick_then_one_job_per_tick(app):
    @app.periodic(every=timedelta(minutes=1), name="beat")
    def beat(scheduled_at): ...

    scheduler(app).run_once()
    first = state(app, "beat")
    assert app.list_jobs(task_name="beat") == [] and first.last_tick_at is not None
    assert first.next_run_at == first.last_tick_at + timedelta(minutes=1)
    set_last_tick(app, "beat", first.last_tick_at - timedelta(minutes=1))
    scheduler(app).run_once()
    scheduler(app).run_once()  # a second wake-up finds the tick taken
    assert scheduled_times(app, "beat") == [first.last_tick_at]


def test_the_handler_receives_the_tick_as_an_aware_datetime_in_the_schedule_zone(app):
    received = []

    @app.periodic("*/5 * * * *", name="digest", timezone="Europe/Paris")
    def digest(scheduled_at: datetime) -> str:
        received.append(scheduled_at)
        return scheduled_at.isoformat()

    scheduler(app).run_once()
    last = state(app, "digest").last_tick_at
    set_last_tick(app, "digest", last - timedelta(minutes=5))
    scheduler(app).run_once()
    app.run_until_empty()
    assert received == [last.astimezone(ZoneInfo("Europe/Paris"))]
    assert received[0].tzinfo is not None and received[0].utcoffset() in (timedelta(hours=1), timedelta(hours=2))


@pytest.mark.parametrize("catch_up, expected", [("latest", 1), ("all", 5), ("none", 0)])
def test_after_downtime_the_catch_up_policy_decides_how_many_missed_ticks_run(app, catch_up, expected):
    @app.periodic(hourly_half_an_hour_from_now(), name="report", catch_up=catch_up)
    def report(scheduled_at): ...

    scheduler(app).run_once()
    latest = state(app, "report").last_tick_at
    set_last_tick(app, "report", latest - timedelta(hours=5))  # down for five ticks
    scheduler(app).run_once()
    ticks = scheduled_times(app, "report")
    assert ticks == [latest - timedelta(hours=n) for n in range(expected - 1, -1, -1)]
    assert state(app, "report").last_tick_at == latest  # the missed ticks are handled, run or not
    scheduler(app).run_once()
    assert len(scheduled_times(app, "report")) == expected


def test_catch_up_all_stops_at_its_limit(app):
    @app.periodic(every=timedelta(seconds=1), name="fast", catch_up="all", catch_up_limit=150)
    def fast(scheduled_at): ...

    scheduler(app).run_once()
    latest = state(app, "fast").last_tick_at
    set_last_tick(app, "fast", latest - timedelta(seconds=400))
    scheduler(app).run_once()
    ticks = scheduled_times(app, "fast")[:150]
    # The newest 150 of the 400 missed ticks, one a second. The second pass may start a second or
    # more after the first (a busy machine), so they end at `latest` or after it.
    assert len(ticks) == 150 and ticks == [ticks[-1] - timedelta(seconds=149 - n) for n in range(150)]
    assert ticks[-1] >= latest
    assert raw_scalar(app, "SELECT count(*) FROM leased_schedule_ticks WHERE schedule_name = 'fast'") == 100  # pruned


def test_a_tick_is_enqueued_once_even_if_the_schedule_state_is_set_back(app):
    """The tick rows, not only the state row, make one job per tick: replaying a tick writes nothing."""

    @app.periodic(every=timedelta(seconds=1), name="once", catch_up="all")
    def once(scheduled_at): ...

    scheduler(app).run_once()
    latest = state(app, "once").last_tick_at
    set_last_tick(app, "once", latest - timedelta(seconds=5))
    scheduler(app).run_once()
    set_last_tick(app, "once", latest - timedelta(seconds=5))
    scheduler(app).run_once()
    ticks = scheduled_times(app, "once")
    assert len(ticks) == len(set(ticks)) and ticks[:5] == [latest - timedelta(seconds=4 - n) for n in range(5)]


def test_workers_ticking_at_once_write_one_job_per_tick(app, database_url):
    @app.periodic(every=timedelta(seconds=1), name="race", catch_up="all")
    def race(scheduled_at): ...

    scheduler(app).run_once()
    set_last_tick(app, "race", state(app, "race").last_tick_at - timedelta(seconds=30))
    apps = [Leased(database_url) for _ in range(4)]
    for other in apps:
        other.periodic(every=timedelta(seconds=1), name="race", catch_up="all")(race.func)
    start = threading.Barrier(len(apps))
    failures = []

    def tick(other: Leased) -> None:
        try:
            start.wait()
            for _ in range(3):
                scheduler(other).run_once()
        except Exception as error:
            failures.append(error)

    threads = [threading.Thread(target=tick, args=(other,)) for other in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for other in apps:
        other.close()
    assert failures == []
    ticks = scheduled_times(app, "race")
    assert len(ticks) >= 30 and len(ticks) == len(set(ticks))
    assert {b - a for a, b in pairwise(ticks)} == {timedelta(seconds=1)}  # and none missing


def test_overlap_skip_skips_a_tick_while_the_last_run_is_pending_and_records_it(app):
    @app.periodic(every=timedelta(minutes=1), name="slow", overlap="skip")
    def slow(scheduled_at): ...

    # Mid-minute by the app's clock: the ticks compared below are a minute apart, and a run that
    # straddled a minute's turn saw the next one (a fast-loop run failed so, at 14:39:59).
    advance(app, (30 - datetime.now(UTC).second) % 60)

    scheduler(app).run_once()
    latest = state(app, "slow").last_tick_at
    set_last_tick(app, "slow", latest - timedelta(minutes=1))
    scheduler(app).run_once()  # runs: nothing before it
    set_last_tick(app, "slow", latest - timedelta(minutes=1))  # the next tick comes round (as a replay would not)
    raw_sql(app, "DELETE FROM leased_schedule_ticks")
    scheduler(app).run_once()  # skipped: the first run is still pending
    skipped = state(app, "slow")
    assert len(scheduled_times(app, "slow")) == 1
    assert skipped.skipped_ticks == 1 and skipped.last_skipped_at == latest and skipped.last_job_status == "pending"

    app.run_until_empty()
    set_last_tick(app, "slow", latest - timedelta(minutes=1))
    raw_sql(app, "DELETE FROM leased_schedule_ticks")
    scheduler(app).run_once()  # the last run is done: this tick runs
    assert len(scheduled_times(app, "slow")) == 2 and state(app, "slow").skipped_ticks == 1


def test_overlap_allow_runs_every_tick_while_the_last_run_is_pending(app):
    @app.periodic(every=timedelta(seconds=1), name="busy", catch_up="all")
    def busy(scheduled_at): ...

    scheduler(app).run_once()
    set_last_tick(app, "busy", state(app, "busy").last_tick_at - timedelta(seconds=3))
    scheduler(app).run_once()
    assert len(scheduled_times(app, "busy")) >= 3 and state(app, "busy").skipped_ticks == 0


def test_a_schedule_removed_from_the_code_stops(app, database_url):
    @app.periodic(every=timedelta(seconds=1), name="old")
    def old(scheduled_at): ...

    scheduler(app).run_once()
    set_last_tick(app, "old", state(app, "old").last_tick_at - timedelta(seconds=5))
    redeployed = Leased(database_url)

    @redeployed.periodic(every=timedelta(seconds=1), name="new")
    def new(scheduled_at): ...

    scheduler(redeployed).run_once()
    assert app.list_jobs(task_name="old") == []
    listed = {info.name: info for info in redeployed.list_schedules()}
    assert listed["old"].registered is False and listed["new"].registered is True
    assert listed["old"].next_run_at < datetime.now(UTC)  # overdue: nobody runs it any more
    redeployed.close()


def test_a_changed_expression_takes_effect_at_the_next_tick(app, database_url):
    @app.periodic(every=timedelta(hours=1), name="poll")
    def poll(scheduled_at): ...

    scheduler(app).run_once()
    hourly_tick = state(app, "poll").last_tick_at
    redeployed = Leased(database_url)
    redeployed.periodic(every=timedelta(minutes=1), name="poll")(poll.func)
    scheduler(redeployed).run_once()  # the minutely ticks since the last hourly one: the latest runs
    minutely_tick = state(redeployed, "poll").last_tick_at
    assert minutely_tick.second == 0 and datetime.now(UTC) - minutely_tick < timedelta(minutes=2)
    assert scheduled_times(app, "poll") == ([] if minutely_tick == hourly_tick else [minutely_tick])
    assert state(redeployed, "poll").expression == "every 60s"
    redeployed.close()


def test_a_daily_0230_in_paris_runs_once_on_both_dst_days_through_the_database(app):
    @app.periodic("30 2 * * *", name="nightly", timezone="Europe/Paris", catch_up="all", catch_up_limit=10_000)
    def nightly(scheduled_at): ...

    scheduler(app).run_once()
    set_last_tick(app, "nightly", datetime(2025, 3, 28, tzinfo=UTC))
    scheduler(app).run_once()
    local = [tick.astimezone(ZoneInfo("Europe/Paris")) for tick in scheduled_times(app, "nightly")]
    days = [tick.date().isoformat() for tick in local]
    assert len(days) == len(set(days)), "one run a day"
    by_day = {tick.date().isoformat(): tick.isoformat() for tick in local}
    assert by_day["2025-03-30"] == "2025-03-30T03:30:00+02:00"  # 02:30 did not exist
    assert by_day["2025-10-26"] == "2025-10-26T02:30:00+02:00"  # 02:30 happened twice: the first
    assert by_day["2025-03-29"] == "2025-03-29T02:30:00+01:00"


def test_run_until_empty_does_not_tick_schedules(app):
    @app.periodic(every=timedelta(seconds=1), name="beat")
    def beat(scheduled_at): ...

    scheduler(app).run_once()
    set_last_tick(app, "beat", state(app, "beat").last_tick_at - timedelta(seconds=10))
    app.run_until_empty()
    assert app.list_jobs(task_name="beat") == []


def test_the_last_success_and_status_are_what_inspection_shows(app):
    @app.periodic(every=timedelta(minutes=1), name="report")
    def report(scheduled_at): ...

    scheduler(app).run_once()
    set_last_tick(app, "report", state(app, "report").last_tick_at - timedelta(minutes=1))
    scheduler(app).run_once()
    assert state(app, "report").last_job_status == "pending" and state(app, "report").last_success_at is None
    app.run_until_empty()
    done = state(app, "report")
    assert done.last_job_status == "done" and done.last_success_at is not None



def test_a_schedule_whose_stored_state_cannot_be_computed_is_skipped_and_the_others_tick(app, caplog):
    @app.periodic(every=timedelta(seconds=1), name="healthy")
    def healthy(scheduled_at): ...

    @app.periodic(every=timedelta(hours=1), name="broken")
    def broken(scheduled_at): ...

    scheduler(app).run_once()
    # Edited by hand (or written by another version): the tick after it is past year 9999.
    set_last_tick(app, "broken", datetime(9999, 12, 31, 23, 30, tzinfo=UTC))
    with running_worker(app, poll_interval=0.05) as worker:
        wait_for(lambda: len(scheduled_times(app, "healthy")) >= 2 or worker.stopping, message="two healthy ticks")
        assert not worker.stopping, "the worker stopped over one schedule's arithmetic"
    assert app.list_jobs(task_name="broken") == []
    reported = [record.getMessage() for record in caplog.records if "schedule broken" in record.getMessage()]
    assert len(reported) == 1, "logged once, not at every wake-up"
    assert "cannot compute its ticks" in reported[0] and "skipped" in reported[0]
    assert state(app, "broken").next_run_at is None, "inspection shows it without a next run, and does not fail"


class ReadBeforeTheEdit:
    """The real backend, but its read of the schedules answers what was stored before a hand edit,
    as if the edit landed between a wake-up's read and its write transaction."""

    def __init__(self, backend, states):
        self.backend, self.states = backend, states

    def schedule_states(self):
        return self.states

    def run_schedules(self, sources):
        return self.backend.run_schedules(sources)


def test_a_schedule_edited_between_the_read_and_the_write_is_left_out_and_the_others_tick(app, caplog):
    @app.periodic(every=timedelta(seconds=1), name="healthy")
    def healthy(scheduled_at): ...

    @app.periodic(every=timedelta(hours=1), name="broken")
    def broken(scheduled_at): ...

    scheduler(app).run_once()
    for name in ("healthy", "broken"):  # both due
        set_last_tick(app, name, state(app, name).last_tick_at - timedelta(hours=1))
    read = app.backend.schedule_states()
    set_last_tick(app, "broken", datetime(9999, 12, 31, 23, 30, tzinfo=UTC))
    Scheduler(ReadBeforeTheEdit(app.backend, read), list(app.schedules.values()), wake_claimer=lambda: None,
              poll_interval=1.0, worker_id="test").run_once()
    assert len(scheduled_times(app, "healthy")) == 1 and app.list_jobs(task_name="broken") == []
    reported = [record.getMessage() for record in caplog.records if "schedule broken" in record.getMessage()]
    assert len(reported) == 1 and "9999-12-31T23:30:00+00:00" in reported[0]
