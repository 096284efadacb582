"""Why a handler was told to stop, and the exception that stops it (read by the context and the
parts it is made of, engine/waits.py among them)."""

from __future__ import annotations

from enum import StrEnum


class CancelReason(StrEnum):
    """Why a handler was told to stop: `context.cancel_reason`."""

    LEASE_LOST = "lease lost"
    CANCELLED = "cancelled by a user"
    SHUTDOWN = "worker shutting down"
    TIMEOUT = "timeout"  #: the attempt ran past the job's time limit
    WAITED = "waiting"  #: its handler waits (context.sleep, wait_for): the attempt ended, the job sleeps


class JobCancelled(Exception):
    """Raised by TaskContext.raise_if_cancelled(); the worker records the attempt by its reason."""
