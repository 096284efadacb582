"""Periodic jobs: a schedule's ticks, as pure functions of (expression, time zone, last tick, now).

Every worker that has a periodic task registered computes the same tick times from the same
inputs, and the database keeps one job per (schedule, tick): no leader, and no worker's clock
decides anything (`now` is the database's).

Time zones. A cron expression is matched against wall-clock time in the schedule's zone, then
each matching wall-clock time becomes one instant:
- a time that does not exist (the spring-forward gap) runs once, shifted forward by the gap:
  02:30 on Europe/Paris's 2026-03-29 runs at 03:30 CEST;
- a time that exists twice (the autumn fall-back) runs once, at its first occurrence: 02:30 on
  2026-10-25 runs at 02:30 CEST, not again at 02:30 CET. So a `*/5 * * * *` schedule in such a
  zone does not tick through the repeated hour; use `every=` or timezone="UTC" for that.
`every=` ticks are multiples of the interval since the Unix epoch (UTC), whatever the zone, so
that every worker agrees on them; the zone only sets the offset of the `scheduled_at` passed in.
"""

from __future__ import annotations

import functools
import inspect
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from leased.backends.ports import TickPlan
from leased.errors import ConfigurationError
from leased.jobs import NewJob

if TYPE_CHECKING:
    from leased.tasks import Task

CATCH_UP_POLICIES = ("latest", "all", "none")
OVERLAP_POLICIES = ("allow", "skip")
ON_TIME_SECONDS = 60.0  # a tick this late when first seen still runs under catch_up="none"
DST_MARGIN = timedelta(hours=3)  # more than any zone's change of offset at a DST transition
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CRON_FIELDS = "minute hour day-of-month month day-of-week"
# How far back from now an every= schedule's arithmetic may reach (every × the ticks it catches up):
# from the epoch its ticks count from back to year 1, where datetime ends. Now is never before the
# epoch, so such a look-back stays within datetime's range, and so does the next tick (now + every)
# until the year 8000.
LONGEST_LOOK_BACK = _EPOCH - datetime(1, 1, 1, tzinfo=UTC)  # 719162 days
# What tick arithmetic raises when it leaves datetime's range or cannot be done (an interval of
# zero, say); croniter's errors are ValueErrors.
TICK_ERRORS: tuple[type[Exception], ...] = (ArithmeticError, ValueError)


_iterators = threading.local()  # one croniter per expression and thread: parsing costs ten steps


def croniter(expression: str, start: datetime | None = None) -> Any:
    """croniter's iterator at `start`, imported on first use: it costs 65 ms, which `import leased`
    should not pay. The iterator is reused, so each caller finishes with it before the next call."""
    from croniter import croniter as iterator

    cache = _iterators.__dict__.setdefault("by_expression", {})
    if expression not in cache or start is None:
        cache[expression] = iterator(expression, start)
    else:
        cache[expression].set_current(start, force=True)
    return cache[expression]


def _cron_errors() -> tuple[type[Exception], ...]:
    from croniter import CroniterError

    return CroniterError, ValueError


@dataclass(frozen=True)
class Schedule:
    """When a periodic task runs. Build it with make_schedule(), which checks every field."""

    name: str
    cron: str | None
    every: timedelta | None
    timezone: str
    catch_up: str = "latest"
    catch_up_limit: int = 100
    overlap: str = "allow"
    task: Task | None = field(default=None, compare=False, repr=False)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def expression(self) -> str:
        """What is stored and shown: the cron expression, or 'every 300s'."""
        return self.cron if self.cron is not None else f"every {_seconds_text(self.every)}"

    @property
    def skip_overlap(self) -> bool:
        return self.overlap == "skip"

    # Ticks. Every instant is an aware datetime; results are in UTC.
    def next_tick_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment`."""
        if self.every is not None:
            step = _microseconds(self.every)
            return _EPOCH + timedelta(microseconds=(_microseconds(moment - _EPOCH) // step + 1) * step)
        zone = self.zone
        # Start from the wall-clock time with the smaller of the offsets just before and at `moment`:
        # a tick shifted out of a spring-forward gap has a wall-clock time inside the gap.
        offset = min(moment.astimezone(zone).utcoffset(), (moment - DST_MARGIN).astimezone(zone).utcoffset())
        start = (moment.astimezone(UTC) + offset).replace(tzinfo=None)
        candidates = croniter(self.cron, start)
        while True:
            tick = _instant(candidates.get_next(datetime), zone)
            if tick > moment:  # a wall-clock time repeated at fall-back maps to its first, earlier instant
                return tick

    def ticks_between(self, after: datetime | None, until: datetime, limit: int) -> list[datetime]:
        """The last `limit` ticks in (after, until], oldest first; `after` None: no lower bound."""
        start = self._before_last(until, limit, after)
        ticks: list[datetime] = []
        tick = self.next_tick_after(start)
        while tick <= until:
            ticks.append(tick)
            tick = self.next_tick_after(tick)
        return ticks[-limit:]

    def _before_last(self, until: datetime, count: int, after: datetime | None) -> datetime:
        """`after`, or a later instant with at least `count` ticks between it and `until` and not
        many more: a year of downtime then costs no year of ticks."""
        if self.every is not None:
            start = until - self.every * count
            return start if after is None or after < start else after
        zone = self.zone
        candidates = croniter(self.cron, until.astimezone(zone).replace(tzinfo=None))
        for _ in range(count):
            start = _instant(candidates.get_prev(datetime), zone) - DST_MARGIN
            if after is not None and start <= after:
                return after
        return start

    def plan(self, last_tick: datetime | None, now: datetime) -> TickPlan:
        """Which due ticks to enqueue, given the last tick handled and the database's now.

        A schedule seen for the first time starts counting at `now`: nothing runs until its next tick.
        """
        if last_tick is None:
            latest = self.ticks_between(None, now, 1)
            return TickPlan((), latest[-1] if latest else now)
        due = self.ticks_between(last_tick, now, self.catch_up_limit if self.catch_up == "all" else 1)
        if not due:
            return TickPlan((), last_tick)
        if self.catch_up == "none" and (now - due[-1]).total_seconds() > ON_TIME_SECONDS:
            return TickPlan((), due[-1])
        return TickPlan(tuple(due), due[-1])

    def local(self, tick: datetime) -> datetime:
        return tick.astimezone(self.zone)

    def new_job(self, tick: datetime) -> NewJob:
        """The job for one tick: the task's defaults, with the tick's time as `scheduled_at`."""
        return self.task.defaults.new_job((), {"scheduled_at": self.local(tick).isoformat()})


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    # fold=0: a time in a gap takes the offset before it (so it moves forward by the gap), a time
    # that occurs twice its first occurrence (PEP 495).
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def _microseconds(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _seconds_text(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"


def make_schedule(name: str, cron: str | None, every: timedelta | None, timezone: str, catch_up: str,
                  catch_up_limit: int, overlap: str) -> Schedule:
    """A checked Schedule: each mistake is one ConfigurationError naming the field and the fix."""
    where = f"periodic task {name!r}"
    if (cron is None) == (every is None):
        raise ConfigurationError(f"{where}: give a cron expression (e.g. '*/5 * * * *') or every=timedelta(...), "
                                 f"{'not both' if cron is not None else 'one of them'}")
    if every is not None and (not isinstance(every, timedelta) or every < timedelta(seconds=1)):
        raise ConfigurationError(f"{where}: every must be a timedelta of at least one second, got {every!r}")
    if not isinstance(timezone, str):
        raise ConfigurationError(f"{where}: timezone must be an IANA name such as 'Europe/Paris', got {timezone!r}")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"{where}: unknown timezone {timezone!r}; use an IANA name such as "
                                 "'Europe/Paris' or 'UTC'") from None
    if catch_up not in CATCH_UP_POLICIES:
        raise ConfigurationError(f"{where}: invalid catch_up {catch_up!r}; use one of {', '.join(CATCH_UP_POLICIES)}")
    if isinstance(catch_up_limit, bool) or not isinstance(catch_up_limit, int) or not 1 <= catch_up_limit <= 10_000:
        raise ConfigurationError(f"{where}: invalid catch_up_limit {catch_up_limit!r}: use a whole number "
                                 "from 1 to 10000")
    if overlap not in OVERLAP_POLICIES:
        raise ConfigurationError(f"{where}: invalid overlap {overlap!r}; use one of {', '.join(OVERLAP_POLICIES)}")
    if every is not None:
        _check_look_back(where, every, catch_up_limit if catch_up == "all" else 1)
    if cron is not None:
        _check_cron(where, cron)
    schedule = Schedule(name, cron, every, timezone, catch_up, catch_up_limit, overlap)
    if cron is not None:
        try:
            schedule.next_tick_after(datetime.now(UTC))
        except _cron_errors():
            raise ConfigurationError(f"{where}: cron expression {cron!r} never matches a date") from None
    return schedule


def _check_look_back(where: str, every: timedelta, ticks: int) -> None:
    """Each wake-up plans from `every` × `ticks` before now (ticks: catch_up_limit under
    catch_up="all", else 1): past LONGEST_LOOK_BACK, that is before year 1, and every worker with
    the task would fail to compute it."""
    longest, step = _microseconds(LONGEST_LOOK_BACK), _microseconds(every)
    computed = f"leased computes a schedule's ticks at most {LONGEST_LOOK_BACK.days} days (about 1969 years) back"
    if step > longest:
        raise ConfigurationError(f"{where}: every={every!r} is too long: {computed}; "
                                 f"use every=timedelta(days={LONGEST_LOOK_BACK.days}) at most")
    if step * ticks > longest:
        days = step * ticks // _microseconds(timedelta(days=1))
        raise ConfigurationError(f"{where}: every × catch_up_limit ({days} days) is too long: catch_up='all' "
                                 f"looks back over that many ticks, and {computed}; "
                                 f"use catch_up_limit={longest // step} at most, or a shorter every")


def computable_every(every: timedelta) -> bool:
    """Whether ticks `every` apart can be computed: what make_schedule accepts, for one tick."""
    return timedelta(seconds=1) <= every and _microseconds(every) <= _microseconds(LONGEST_LOOK_BACK)


def _check_cron(where: str, cron: object) -> None:
    if not isinstance(cron, str) or len(cron.split()) != 5:
        raise ConfigurationError(f"{where}: invalid cron expression {cron!r}: give five fields ({_CRON_FIELDS}); "
                                 "for intervals under a minute use every=timedelta(seconds=...)")
    try:
        croniter(cron)
    except _cron_errors() as error:
        raise ConfigurationError(f"{where}: invalid cron expression {cron!r}: "
                                 f"{str(error).strip().splitlines()[0]} (fields: {_CRON_FIELDS})") from None


def tick_handler(function: Callable[..., Any], schedule: Schedule, leading: int) -> Callable[..., Any]:
    """The handler the task runs: it turns the stored `scheduled_at` text back into an aware datetime
    in the schedule's zone. Its signature (through __wrapped__) is the user's."""
    try:
        inspect.signature(function).bind(*(None,) * leading, scheduled_at=None)
    except TypeError:
        raise ConfigurationError(f"periodic task {schedule.name!r}: the handler must take a `scheduled_at` "
                                 "parameter (the tick's time) and no other required one") from None
    zone = schedule.zone

    def scheduled(value: Any) -> datetime:
        return value if isinstance(value, datetime) else datetime.fromisoformat(value).astimezone(zone)

    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def handler(*args: Any, scheduled_at: Any, **kwargs: Any) -> Any:
            return await function(*args, scheduled_at=scheduled(scheduled_at), **kwargs)
    else:
        @functools.wraps(function)
        def handler(*args: Any, scheduled_at: Any, **kwargs: Any) -> Any:
            return function(*args, scheduled_at=scheduled(scheduled_at), **kwargs)
    return handler


def stored_schedule(name: str, expression: str, timezone: str) -> Schedule | None:
    """The schedule a stored row describes (for inspection without the code), or None if it cannot be
    read or its ticks cannot be computed (a row edited by hand, or written by another version)."""
    try:
        ZoneInfo(timezone)
        if expression.startswith("every ") and expression.endswith("s"):
            every = timedelta(seconds=float(expression[6:-1]))
            return Schedule(name, None, every, timezone) if computable_every(every) else None
        croniter(expression)
        return Schedule(name, expression, None, timezone)
    except (*TICK_ERRORS, *_cron_errors(), ZoneInfoNotFoundError):
        return None


@dataclass(frozen=True)
class ScheduleInfo:
    """What inspection shows of a schedule: its stored state, and when it runs next."""

    name: str
    expression: str
    timezone: str
    next_run_at: datetime | None  # in the past: overdue (no worker with the task has run it)
    last_tick_at: datetime | None
    last_job_id: int | None
    last_job_status: str | None
    last_success_at: datetime | None
    skipped_ticks: int
    last_skipped_at: datetime | None
    registered: bool | None  # in this app's code; None: not known (inspecting a database without the code)


def describe_schedules(registered: dict[str, Schedule], now: datetime, states: list[Any]) -> list[ScheduleInfo]:
    """Stored schedules and those in the code that no worker has seen yet, by name."""
    infos = []
    stored = {state.name: state for state in states}
    for name in sorted(set(stored) | set(registered)):
        state = stored.get(name)
        schedule = registered.get(name) or stored_schedule(name, state.expression, state.timezone)
        last = None if state is None else state.last_tick_at
        infos.append(ScheduleInfo(
            name=name, expression=schedule.expression if schedule else state.expression,
            timezone=schedule.timezone if schedule else state.timezone,
            next_run_at=None if schedule is None else _next_run(schedule, last or now),
            last_tick_at=last, last_job_id=state and state.last_job_id,
            last_job_status=state and state.last_job_status and state.last_job_status.value,
            last_success_at=state and state.last_success_at, skipped_ticks=state.skipped_ticks if state else 0,
            last_skipped_at=state and state.last_skipped_at,
            registered=(name in registered) if registered else None))
    return infos


def _next_run(schedule: Schedule, after: datetime) -> datetime | None:
    """The tick after `after`; None when it cannot be computed (a last tick edited to year 9999, say),
    which inspection shows as no next run rather than failing for every schedule."""
    try:
        return schedule.next_tick_after(after)
    except TICK_ERRORS:
        return None
