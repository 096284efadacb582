"""Concurrency and rate limits: their values and how they are read from what users write.

The database enforces them at claim time (see claim_limited in each backend's queries.sql):
- per queue, set with `app.limit(queue, concurrency=5, rate_limit="100/m")` and stored in
  leased_queue_limits;
- per key, declared on a task (`@app.task(concurrency=1, concurrency_key="customer:{customer_id}")`);
  the key is computed at enqueue and stored on the job with the key's limits.

A rate limit is a sliding window over recorded starts: at most `count` jobs start within any
`seconds` window, by the database's clock. A job held back by a limit stays pending and burns no
attempt.
"""

from __future__ import annotations

import inspect
import re
import string
from dataclasses import dataclass
from typing import Any, Callable

from leased.errors import ConfigurationError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}  # the longest window is what leased_starts keeps (an hour)
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")
MAX_KEY = 255

KeyFunction = Callable[..., str]


@dataclass(frozen=True, slots=True)
class Rate:
    count: int
    seconds: float

    def __str__(self) -> str:
        unit = next(name for name, seconds in UNITS.items() if seconds == self.seconds)
        return f"{self.count}/{unit}"


@dataclass(frozen=True, slots=True)
class QueueLimit:
    queue_name: str
    concurrency: int | None = None  # running jobs of the queue, across all workers
    rate_limit: Rate | None = None  # starts of the queue's jobs per window

    @property
    def is_empty(self) -> bool:
        return self.concurrency is None and self.rate_limit is None

    def describe(self) -> str:
        parts = [f"concurrency {self.concurrency}" if self.concurrency is not None else "",
                 f"rate {self.rate_limit}" if self.rate_limit is not None else ""]
        return ", ".join(part for part in parts if part) or "none"


def parse_rate(value: object, field: str = "rate_limit") -> Rate | None:
    """"100/m", "10/s" or "1000/h" (or a Rate, or None) to a Rate."""
    if value is None or isinstance(value, Rate):
        return value
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or int(match[1]) < 1:
        raise ConfigurationError(f"invalid {field} {value!r}: write starts per second, minute or hour "
                                 "with a count of at least 1, e.g. '10/s', '100/m' or '1000/h'")
    return Rate(int(match[1]), UNITS[match[2]])


def check_concurrency(value: object, field: str = "concurrency") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"invalid {field} {value!r}: use a whole number >= 1 (None: no limit)")
    return value


def check_key(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_KEY:
        raise ConfigurationError(f"invalid concurrency_key {value!r} from {where}: it must give a non-empty "
                                 f"string of at most {MAX_KEY} characters")
    return value


@dataclass(frozen=True)
class KeyLimit:
    """A task's limit per key: how the key is computed from a call, and the limits of each key."""

    task_name: str
    key: str | KeyFunction  # a template over the arguments ("customer:{customer_id}"), or a callable
    concurrency: int | None
    rate_limit: Rate | None
    signature: inspect.Signature  # the handler's, without a TaskContext parameter

    def key_for(self, args: tuple | list, kwargs: dict[str, Any]) -> str:
        if callable(self.key):
            return check_key(self.key(*args, **kwargs), f"the concurrency_key of task {self.task_name!r}")
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return check_key(self.key.format(**bound.arguments), f"the concurrency_key of task {self.task_name!r}")


def key_limit(task_name: str, signature: inspect.Signature, takes_context: bool, concurrency: object,
              concurrency_key: object, rate_limit: object) -> KeyLimit | None:
    """A task's KeyLimit from its decorator's arguments; None when it has none. Without a
    concurrency_key the key is the task's name: the limit is on the task."""
    concurrency = check_concurrency(concurrency)
    rate = parse_rate(rate_limit)
    if concurrency is None and rate is None:
        if concurrency_key is not None:
            raise ConfigurationError(f"task {task_name!r} has a concurrency_key but no limit: add concurrency=N "
                                     "(and/or rate_limit='N/m') to @app.task, or drop concurrency_key")
        return None
    parameters = list(signature.parameters.values())[1 if takes_context else 0:]
    own = signature.replace(parameters=parameters)
    if concurrency_key is None:
        return KeyLimit(task_name, task_name, concurrency, rate, own)
    if isinstance(concurrency_key, str):
        check_template(task_name, concurrency_key, own)
    elif not callable(concurrency_key):
        raise ConfigurationError(f"invalid concurrency_key {concurrency_key!r} on task {task_name!r}: give a "
                                 "template such as 'customer:{customer_id}' or a function of the task's arguments")
    return KeyLimit(task_name, concurrency_key, concurrency, rate, own)


def check_template(task_name: str, template: str, signature: inspect.Signature,
                   field: str = "concurrency_key") -> None:
    """A key's template names only the task's arguments (a concurrency or a fairness key's)."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise ConfigurationError(f"invalid {field} {template!r} on task {task_name!r}: {error}") from None
    known = [name for name, parameter in signature.parameters.items()
             if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]
    for name in fields:
        root = re.split(r"[.\[]", name, maxsplit=1)[0]
        if root == "" or root not in known:
            raise ConfigurationError(
                f"{field} {template!r} on task {task_name!r} names {{{name}}}, which is not one of its "
                f"arguments ({', '.join(known) or 'none'}); name arguments as {{customer_id}}")
