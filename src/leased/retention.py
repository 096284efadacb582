"""How long finished jobs stay in the table: per status, for the application and per task.

`Leased(retention=...)` sets the defaults; `@app.task(retention=...)` overrides some or all of
them for one task. A period is a timedelta, a number of seconds or a duration string ("7d");
None keeps those jobs forever.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Mapping

from leased.durations import parse_duration
from leased.errors import ConfigurationError
from leased.jobs import JobStatus

FINISHED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)
Period = timedelta | float | int | str | None


@dataclass(frozen=True, slots=True)
class Retention:
    """How long to keep done, failed and cancelled jobs (and their attempts); None: forever."""

    done: timedelta | None = timedelta(days=7)
    failed: timedelta | None = timedelta(days=30)
    cancelled: timedelta | None = timedelta(days=30)

    def __post_init__(self) -> None:
        for field in fields(self):
            object.__setattr__(self, field.name, period(getattr(self, field.name), f"retention {field.name}"))

    def keep(self, status: JobStatus | str) -> timedelta | None:
        kept: timedelta | None = getattr(self, JobStatus(status).value)  # a field per finished status
        return kept

    @classmethod
    def forever(cls) -> Retention:
        return cls(None, None, None)


def period(value: Any, name: str) -> timedelta | None:
    """A retention period as a timedelta (None: forever); a one-line error naming `name` otherwise."""
    if value is None:
        return None
    try:
        if isinstance(value, timedelta):
            seconds = value.total_seconds()
        elif isinstance(value, str):
            seconds = parse_duration(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
        else:
            raise ValueError
    except ValueError:
        seconds = None
    if seconds is None or not seconds > 0 or seconds == float("inf"):
        raise ConfigurationError(f"invalid {name} {value!r}: use a duration such as timedelta(days=7), '7d' "
                                 "or a number of seconds, or None to keep those jobs forever")
    return timedelta(seconds=seconds)


def app_retention(value: Retention | Mapping[str, Period] | None) -> Retention:
    """Leased(retention=...): a Retention, a dict of some of its fields (the others keep their
    defaults), or None to keep every finished job (prune with your own `leased prune` cron)."""
    if value is None:
        return Retention.forever()
    if isinstance(value, Retention):
        return value
    return Retention(**_fields(value, "retention"))


def task_retention(value: Retention | Mapping[str, Period] | None, task_name: str) -> dict[JobStatus, timedelta | None]:
    """@app.task(retention=...): the statuses it overrides. A dict overrides only the fields it
    names (the others follow the application's); None keeps this task's finished jobs forever."""
    where = f"retention of task {task_name!r}"
    if value is None:
        return {status: None for status in FINISHED}
    if isinstance(value, Retention):
        return {status: value.keep(status) for status in FINISHED}
    return {JobStatus(name): period(given, f"{where}: {name}") for name, given in _fields(value, where).items()}


def _fields(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"invalid {where} {value!r}: use leased.Retention(done=..., failed=..., "
                                 "cancelled=...), a dict of those fields, or None to keep every finished job")
    unknown = sorted(set(value) - {status.value for status in FINISHED})
    if unknown:
        raise ConfigurationError(f"invalid {where}: unknown field {unknown[0]!r}; use done, failed or cancelled")
    return dict(value)
