"""The app the failover test's `leased worker` processes run (database from $LEASED_DATABASE_URL)."""

import os
import time

from leased import Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])


@app.task(name="ship", lease=3.0)
def ship(order_id: int) -> int:
    time.sleep(0.05)  # a few jobs are running whenever the primary dies
    return order_id
