"""Tasks: a handler with a stable name and its defaults; enqueueing turns a call into a job row."""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import (Any, Awaitable, Callable, Generic, Iterable, Literal, Mapping, ParamSpec, Protocol, Sequence,
                    TypedDict, TypeVar, Unpack)

from leased import tracing
from leased.backends import DatabaseKind, parse_database_url
from leased.backoff import Backoff
from leased.durations import LONGEST_SECONDS, parse_duration
from leased.errors import ConfigurationError, PayloadError
from leased.fairness import check_fairness_key, fairness_key_of
from leased.jobs import Job, JobStatus, NewJob
from leased.limits import KeyLimit, check_key, key_limit
from leased.names import check_name
from leased.payloads import encode_arguments
from leased.retention import task_retention
from leased.suggest import did_you_mean
from leased.typed import ArgumentTypes

P = ParamSpec("P")
R = TypeVar("R")

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")  # whole: fullmatch, where $ let "default\n" in
PRIORITY_RANGE = (-32768, 32767)
MAX_ATTEMPTS = 2**31 - 1
# A job due further ahead than durations allow (100 years) is a mistake (a delay in the wrong unit);
# past the year 9999 no reader could show it, and a row enqueue wrote before refusing broke every
# listing that held it.
LONGEST_DELAY = timedelta(seconds=LONGEST_SECONDS)
EARLIEST_RUN_AFTER = datetime(1970, 1, 1, tzinfo=timezone.utc)
_UNSET: Any = object()


def _seconds(value: object) -> object:
    """A duration as seconds: a timedelta, a number, or text as the CLI and retention take it
    ("250ms", "30s", "5m", "2h", "1d"); anything else unchanged, for the caller to refuse."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError:
            return value
    return value


def lease_seconds(value: float | timedelta | str, field: str = "lease") -> float:
    seconds = _seconds(value)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 86_400:
        raise ConfigurationError(f"{field} must be a number of seconds, a timedelta or a duration such as '5m', "
                                 f"between 0 and one day, got {value!r}")
    return float(seconds)


def check_timeout(value: object) -> float | None:
    """A time limit in seconds per attempt, or None for none."""
    if value is None:
        return None
    seconds = _seconds(value)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
        raise ConfigurationError(f"invalid timeout {value!r}: use a number of seconds above 0, a timedelta or a "
                                 "duration such as '5m', or None for no time limit")
    return float(seconds)


def check_queue_name(value: object) -> str:
    if not isinstance(value, str) or not QUEUE_NAME.fullmatch(value):
        raise ConfigurationError(f"invalid queue_name {value!r}: use 1-100 letters, digits or _.:- "
                                 "starting with a letter or digit")
    return value


def check_priority(value: object) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigurationError(f"invalid priority {value!r}: use a whole number from {low} to {high} "
                                 "(higher runs first)")
    return value


def check_max_attempts(value: object) -> int:
    # Every database counts attempts in a 32-bit integer: 2**40 was cut in silence on MariaDB, and
    # refused with a raw DataError on PostgreSQL.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise ConfigurationError(f"invalid max_attempts {value!r}: use a whole number from 1 to {MAX_ATTEMPTS:,}")
    return value


def check_max_crashes(value: object) -> int:
    """max_crashes: attempts that may end by killing their process (a segfault, the OOM killer, a
    worker killed) before the job is quarantined as a poison job; counted in a 32-bit integer."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise ConfigurationError(f"invalid max_crashes {value!r}: use a whole number from 1 to {MAX_ATTEMPTS:,} "
                                 "(the crashes after which a job is failed as a poison job)")
    return value


def check_transactional(name: str, transactional: object, transaction: Callable[[], Any] | None,
                        takes_context: bool, is_async: bool, database: DatabaseKind
                        ) -> tuple[bool, Callable[[], Any] | None]:
    """A transactional task's handler reaches its connection through its context; `transaction`
    is a framework's opener of the transaction (Django's atomic block), else the backend's."""
    if not isinstance(transactional, bool):
        raise ConfigurationError(f"task {name!r}: transactional must be True or False, got {transactional!r}")
    if not transactional:
        return False, None
    if not takes_context:
        raise ConfigurationError(f"task {name!r} is transactional: its handler writes through context.connection, "
                                 "so declare it with takes_context=True as well")
    if is_async:
        try:
            database.check_async_transactions()
        except ConfigurationError as error:
            raise ConfigurationError(f"task {name!r} is transactional and async: {error}") from None
    if is_async and transaction is not None:
        raise ConfigurationError(f"task {name!r} is transactional and async: a framework's transaction (the "
                                 "transaction= opener) is for sync handlers; an async one writes through "
                                 "context.connection, its backend's async connection")
    return True, transaction


ISOLATIONS = ("thread", "process")
Isolation = Literal["thread", "process"]


def check_isolation(name: str, isolation: object, func: Callable[..., Any], is_async: bool, transactional: bool) -> str:
    """Where the handler runs: "thread" (the worker's handler threads), or "process" (a child of
    the worker's, engine/children.py), which must be able to import it by name."""
    if isolation not in ISOLATIONS:
        raise ConfigurationError(f"task {name!r}: isolation must be 'thread' or 'process', got {isolation!r}")
    if isolation == "thread":
        return "thread"
    if transactional:
        raise ConfigurationError(f"task {name!r}: a transactional handler writes in the worker's transaction, so it "
                                 "cannot run in a child process; drop isolation='process' or transactional=True")
    importable(func, name)
    return "process"


def importable(func: Callable[..., Any], task_name: str) -> tuple[str, str]:
    """(module, qualname) by which a child (engine/children.py) finds `func`, or a ConfigurationError
    saying why not."""
    qualname = getattr(func, "__qualname__", "")
    module = getattr(func, "__module__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise ConfigurationError(
            f"task {task_name!r} runs in a child process (isolation='process'), which imports its handler "
            f"by name: define {qualname or func!r} at a module's top level, not inside a function or as a lambda")
    return module, qualname


def schedule(run_after: datetime | timedelta | None) -> tuple[datetime | None, float]:
    """(absolute time, delay) for a job's run_after; a delay is added to the database's clock."""
    if run_after is None:
        return None, 0.0
    if isinstance(run_after, timedelta):
        if run_after > LONGEST_DELAY:
            raise ConfigurationError(f"run_after {run_after!r} is more than 100 years ahead: give a delay of at "
                                     "most timedelta(days=36600) (a delay in the wrong unit?)")
        return None, max(run_after.total_seconds(), 0.0)
    if isinstance(run_after, datetime):
        if run_after.tzinfo is None or run_after.utcoffset() is None:
            raise ConfigurationError(
                f"run_after {run_after!r} is a naive datetime; give it a timezone "
                "(datetime.now(timezone.utc) + ...) or pass a timedelta")
        if not EARLIEST_RUN_AFTER <= run_after <= datetime.now(timezone.utc) + LONGEST_DELAY:
            raise ConfigurationError(f"run_after {run_after.isoformat()} is out of range: give a time from 1970 "
                                     "to 100 years from now")
        return run_after, 0.0
    raise ConfigurationError(f"run_after must be a timezone-aware datetime or a timedelta, got {run_after!r}")


class Producer(Protocol):
    """What a task needs of the app it belongs to (leased.Leased is one): its database (a
    transactional task checks what it can run there), the payload limit, and a way to write the
    jobs its calls make."""

    database_url: str
    max_payload_bytes: int

    def enqueue_jobs(self, jobs: list[NewJob], connection: Any) -> list[Job]: ...

    async def enqueue_jobs_async(self, jobs: list[NewJob], connection: Any) -> list[Job]: ...


def _split_call(call: object, position: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if type(call) is tuple:  # the common case, before the costly isinstance() of an abstract class
        return call, {}
    if isinstance(call, Mapping):
        return (), dict(call)
    if isinstance(call, (tuple, list)):
        return tuple(call), {}
    raise ConfigurationError(f"enqueue_many: call {position} is {call!r}; give a tuple of positional arguments "
                             "or a dict of keyword arguments")


def _positional_counts(signature: inspect.Signature, leading: int) -> tuple[int, int] | None:
    """(fewest, most) positional arguments that bind to a signature of plain parameters, required
    ones first; None for any other signature (*args, **kwargs, keyword-only), which needs bind()."""
    parameters = list(signature.parameters.values())
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [parameter.default is parameter.empty for parameter in parameters]
    if not all(parameter.kind in plain for parameter in parameters) or required != sorted(required, reverse=True):
        return None
    return max(sum(required) - leading, 0), len(parameters) - leading


@dataclass(frozen=True)
class TaskCall(Generic[P, R]):
    """A task with per-call options (from Task.using); enqueue() writes the job."""

    task: Task[P, R]
    queue_name: str
    priority: int
    max_attempts: int
    lease_seconds: float
    run_after: datetime | timedelta | None = None
    idempotency_key: str | None = None
    connection: Any = None
    timeout_seconds: float | None = None
    concurrency_key: str | None = None  # overrides the key the task computes from the arguments
    isolation: str | None = None  # "thread" or "process" for these jobs; None: the task's own
    max_crashes: int = 2  # attempts whose process dies before the job is quarantined
    fairness_key: str | None = None  # overrides the key the task computes from the arguments

    def using(self, *, queue_name: str = _UNSET, priority: int = _UNSET,
              run_after: datetime | timedelta | None = _UNSET, idempotency_key: str | None = _UNSET,
              connection: Any = _UNSET, max_attempts: int = _UNSET, lease: float | timedelta | str = _UNSET,
              timeout: float | timedelta | str | None = _UNSET,
              concurrency_key: str | None = _UNSET, isolation: Isolation = _UNSET,
              max_crashes: int = _UNSET, fairness_key: str | None = _UNSET) -> TaskCall[P, R]:
        changes: dict[str, Any] = {}
        if fairness_key is not _UNSET:
            changes["fairness_key"] = None if fairness_key is None else self.task.check_fair(
                check_fairness_key(fairness_key, "using()"))
        if isolation is not _UNSET:
            task = self.task
            chosen = check_isolation(task.name, isolation, task.func, task.is_async, task.transactional)
            changes["isolation"] = chosen
        if concurrency_key is not _UNSET:
            if concurrency_key is not None and self.task.key_limit is None:
                raise ConfigurationError(f"task {self.task.name!r} has no limit per key, so concurrency_key "
                                         "means nothing: add concurrency=N to @app.task")
            changes["concurrency_key"] = None if concurrency_key is None else check_key(concurrency_key, "using()")
        if queue_name is not _UNSET:
            changes["queue_name"] = check_queue_name(queue_name)
        if priority is not _UNSET:
            changes["priority"] = check_priority(priority)
        if run_after is not _UNSET:
            schedule(run_after)
            changes["run_after"] = run_after
        if idempotency_key is not _UNSET:
            changes["idempotency_key"] = None if idempotency_key is None else check_name(idempotency_key,
                                                                                          "idempotency_key")
        if connection is not _UNSET:
            changes["connection"] = connection
        if max_attempts is not _UNSET:
            changes["max_attempts"] = check_max_attempts(max_attempts)
        if max_crashes is not _UNSET:
            changes["max_crashes"] = check_max_crashes(max_crashes)
        if lease is not _UNSET:
            changes["lease_seconds"] = lease_seconds(lease)
        if timeout is not _UNSET:
            changes["timeout_seconds"] = check_timeout(timeout)
        return replace(self, **changes)

    def new_job(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, after_result: bool = False) -> NewJob:
        """The job of a call. `after_result`: a chain's step, whose first argument is the previous
        step's result, written when the step is released: the call's shape is checked with a
        stand-in for it, but not the stand-in's type (a `def parse(html: str)` refused None)."""
        return self._new_jobs([(args, kwargs)], after_result)[0]

    def _new_jobs(self, calls: Iterable[tuple[tuple[Any, ...], dict[str, Any]]],
                  after_result: bool = False) -> list[NewJob]:
        task, check, limit = self.task, self.task.check_arguments, self.task.app.max_payload_bytes
        # Looked up once: this loop is most of a bulk enqueue's Python.
        typed = task.argument_types if task.argument_types else None
        check_scalars = task.argument_types.check_scalars  # None when no parameter is annotated with one
        name, queue_name, priority, max_attempts = task.name, self.queue_name, self.priority, self.max_attempts
        lease, key, timeout, key_limit = self.lease_seconds, self.idempotency_key, self.timeout_seconds, task.key_limit
        isolation, max_crashes = self.isolation, self.max_crashes
        fairness_key, fairness_key_of = self.fairness_key, task.fairness_key_of
        run_at, delay = schedule(self.run_after)
        trace_context = tracing.current_trace_context()  # the enqueue's span, which its attempts continue
        jobs = []
        for call_args, kwargs in calls:
            args: tuple[Any, ...] | list[Any] = call_args
            check((None, *args) if after_result else args, kwargs)
            if check_scalars is not None and not after_result:  # order_id: int refuses "one"
                check_scalars(args, kwargs)
            if typed is not None and not after_result:  # dataclasses, pydantic: validated, stored as plain JSON
                args, kwargs = typed.to_json(args, kwargs)
            args_json, kwargs_json = encode_arguments(args, kwargs, limit)
            job = NewJob(name, queue_name, args_json, kwargs_json, priority, max_attempts, lease, run_at, delay, key,
                         timeout, isolation=isolation, max_crashes=max_crashes,
                         trace_context=trace_context,
                         fairness_key=fairness_key if fairness_key is not None or fairness_key_of is None
                         else fairness_key_of.key_for(args, kwargs))
            jobs.append(job if key_limit is None else self._with_key(job, key_limit, args, kwargs))
        return jobs

    def _with_key(self, job: NewJob, limit: KeyLimit, args: tuple[Any, ...] | list[Any],
                  kwargs: dict[str, Any]) -> NewJob:
        key = self.concurrency_key or limit.key_for(args, kwargs)
        rate = limit.rate_limit
        return job._replace(concurrency_key=key, key_concurrency=limit.concurrency,
                            key_rate_count=rate.count if rate else None,
                            key_rate_seconds=rate.seconds if rate else None)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Write the job (in `connection`'s open transaction if one was given) and return it."""
        with tracing.sending(self.queue_name, self.task.name, 1) as span:
            job = self.task.app.enqueue_jobs([self.new_job(args, kwargs)], self.connection)[0]
            tracing.sent(span, [job])
            return job

    def enqueue_many(self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]) -> list[Job]:
        """Write many jobs in one transaction. Each call is a tuple or list of positional arguments,
        or a dict of keyword arguments (so a single dict argument goes in a tuple: `(payload,)`)."""
        calls = list(calls)
        with tracing.sending(self.queue_name, self.task.name, len(calls)):
            jobs = self._new_jobs(_split_call(call, position) for position, call in enumerate(calls))
            return self.task.app.enqueue_jobs(jobs, self.connection) if jobs else []

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        with tracing.sending(self.queue_name, self.task.name, 1) as span:
            new_job = self.new_job(args, kwargs)
            if self.connection is not None:
                job = (await self.task.app.enqueue_jobs_async([new_job], self.connection))[0]
            else:
                job = (await asyncio.to_thread(self.task.app.enqueue_jobs, [new_job], None))[0]
            tracing.sent(span, [job])
            return job


class CallOptions(TypedDict, total=False):
    """The options Task.using() takes, as TaskCall.using() spells them: a checker sees each one's type."""

    queue_name: str
    priority: int
    run_after: datetime | timedelta | None
    idempotency_key: str | None
    connection: Any
    max_attempts: int
    lease: float | timedelta | str
    timeout: float | timedelta | str | None
    concurrency_key: str | None
    isolation: Isolation
    max_crashes: int
    fairness_key: str | None


class Task(Generic[P, R]):
    """A registered handler. Calling it runs the function directly; enqueue() schedules it.

    `P` and `R` are what a caller of enqueue() passes and what the handler returns; for a handler
    that takes its context first, P leaves the context out (see ContextTask)."""

    def __init__(self, app: Producer, func: Callable[..., R], *, name: str, queue_name: str, priority: int,
                 max_attempts: int, lease: float | timedelta | str, backoff: Backoff, takes_context: bool,
                 timeout: float | timedelta | str | None = None, concurrency: int | None = None,
                 concurrency_key: str | Callable[..., str] | None = None, rate_limit: str | None = None,
                 retention: Any = _UNSET, transactional: bool = False,
                 transaction: Callable[[], AbstractContextManager[Any]] | None = None, isolation: Isolation = "thread",
                 max_crashes: int = 2, fairness_key: str | Callable[..., str] | None = None):
        if not callable(func):
            raise ConfigurationError(f"a task needs a function, got {func!r}")
        if not isinstance(backoff, Backoff):
            raise ConfigurationError(f"backoff must be a leased.Backoff, got {backoff!r}")
        self.app = app
        self.database_url: str | None = app.database_url
        self.func = func
        self.name = name
        self.backoff = backoff
        self.takes_context = takes_context
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = inspect.signature(func)
        if takes_context and not self.signature.parameters:
            raise ConfigurationError(f"task {name!r} has takes_context=True, so its first parameter receives "
                                     "the TaskContext; the function takes no parameters")
        # How errors show the signature: what the caller passes (not the context), names and defaults.
        self.call_shape = self.signature.replace(
            parameters=[p.replace(annotation=p.empty)
                        for p in list(self.signature.parameters.values())[1 if takes_context else 0:]],
            return_annotation=inspect.Signature.empty)
        self._positional_counts = _positional_counts(self.signature, leading=1 if takes_context else 0)
        self.argument_types = ArgumentTypes(name, func, self.signature, leading=1 if takes_context else 0)
        self.transactional, self.transaction = check_transactional(
            name, transactional, transaction, takes_context, self.is_async,
            parse_database_url(app.database_url).dialect)
        self.isolation = check_isolation(name, isolation, func, self.is_async, self.transactional)
        self.key_limit = key_limit(name, self.signature, takes_context, concurrency, concurrency_key, rate_limit)
        self.fairness_key_of = fairness_key_of(name, fairness_key, self.call_shape)
        if self.fairness_key_of is not None:
            self.check_fair(fairness_key)
        self.defaults: TaskCall[P, R] = TaskCall(
            self, check_queue_name(queue_name), check_priority(priority), check_max_attempts(max_attempts),
            lease_seconds(lease), timeout_seconds=check_timeout(timeout), max_crashes=check_max_crashes(max_crashes))
        # The statuses whose retention this task overrides (the pruner reads it); empty: the app's.
        self.retention: dict[JobStatus, timedelta | None] = (
            {} if retention is _UNSET else task_retention(retention, name))
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    def check_fair(self, fairness_key: Any) -> Any:
        """A fairness key is refused where its jobs could not be served fairly: on a database whose
        claim does not share by key, and beside a limit per key (a job waits on one key or the other)."""
        if not parse_database_url(self.app.database_url).dialect.capabilities.fair_claims:
            raise ConfigurationError(f"task {self.name!r}: fairness_key is not supported on this database yet "
                                     "(SQLite and MariaDB in this release); drop fairness_key, or use a queue per "
                                     "tenant")
        if self.key_limit is not None:
            raise ConfigurationError(f"task {self.name!r} has a limit per key (concurrency=/rate_limit=), so its jobs "
                                     "wait on their concurrency key: drop fairness_key, or the limit per key")
        return fairness_key

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    @property
    def queue_name(self) -> str:
        return self.defaults.queue_name

    def check_arguments(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> None:
        if not isinstance(args, (tuple, list)) or not isinstance(kwargs, dict):
            raise PayloadError(f"stored arguments of {self.name} are malformed (args {args!r:.200}, "
                               f"kwargs {kwargs!r:.200}): args must be a JSON array and kwargs a JSON object")
        counts = self._positional_counts
        if counts is not None and not kwargs and counts[0] <= len(args) <= counts[1]:
            return  # what bind() would accept, without its cost per job
        leading = (None,) if self.takes_context else ()
        try:
            self.signature.bind(*leading, *args, **kwargs)
        except TypeError as error:
            # bind() names a missing `email` before an unexpected `emial`: the typo is what to fix.
            raise PayloadError(f"arguments do not match {self.name}{self.call_shape}: "
                               f"{self._unexpected_keyword(kwargs) or error}") from None

    def _unexpected_keyword(self, kwargs: dict[str, Any]) -> str | None:
        parameters = list(self.signature.parameters.values())[1 if self.takes_context else 0:]
        if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
            return None
        names = [parameter.name for parameter in parameters if parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
        unexpected = [name for name in kwargs if name not in names]
        if not unexpected:
            return None
        return f"unexpected keyword argument {unexpected[0]!r}{did_you_mean(unexpected[0], names)}"

    def handler_arguments(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """A stored job's arguments as the handler takes them: typed parameters decoded (PayloadError
        if they no longer fit)."""
        return self.argument_types.from_json(args, kwargs) if self.argument_types else (args, kwargs)

    def using(self, **options: Unpack[CallOptions]) -> TaskCall[P, R]:
        """Per-call options: queue_name, priority, run_after, idempotency_key, connection, max_attempts, lease,
        timeout, concurrency_key, isolation ("thread" or "process": where these jobs' handler runs), max_crashes,
        fairness_key (the key whose fair share of the queue these jobs wait for; docs/howto/fairness.md)."""
        return self.defaults.using(**options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        return self.defaults.enqueue(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]) -> list[Job]:
        return self.defaults.enqueue_many(calls)

    def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[Job]:
        return self.defaults.aenqueue(*args, **kwargs)


class ContextTask(Task[P, R]):
    """A task declared with takes_context=True: its handler takes the TaskContext first, which the
    worker passes, so enqueue() and the workflow builder take the other parameters (P) alone.

    Calling it runs the handler directly, and then the caller passes a context first. It is typed
    Any here because leased.engine.context imports this module (through the workflows), and that
    import would close a circle; @app.task's overloads name TaskContext where a user meets it."""

    # A context task is still a Task everywhere else (registry, workflows, using); only a direct
    # call takes one more argument than P, which a subclass cannot say without overriding __call__.
    def __call__(self, context: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:  # type: ignore[override]
        return self.func(context, *args, **kwargs)
