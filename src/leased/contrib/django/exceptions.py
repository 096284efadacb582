"""Exception classes that stand in a TaskError for attempts that failed without an exception of
the task's own (TaskError.exception_class resolves to them)."""

from leased.errors import PermanentError


class LeaseExpired(Exception):
    """The worker stopped renewing its lease (it crashed, was killed, or stalled); another worker takes the task."""


class LeaseLost(Exception):
    """The worker found its lease taken over and abandoned the attempt."""


class TaskCancelled(Exception):
    """The job was cancelled (in the admin, with `leased cancel`, or Leased.cancel())."""


class ResultNotJSON(TypeError, PermanentError):
    """The task returned a value that is not JSON: no retry could store it, so the task fails for
    good (a PermanentError to leased). Its TaskError is a TypeError, as Django's own backends report it."""
