"""The app the PgBouncer test's `leased worker` processes run (database from $LEASED_DATABASE_URL)."""

import os
import time

from leased import Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])


@app.task(name="bounce", lease=1.0)
def bounce(n: int) -> int:
    time.sleep(0.002)  # long enough that a killed worker dies with jobs in hand
    return n
