"""A handler's exception as text (its message and its traceback), whatever its __str__ or __repr__ does.

How an exception prints is its handler's own code, like the raise itself, so it can fail too. The
attempt must still end as an ordinary failure, with a message that says the exception could not be
printed: were the worker's own text-building to raise, the worker would stop ("a service failed"),
its attempt would go back uncounted, and every worker that claimed the job next would stop in turn.
"""

from __future__ import annotations

import traceback
from types import TracebackType


def message_of(error: object) -> str:
    """str(error), or when its __str__ raises, a message that names the exception and what it raised."""
    try:
        text = str(error)
    except BaseException as refusal:  # a KeyboardInterrupt too: it is the handler's code that raised it
        return f"<unprintable {type(error).__name__}: its __str__ raised {_described(refusal)}>"
    return str.__str__(text)  # a str subclass's own methods are the handler's code too: a plain str


def traceback_of(error: BaseException, frames: TracebackType | None) -> str:
    """The formatted traceback of `error` from `frames` on. Python's formatter already prints an
    exception whose __str__ raises as "<exception str() failed>"; this guards what it does not."""
    try:
        return "".join(traceback.format_exception(type(error), error, frames))
    except BaseException as refusal:
        return f"{type(error).__name__}: {message_of(error)}\n(its traceback could not be formatted: " \
               f"{_described(refusal)})\n"


def _described(refusal: BaseException) -> str:
    """What an exception's __str__ raised, by its repr; by its type's name when that raises as well."""
    try:
        return str.__str__(repr(refusal))
    except BaseException:
        return type(refusal).__name__
