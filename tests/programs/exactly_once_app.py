"""The worker program of the exactly-once chaos test (tests/system/test_exactly_once_chaos.py):
`python exactly_once_app.py WORKER_ID`, its database from $LEASED_DATABASE_URL.

Two tasks, registered by register(app) in the workers and in the test's producer alike:

    eo.credit(index)  adds 1 to the counter row of eo_counter and inserts a row of eo_effects
                      (job id, attempt, worker), then sleeps a little, deaf to cancellation (the
                      worker may be SIGKILLed or SIGSTOPped past its lease meanwhile)

    eo.steps(index)   three durable steps (TaskContext.step), each inserting a row of eo_step_effects:
                      a plain one, a transactional one, a plain one

With EO_TRANSACTIONAL=1 (the default) eo.credit the task is transactional: both writes are on
context.connection and commit with the job's end, fenced on its lease. With 0 they are the same
statements on a connection of the worker's own, committed as they run: what at-least-once delivery
does to a handler's effects, counted beside it. Environment: EO_LEASE, EO_CONCURRENCY, EO_STEP_MILLIS.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import connections
from leased import Backoff, Leased

TASK = "eo.credit"
STEPS_TASK = "eo.steps"
MAX_ATTEMPTS = 50  # no job is killed fifty times: a failed job is a finding, not chaos
TABLES = ("CREATE TABLE eo_counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)",
          "INSERT INTO eo_counter (id, value) VALUES (1, 0)",
          "CREATE TABLE eo_effects (job_id BIGINT NOT NULL, attempt INTEGER NOT NULL, worker_id VARCHAR(100) NOT NULL)",
          "CREATE TABLE eo_step_effects (job_id BIGINT NOT NULL, step VARCHAR(20) NOT NULL, attempt INTEGER NOT NULL)")
_own = threading.local()  # the plain task's connection, one per handler thread


def register(app: Leased):
    """The task on `app`: the same name and options for the producer and the workers."""
    lease = float(os.environ.get("EO_LEASE", "1.5"))
    transactional = os.environ.get("EO_TRANSACTIONAL", "1") == "1"
    step_seconds = float(os.environ.get("EO_STEP_MILLIS", "5")) / 1000

    @app.task(name=TASK, lease=lease, max_attempts=MAX_ATTEMPTS, takes_context=True, transactional=transactional,
              backoff=Backoff(base=0.05, cap=0.2))
    def credit(context, index: int) -> int:
        def write(connection) -> None:
            connections.execute(connection, "UPDATE eo_counter SET value = value + 1 WHERE id = 1")
            connections.execute(connection, "INSERT INTO eo_effects (job_id, attempt, worker_id) VALUES (?, ?, ?)",
                                (context.job_id, context.attempt, context.worker_id))

        if transactional:
            write(context.connection)
        else:
            _on_own_connection(app, write)
        time.sleep(step_seconds)
        return index

    @app.task(name=STEPS_TASK, lease=lease, max_attempts=MAX_ATTEMPTS, takes_context=True,
              backoff=Backoff(base=0.05, cap=0.2))
    def three_steps(context, index: int) -> int:
        """A plain step (its effect on a connection of its own), a transactional one (its effect
        commits with its record), then a last plain one; each sleeps a little, killable anywhere."""
        def effect(connection, step: str) -> str:
            connections.execute(connection, "INSERT INTO eo_step_effects (job_id, step, attempt) VALUES (?, ?, ?)",
                                (context.job_id, step, context.attempt))
            time.sleep(step_seconds)
            return step

        context.step("plain", lambda: _on_own_connection(app, lambda connection: effect(connection, "plain")))
        context.step("tx", lambda connection: effect(connection, "tx"), transactional=True)
        context.step("last", lambda: _on_own_connection(app, lambda connection: effect(connection, "last")))
        return index

    return credit


def _on_own_connection(app: Leased, write):
    """write(connection) on this handler thread's own connection, which is dropped when a write on it
    fails (say, the server ended its session), as an app's would be: the attempt fails, and the
    thread's next one connects again rather than failing on a dead connection."""
    if getattr(_own, "connection", None) is None:
        options = {"timeout": 30} if app.database_url.startswith("sqlite") else {}  # SQLite's busy timeout
        _own.connection = connections.connect(app.database_url, autocommit=True, **options)
    try:
        return write(_own.connection)
    except Exception:
        connection, _own.connection = _own.connection, None
        try:
            connection.close()
        except Exception:
            pass
        raise


if __name__ == "__main__":
    worker_id = sys.argv[1]
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {worker_id} %(levelname)s %(name)s %(message)s")
    app = Leased(os.environ["LEASED_DATABASE_URL"])
    register(app)
    app.worker(concurrency=int(os.environ.get("EO_CONCURRENCY", "4")), poll_interval=0.05,
               shutdown_grace=15.0, worker_id=worker_id).run()
