"""Unmanaged models over leased's tables: for the admin, and for get_result() on Django's connection.

leased owns these tables (the migration creates them with leased's own SQL); Django only reads
them. Times are epoch seconds on SQLite and MariaDB and timestamptz on PostgreSQL, JSON is text on
SQLite and MariaDB and json on PostgreSQL: the two fields below read either.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from leased.backends import dialect_named
from leased.jobs import Attempt as AttemptValue, Job as JobValue, JobStatus, Outcome, Progress, with_running_attempt


def _typed(connection: Any) -> bool:
    """Whether the database stores times and JSON in types of its own (Capabilities.typed_times_and_json)."""
    dialect = dialect_named(connection.vendor)
    return dialect is not None and dialect.capabilities.typed_times_and_json


class LeasedTimeField(models.Field):
    """A moment, stored as leased stores it: epoch seconds on SQLite and MariaDB, timestamptz on PostgreSQL."""

    def get_internal_type(self) -> str:
        return "FloatField"  # keeps Django's SQLite datetime converter away from the epoch floats

    def db_type(self, connection: Any) -> str:
        return "timestamptz" if _typed(connection) else "REAL"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, UTC)
        if timezone.is_naive(value):  # PostgreSQL with USE_TZ = False returns local times
            value = timezone.make_aware(value)
        return value.astimezone(UTC)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if isinstance(value, datetime) and not _typed(connection):
            return (value if timezone.is_aware(value) else timezone.make_aware(value)).timestamp()
        return value


class LeasedJSONField(models.TextField):
    """JSON as leased stores it: text on SQLite and MariaDB; PostgreSQL's json, which psycopg decodes itself."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return json.loads(value) if value is not None and not _typed(connection) else value


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task_name = models.TextField(_("task"))
    queue_name = models.TextField(_("queue"))
    status = models.TextField(_("status"), choices=[(status.value, status.value) for status in JobStatus])
    priority = models.IntegerField(_("priority"))
    args = LeasedJSONField(_("positional arguments"))
    kwargs = LeasedJSONField(_("keyword arguments"))
    attempt = models.IntegerField(_("attempts"))
    max_attempts = models.IntegerField(_("max attempts"))
    lease_seconds = models.FloatField(_("lease (seconds)"))
    run_after = LeasedTimeField(_("run after"))
    created_at = LeasedTimeField(_("enqueued at"))
    finished_at = LeasedTimeField(_("finished at"), null=True)
    lease_owner = models.TextField(_("lease owner"), null=True)
    lease_expires_at = LeasedTimeField(_("lease expires at"), null=True)
    idempotency_key = models.TextField(_("idempotency key"), null=True)
    result = LeasedJSONField(_("result"), null=True)
    last_error = models.TextField(_("last error"), null=True)
    attempt_started_at = LeasedTimeField(_("attempt started at"), null=True)
    progress = models.TextField(_("progress"), null=True)  # JSON text (leased.jobs.Progress)
    crashes = models.IntegerField(_("crashes"), default=0)  # attempts whose process died (migration 0023)
    max_crashes = models.IntegerField(_("max crashes"), default=2)  # at which the job is quarantined

    class Meta:
        managed = False
        db_table = "leased_jobs"
        ordering = ["-id"]
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        default_permissions = ("view", "change")  # change: retry and cancel

    def __str__(self) -> str:
        return f"#{self.id} {self.task_name} ({self.status})"

    def history(self) -> tuple[AttemptValue, ...]:
        """Its attempts' records, and its running attempt (whose record is written when it ends)."""
        recorded = tuple(attempt.as_value() for attempt in self.attempts.using(self._state.db).order_by("attempt"))
        return with_running_attempt(recorded, self.status, self.attempt, self.lease_owner, self.attempt_started_at,
                                    Progress.from_json(self.progress))

    def as_value(self, history: tuple[AttemptValue, ...] = ()) -> JobValue:
        return JobValue(
            id=self.id, task_name=self.task_name, queue_name=self.queue_name, status=JobStatus(self.status),
            args=self.args, kwargs=self.kwargs, priority=self.priority, attempt=self.attempt,
            max_attempts=self.max_attempts, lease_seconds=self.lease_seconds, run_after=self.run_after,
            created_at=self.created_at, finished_at=self.finished_at, last_error=self.last_error,
            idempotency_key=self.idempotency_key, result=self.result, lease_owner=self.lease_owner,
            lease_expires_at=self.lease_expires_at, history=history, progress=Progress.from_json(self.progress),
            crashes=self.crashes, max_crashes=self.max_crashes)


class Attempt(models.Model):
    pk = models.CompositePrimaryKey("job", "attempt")
    job = models.ForeignKey(Job, models.DO_NOTHING, db_column="job_id", related_name="attempts")
    attempt = models.IntegerField(_("attempt"))
    worker_id = models.TextField(_("worker"))
    started_at = LeasedTimeField(_("started at"))
    finished_at = LeasedTimeField(_("finished at"), null=True)
    outcome = models.TextField(_("outcome"), null=True, choices=[(outcome.value, outcome.value) for outcome in Outcome])
    error_type = models.TextField(_("error type"), null=True)
    error_message = models.TextField(_("error message"), null=True)
    traceback = models.TextField(_("traceback"), null=True)
    progress = models.TextField(_("progress"), null=True)  # JSON text (leased.jobs.Progress)

    class Meta:
        managed = False
        db_table = "leased_attempts"
        ordering = ["job", "attempt"]
        verbose_name = _("attempt")
        verbose_name_plural = _("attempts")
        default_permissions = ("view",)

    def as_value(self) -> AttemptValue:
        return AttemptValue(
            number=self.attempt, worker_id=self.worker_id, started_at=self.started_at, finished_at=self.finished_at,
            outcome=Outcome(self.outcome) if self.outcome else None, error_type=self.error_type,
            error_message=self.error_message, traceback=self.traceback, progress=Progress.from_json(self.progress))


def read_job(database: str, job_id: int) -> JobValue | None:
    """A job with its history, read on Django's connection `database` (in its open transaction, if any)."""
    job = Job.objects.using(database).filter(id=job_id).first()
    if job is None:
        return None
    return job.as_value(job.history())
