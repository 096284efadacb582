"""Exception classes that stand in a TaskError for attempts that failed without an exception of
the task's own (TaskError.exception_class resolves to them)."""


class LeaseExpired(Exception):
    """The worker stopped renewing its lease (it crashed, was killed, or stalled); another worker takes the task."""


class LeaseLost(Exception):
    """The worker found its lease taken over and abandoned the attempt."""


class TaskCancelled(Exception):
    """The job was cancelled (in the admin, with `leased cancel`, or Leased.cancel())."""
