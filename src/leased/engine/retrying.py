"""The one retry policy for database outages, shared by every loop of the worker.

A loop that meets a transient error (leased.errors.TRANSIENT_ERRORS: the database is out of reach,
or a conflict worth another try) waits retry_delay(failures) and tries again. Any other error is a
bug: it ends the loop, and supervision stops the worker loudly. The heartbeat paces its retries by
the lease instead (engine/heartbeat.py): a renewal is only worth something before the lease ends.
"""

from __future__ import annotations

from leased.engine.error_text import message_of
from leased.errors import TRANSIENT_ERRORS


def is_transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT_ERRORS)


# A retry costs one statement or one connection attempt, refused at once while the server is down;
# waiting longer between them only delays the resume once a restarted server or a promoted standby
# answers (leased promises to start jobs again within seconds of a failover).
LONGEST_RETRY_SECONDS = 1.0


def retry_delay(failures: int, longest: float = LONGEST_RETRY_SECONDS) -> float:
    """Seconds before retrying after `failures` transient errors in a row. The first few retry at
    once: after a restart every pooled connection fails once, and the next one is usually fine."""
    return 0.1 if failures <= 3 else min(longest, 0.25 * 2 ** (failures - 3))


class Outage:
    """A loop's transient failures in a row: how long to wait next, and whether one just ended."""

    def __init__(self, longest: float = LONGEST_RETRY_SECONDS):
        self.failures = 0
        self.longest = longest

    def failed(self) -> float:
        self.failures += 1
        return retry_delay(self.failures, self.longest)

    def ended(self) -> bool:
        """True once, at the first success after failures."""
        ended, self.failures = self.failures > 0, 0
        return ended


def one_line(error: object) -> str:
    text = message_of(error).strip().splitlines()  # it is given errors a handler's own code raised too
    return text[0] if text else type(error).__name__
