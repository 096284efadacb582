"""leased: durable background jobs in the database your application already runs."""

from leased.app import Leased
from leased.backoff import Backoff
from leased.engine.context import CancelReason, TaskContext
from leased.errors import (
    ConfigurationError,
    DatabaseFull,
    DatabaseLocked,
    DatabaseUnavailable,
    InvalidTransition,
    JobNotFound,
    LeasedError,
    OutcomeUnknown,
    PayloadError,
    PermanentError,
    SchemaNotReady,
    SignalTimeout,
    WaitTimeout,
    WorkflowNotFound,
)
from leased.explain import Explanation, Reason
from leased.jobs import Attempt, Job, JobStatus, Outcome, Progress
from leased.retention import Retention
from leased.runs import WorkflowInfo, WorkflowStatus
from leased.tasks import Task
from leased.workflows import Run, Workflow

__all__ = [
    "Attempt", "Backoff", "CancelReason", "ConfigurationError", "DatabaseFull", "DatabaseLocked",
    "DatabaseUnavailable", "Explanation", "InvalidTransition", "Job", "JobNotFound", "JobStatus", "Leased",
    "LeasedError", "Outcome", "OutcomeUnknown", "PayloadError", "Progress", "PermanentError", "Reason", "Retention",
    "SchemaNotReady", "SignalTimeout", "Task", "TaskContext", "WaitTimeout", "Run",
    "Workflow", "WorkflowInfo", "WorkflowNotFound", "WorkflowStatus",
]
__version__ = "0.1.0"  # the one place: pyproject.toml reads it (tool.hatch.version)
