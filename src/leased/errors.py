"""Every error leased raises on purpose derives from LeasedError."""

from __future__ import annotations

from leased.jobs import Job


class LeasedError(Exception):
    """Base class of leased's own errors."""


class ConfigurationError(LeasedError, ValueError):
    """A setting or argument is wrong; the message names it and the fix."""


# Said where an async transactional handler meets a database that cannot run one.
ASYNC_TRANSACTIONS_NOT_ON_MARIADB = (
    "an async transactional handler writes through an async driver (psycopg's AsyncConnection on PostgreSQL, "
    "aiosqlite on SQLite), and leased runs no async driver for MariaDB; define it with def (it runs on a "
    "handler thread, with the driver's connection)")


class SchemaNotReady(LeasedError):
    """leased's tables are missing from the database, or at a version this code does not run on.
    Not transient: a worker stops at once rather than retrying; the message says what to run."""


class PayloadError(LeasedError, TypeError):
    """Job arguments or a result cannot be stored as JSON, or are too large."""


# What the worker records an attempt as when leased itself failed it at once, without retrying,
# by where it found a PayloadError (engine/executor.py): the error_type leased.explain reads. A
# PayloadError the handler's own code raises is recorded as what it is, and retried as any error.
class ArgumentsMismatch(PayloadError):
    """A stored job's arguments do not fit its handler (any more: a deploy changed it), so its
    handler was not called."""


class ResultNotStored(PayloadError):
    """The handler returned a value that cannot be stored as JSON, or is too large."""


class JobNotFound(LeasedError, LookupError):
    def __init__(self, job_id: int | None, *, idempotency_key: str | None = None):
        super().__init__(f"no job with id {job_id}" if idempotency_key is None
                         else f"no job with idempotency key {idempotency_key!r}")
        self.job_id = job_id
        self.idempotency_key = idempotency_key


class SignalTimeout(LeasedError, TimeoutError):
    """`context.wait_for(name, timeout=...)` saw no signal `name` before its timeout. Raised in the
    handler's rerun after the timeout; a handler may catch it and go on."""

    def __init__(self, job_id: int, name: str):
        super().__init__(f"job {job_id}: no signal {name!r} came before the wait's timeout")
        self.job_id = job_id
        self.name = name


class WorkflowNotFound(LeasedError, LookupError):
    def __init__(self, workflow_id: int):
        super().__init__(f"no workflow with id {workflow_id}")
        self.workflow_id = workflow_id


class InvalidTransition(LeasedError):
    """The job is not in a status that allows the requested action (e.g. retrying a done job)."""


class DatabaseUnavailable(LeasedError, ConnectionError):
    """The database could not be reached or refused the connection."""


class DatabaseLocked(DatabaseUnavailable):
    """SQLite's write lock stayed with another connection past the wait (an open transaction)."""


class OutcomeUnknown(DatabaseUnavailable):
    """The connection was lost after a write was sent (a COMMIT, or a write that commits itself),
    before the database answered: it may have been kept or not. Retrying an enqueue is safe with an
    idempotency key: the second finds the first's job if it was kept."""


class DatabaseFull(DatabaseUnavailable):
    """The database refused a write for lack of space; nothing of that write was kept. An outage
    like any other to a worker, which waits until space returns rather than stopping."""


class DatabaseConflict(LeasedError):
    """The database broke off a transaction to settle a conflict (a deadlock, a serialization
    failure); nothing of it was written, and another try is expected to succeed."""


# What the engine retries after a pause, rather than stopping: no driver's class ever reaches it.
TRANSIENT_ERRORS: tuple[type[LeasedError], ...] = (DatabaseUnavailable, DatabaseConflict)


class PermanentError(Exception):
    """Raise from a handler to fail the job at once, without further retries."""


class WaitTimeout(LeasedError, TimeoutError):
    """app.wait() gave up: the job had not ended within the timeout. `job` is how it was last seen."""

    def __init__(self, job: Job, timeout: float):
        super().__init__(f"job {job.id} ({job.task_name}) had not ended after {timeout:g} s: it is {job.status}, "
                         f"attempt {job.attempt} of {job.max_attempts}")
        self.job = job
