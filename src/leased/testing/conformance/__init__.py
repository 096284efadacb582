"""The storage conformance suite: what every backend must do, checked through the ports alone.

Each check takes a factory of backends on one fresh database with leased's schema, and drives the
ports directly (`NewJob`, `ClaimRequest`, `AttemptEnd`, ...): no `Leased`, no task, no worker. Time
moves through the backend's clock seam (`backend.clock.advance`), never by sleeping, and "now" is
the database's. Together the checks call every verb of every port, sync and async
(tests/test_storage_conformance.py fails naming any verb they leave uncalled, through a
`Recorder`). leased's own suite runs every check on SQLite, PostgreSQL and MariaDB; a backend of
your own is done when it passes them too:

    from leased.testing.conformance import CHECKS, exercise

    @pytest.mark.parametrize("check", CHECKS)
    def test_my_backend(check, tmp_path):
        exercise(lambda: MyBackend(tmp_path / "db"), only=[check])

A check raises AssertionError (or the backend's own error) naming what broke. pytest is not needed
here: `exercise()` runs the checks in any harness. One module per area holds its checks; they
register in the order the modules are imported below.
"""

from __future__ import annotations

# Each area's module registers its checks as it is imported.
from leased.testing.conformance import (  # noqa: F401 - imported for their checks
    admin,
    async_verbs,
    batches,
    claims,
    ends,
    enqueueing,
    fairness,
    inspection,
    leases,
    limits,
    retention,
    schedules,
    schema,
    steps,
    transactional,
    workers,
    workflows,
)
from leased.testing.conformance.helpers import TASKS, claim, done, enqueue, error, job, new_job, refused
from leased.testing.conformance.suite import CHECKS, Check, MakeBackend, Recorder, check, exercise, port_verbs

__all__ = ["CHECKS", "Check", "MakeBackend", "Recorder", "TASKS", "check", "claim", "done", "enqueue", "error",
           "exercise", "job", "new_job", "port_verbs", "refused"]
