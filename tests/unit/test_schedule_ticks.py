"""A schedule's ticks as a pure function of (expression, time zone, last tick, now): tables for the
DST days, properties over many zones and moments, the catch-up policies, and bad input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leased import Leased
from leased.errors import ConfigurationError
from leased.schedules import ON_TIME_SECONDS, make_schedule

PARIS = ZoneInfo("Europe/Paris")


def schedule(cron=None, every=None, timezone="UTC", catch_up="latest", catch_up_limit=100, overlap="allow"):
    return make_schedule("s", cron, every, timezone, catch_up, catch_up_limit, overlap)


def utc(*fields) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def paris_days(ticks: list[datetime]) -> list[str]:
    return [tick.astimezone(PARIS).isoformat() for tick in ticks]


def test_a_daily_0230_runs_once_on_the_spring_forward_day_at_the_shifted_time():
    daily = schedule("30 2 * * *", timezone="Europe/Paris")
    ticks = daily.ticks_between(utc(2026, 3, 27), utc(2026, 3, 31), 100)
    assert paris_days(ticks) == ["2026-03-27T02:30:00+01:00", "2026-03-28T02:30:00+01:00",
                                 "2026-03-29T03:30:00+02:00",  # 02:30 does not exist: shifted by the gap
                                 "2026-03-30T02:30:00+02:00"]


def test_a_daily_0230_runs_once_on_the_fall_back_day_at_the_first_occurrence():
    daily = schedule("30 2 * * *", timezone="Europe/Paris")
    ticks = daily.ticks_between(utc(2026, 10, 23), utc(2026, 10, 27), 100)
    assert paris_days(ticks) == ["2026-10-23T02:30:00+02:00", "2026-10-24T02:30:00+02:00",
                                 "2026-10-25T02:30:00+02:00",  # 02:30 happens twice: the first one only
                                 "2026-10-26T02:30:00+01:00"]


@pytest.mark.parametrize("cron, expected", [
    ("0,30 2 * * *", ["03:00+0200", "03:30+0200"]),  # both nonexistent times, each shifted once
    ("*/30 1-3 * * *", ["01:00+0100", "01:30+0100", "03:00+0200", "03:30+0200"]),  # 02:xx meet 03:xx
])
def test_several_times_in_the_spring_gap(cron, expected):
    ticks = schedule(cron, timezone="Europe/Paris").ticks_between(utc(2026, 3, 28, 23), utc(2026, 3, 29, 5), 100)
    assert [tick.astimezone(PARIS).strftime("%H:%M%z") for tick in ticks] == expected


def test_every_five_minutes_keeps_five_minute_steps_across_spring_and_runs_the_repeated_hour_once():
    every5 = schedule("*/5 * * * *", timezone="Europe/Paris")
    spring = every5.ticks_between(utc(2026, 3, 29, 0), utc(2026, 3, 29, 2), 1000)
    assert {b - a for a, b in pairwise(spring)} == {timedelta(minutes=5)}
    autumn = every5.ticks_between(utc(2026, 10, 24, 23), utc(2026, 10, 25, 3), 1000)
    steps = [b - a for a, b in pairwise(autumn)]
    assert steps.count(timedelta(minutes=65)) == 1 and set(steps) == {timedelta(minutes=5), timedelta(minutes=65)}


def test_every_ticks_are_multiples_of_the_interval_since_the_epoch_whatever_the_zone():
    for zone in ("UTC", "Europe/Paris", "Asia/Kolkata"):
        every = schedule(every=timedelta(minutes=15), timezone=zone)
        assert every.next_tick_after(utc(2026, 3, 29, 1, 7, 30)) == utc(2026, 3, 29, 1, 15)
        assert every.next_tick_after(utc(2026, 3, 29, 1, 15)) == utc(2026, 3, 29, 1, 30)


ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Australia/Sydney", "America/Santiago"]
CRONS = ["*/5 * * * *", "30 2 * * *", "0,30 1-3 * * *", "15 */2 * * 1-5", "0 0 1 * *", "59 23 * * 0"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CRONS), st.sampled_from(ZONES),
       st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)),
       st.integers(min_value=1, max_value=12))
def test_ticks_rise_and_every_wall_clock_match_runs_exactly_once(cron, zone, start, hours):
    spec = schedule(cron, timezone=zone)
    until = start + timedelta(hours=hours * 6)
    ticks = spec.ticks_between(start, until, 100_000)
    assert all(start < tick <= until for tick in ticks)
    assert ticks == sorted(set(ticks)), "ticks rise strictly"
    # Walking one tick at a time gives the same ticks as asking for the range.
    walked, tick = [], spec.next_tick_after(start)
    while tick <= until:
        walked.append(tick)
        tick = spec.next_tick_after(tick)
    assert walked == ticks
    # The last few of a range are the tail of the whole range.
    assert spec.ticks_between(start, until, 3) == ticks[-3:]
    # Each tick lands on a wall-clock time the expression matches, or on one shifted out of a gap.
    from croniter import croniter

    for tick in ticks:
        local = tick.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        shifted = local - (tick.astimezone(ZoneInfo(zone)).utcoffset() - (tick - timedelta(hours=3)).astimezone(
            ZoneInfo(zone)).utcoffset())
        assert croniter.match(cron, local) or croniter.match(cron, shifted)


def test_a_year_of_downtime_costs_no_year_of_ticks():
    minutely = schedule("* * * * *", timezone="Europe/Paris")
    ticks = minutely.ticks_between(utc(2025, 11, 30), utc(2026, 11, 30, 12, 0, 30), 1)
    assert ticks == [utc(2026, 11, 30, 12, 0)]


NOW = utc(2026, 11, 30, 12, 0, 30)


@pytest.mark.parametrize("catch_up, last_tick, expected", [
    ("latest", utc(2026, 11, 30, 11, 55), [utc(2026, 11, 30, 12, 0)]),
    ("latest", utc(2026, 11, 30, 12, 0), []),  # nothing new
    ("all", utc(2026, 11, 30, 11, 57), [utc(2026, 11, 30, 11, 58), utc(2026, 11, 30, 11, 59),
                                        utc(2026, 11, 30, 12, 0)]),
    ("all", utc(2026, 11, 30, 11, 0), [utc(2026, 11, 30, 12, 0) - timedelta(minutes=n) for n in (2, 1, 0)]),
    ("none", utc(2026, 11, 30, 11, 55), [utc(2026, 11, 30, 12, 0)]),  # the current tick is on time
])
def test_catch_up_policies_on_a_minutely_schedule(catch_up, last_tick, expected):
    spec = schedule("* * * * *", catch_up=catch_up, catch_up_limit=3)
    plan = spec.plan(last_tick, NOW)
    assert list(plan.ticks) == expected
    assert plan.last_tick == max([last_tick, *expected])


def test_catch_up_none_runs_nothing_once_the_latest_tick_is_late():
    hourly = schedule("0 * * * *", catch_up="none")
    late = NOW + timedelta(seconds=ON_TIME_SECONDS + 1)
    plan = hourly.plan(utc(2026, 11, 30, 6), late)
    assert plan.ticks == () and plan.last_tick == utc(2026, 11, 30, 12)
    assert schedule("0 * * * *", catch_up="latest").plan(utc(2026, 11, 30, 6), late).ticks == (utc(2026, 11, 30, 12),)


def test_a_schedule_seen_for_the_first_time_runs_nothing_until_its_next_tick():
    plan = schedule("0 * * * *").plan(None, NOW)
    assert plan.ticks == () and plan.last_tick == utc(2026, 11, 30, 12)


def test_a_changed_expression_takes_effect_at_the_next_tick():
    last = utc(2026, 11, 30, 12)
    assert schedule("0 * * * *").plan(last, utc(2026, 11, 30, 12, 5, 1)).ticks == ()
    assert schedule("*/5 * * * *").plan(last, utc(2026, 11, 30, 12, 5, 1)).ticks == (utc(2026, 11, 30, 12, 5),)


@pytest.mark.parametrize("options, message", [
    ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
    ({"cron": "* * * *"}, "give five fields"),
    ({"cron": "*/5 * * * * 10"}, "for intervals under a minute use every="),
    ({"cron": "0 0 31 2 *"}, "never matches"),
    ({"cron": "*/5 * * * *", "timezone": "Europe/Pariss"}, "unknown timezone 'Europe/Pariss'"),
    ({"cron": "*/5 * * * *", "every": timedelta(minutes=5)}, "not both"),
    ({}, "give a cron expression"),
    ({"every": timedelta(milliseconds=500)}, "every must be a timedelta of at least one second"),
    ({"every": 5}, "every must be a timedelta"),
    ({"every": timedelta(minutes=1), "catch_up": "some"}, "invalid catch_up 'some'"),
    ({"every": timedelta(minutes=1), "catch_up_limit": 0}, "invalid catch_up_limit 0"),
    ({"every": timedelta(minutes=1), "overlap": "queue"}, "invalid overlap 'queue'"),
    ({"every": timedelta(days=999_999_999)}, "every=datetime.timedelta(days=999999999) is too long"),
    ({"every": timedelta(days=365), "catch_up": "all", "catch_up_limit": 10_000},
     "every × catch_up_limit (3650000 days) is too long"),
])
def test_bad_schedules_are_one_line_errors_at_decoration(tmp_path, options, message):
    app = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")
    cron = options.pop("cron", None)
    with pytest.raises(ConfigurationError, match=re.escape(message)) as error:
        @app.periodic(cron, name="digest", **options)
        def digest(scheduled_at): ...
    assert "\n" not in str(error.value) and "periodic task 'digest'" in str(error.value)
    assert app.tasks == {} and app.schedules == {}


def test_a_handler_without_scheduled_at_is_refused(tmp_path):
    app = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match="must take a `scheduled_at` parameter"):
        @app.periodic(every=timedelta(minutes=1), name="digest")
        def digest(): ...


@pytest.mark.parametrize("options, fix", [
    ({"every": timedelta(days=999_999_999)}, "use every=timedelta(days=719162) at most"),
    ({"every": timedelta(days=365), "catch_up": "all", "catch_up_limit": 10_000}, "use catch_up_limit=1970 at most"),
])
def test_a_schedule_whose_ticks_cannot_be_computed_is_refused_with_the_fix(options, fix):
    with pytest.raises(ConfigurationError, match=re.escape(fix)):
        schedule(**options)


def test_the_longest_every_accepted_computes_its_ticks():
    for longest in (schedule(every=timedelta(days=719_162)),
                    schedule(every=timedelta(days=365), catch_up="all", catch_up_limit=1970)):
        plan = longest.plan(NOW - longest.every, NOW)
        assert plan.last_tick <= NOW and longest.next_tick_after(NOW) > NOW
