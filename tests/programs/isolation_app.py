"""A worker process for the isolation crash test: python isolation_app.py WORKER_ID (database from
$LEASED_DATABASE_URL). Its one task runs in a child process that hangs."""

import os
import sys

from leased import Leased

import isolated_handlers

app = Leased(os.environ["LEASED_DATABASE_URL"])
app.task(name="sleeps_in_c", isolation="process", lease=1.0, max_attempts=2)(isolated_handlers.sleeps_in_c)

if __name__ == "__main__":
    app.worker(concurrency=1, poll_interval=0.05, worker_id=sys.argv[1]).run()
