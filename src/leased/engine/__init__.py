"""The worker: claims jobs, runs handlers, keeps leases alive, records how each attempt ended.

It talks to storage only through leased.backends.ports.Backend and imports no backend, CLI or web code.
"""

from leased.engine.context import CancelReason, TaskContext
from leased.engine.worker import Worker, WorkerStats

__all__ = ["CancelReason", "TaskContext", "Worker", "WorkerStats"]
