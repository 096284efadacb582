"""The app the PgBouncer test's `leased worker` processes run (database from $LEASED_DATABASE_URL)."""

import os
import time

from leased import Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])


@app.task(name="bounce", lease=3.0)  # renewed each second: two missed under a loaded CI still hold
def bounce(n: int) -> int:
    if n < 0 and os.environ.get("PGBOUNCER_APP_HANG") == "1":
        time.sleep(3600)  # the job this worker is sure to hold when it is killed
    time.sleep(0.002)  # long enough that a killed worker dies with more jobs in hand
    return n
