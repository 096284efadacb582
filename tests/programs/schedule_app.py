"""A worker process for the schedule crash tests: python schedule_app.py WORKER_ID [QUEUES]
(database from $LEASED_DATABASE_URL). QUEUES limits what it claims, not what it ticks."""

import logging
import os
import sys
from datetime import timedelta

from leased import Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])


@app.periodic(every=timedelta(seconds=1), name="beat", catch_up="all", takes_context=True)
def beat(context, scheduled_at):
    return context.worker_id


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    queues = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    app.worker(concurrency=2, poll_interval=0.05, worker_id=sys.argv[1], queues=queues).run()
