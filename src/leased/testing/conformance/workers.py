"""Workers: how they announce themselves and hear about due jobs."""

from __future__ import annotations

import socket
import time

from leased.backends.ports import Listener, WorkerRecord
from leased.jobs import JobStatus
from leased.testing.conformance.helpers import claim, enqueue, job, new_job, register
from leased.testing.conformance.suite import MakeBackend, check


@check
def workers_announce_themselves(make: MakeBackend) -> None:
    backend = make()
    backend.register_worker(WorkerRecord("w1", "host-1", 4242, 8, ("default",), ("a",)))
    (worker,) = [each for each in backend.list_workers(silent_after=60) if each.id == "w1"]
    assert (worker.host, worker.pid, worker.concurrency) == ("host-1", 4242, 8)
    assert (worker.queues, worker.tasks, worker.running, worker.alive) == (["default"], ["a"], 0, True)
    enqueue(backend)
    claim(backend, "w1")
    backend.clock.advance(30)
    (silent,) = [each for each in backend.list_workers(silent_after=15) if each.id == "w1"]
    assert (silent.running, silent.alive) == (1, False), "silent past `silent_after`: not alive"
    backend.register_worker(WorkerRecord("w1", "host-1", 4242, 8, ("default",), ("a",), stuck_handlers=2))
    (beating,) = [each for each in backend.list_workers(silent_after=15) if each.id == "w1"]
    assert (beating.alive, beating.stuck_handlers) == (True, 2), "a heartbeat refreshes the row"
    backend.unregister_worker("w1")
    assert [each for each in backend.list_workers(silent_after=60) if each.id == "w1"] == []


def _heard(listener: Listener, queue_name: str, timeout: float = 30.0) -> bool:
    """Whether `listener` hears of `queue_name` within `timeout` seconds (each wait blocks on it)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if queue_name in listener.wait(min(left, 1.0)):
            return True
    return False


@check
def a_listener_hears_of_jobs_due_now(make: MakeBackend) -> None:
    """Jobs due now reach a live worker's listener: those the backend wrote itself at their
    commit, those written on a caller's connection once the caller calls wake() after committing,
    and a nudge() with no commit at all. A backend without wake-ups (listener() is None) is polled,
    and says why in its polling_reason."""
    backend = make()
    listener = backend.listener()
    if listener is None:
        assert backend.polling_reason, "a backend that gives no wake-ups says why, for the worker's log"
        backend.wake(["mail"])  # nobody to tell: does nothing
        backend.nudge(["mail"])
        return
    assert backend.polling_reason is None, "a backend that gives wake-ups gives no reason to poll"
    try:
        listener.wait(0.01)  # a listener may start listening at its first wait, as a worker's does
        # The worker's row says where it listens, as the engine announces it (a port, if it has one).
        register(backend, "w1", host=socket.gethostname(), wake_port=listener.port)
        enqueue(backend, new_job(queue_name="mail"))
        assert _heard(listener, "mail"), "a job the backend wrote due now wakes the worker"
        with backend.attempt_transaction() as connection:
            backend.enqueue([new_job(queue_name="reports")], connection)
        backend.wake(["reports"])
        assert _heard(listener, "reports"), "a job written on a caller's connection wakes it after wake()"
        backend.nudge(["nudged"])
        assert _heard(listener, "nudged"), "a nudge wakes it with no job and no commit"
    finally:
        listener.close()


@check
def a_backend_says_where_it_is_and_how_it_reclaims(make: MakeBackend) -> None:
    backend = make()
    where = backend.where
    assert isinstance(where, str) and where, "the database, named for people"
    assert "password" not in where.lower()
    assert backend.reclaims_beside_claims in (True, False)
    with backend.serving_worker():  # a worker runs in this process: its calls are served meanwhile
        enqueue(backend, new_job(lease_seconds=5))
        (claimed,) = claim(backend)
        assert backend.renew([claimed.lease]) == {claimed.lease}
    backend.clock.advance(6)
    # Whichever way the backend's workers reclaim, reclaim_expired() asked to skip if a reclaim
    # ran that recently still reclaims when none did; asked again at once, it may skip.
    assert backend.reclaim_expired(skip_if_done_within=1.0) == 1
    assert job(backend, claimed.id).status is JobStatus.PENDING
    assert backend.reclaim_expired(skip_if_done_within=1.0) == 0
