"""The handlers bench/isolation.py runs, at a module's top level so that a child process (leased's
isolation="process") or a Celery prefork child can import them. Each returns its own start and
end (time.time()), so a drain's rate leaves worker start-up out."""

import os
import time

BURN_LOOPS = int(os.environ.get("BENCH_BURN_LOOPS", "200000"))  # set by the bench after calibrating


def burn(loops: int) -> int:
    total = 0
    for number in range(loops):
        total += number * number % 7
    return total


def cpu(n: int) -> list[float]:
    started = time.time()
    burn(BURN_LOOPS)
    return [started, time.time()]


def noop(n: int) -> list[float]:
    now = time.time()
    return [now, now]


# Celery's side: its prefork pool, the model leased's isolation compares with. Redis as broker and
# result backend (databases of their own, flushed by the bench). Absent outside bench's virtualenv.
try:
    from celery import Celery
except ImportError:
    Celery = None
celery_app = None if Celery is None else Celery("bench_isolation", broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/13"),
                    backend=os.environ.get("BENCH_CELERY_BACKEND", "redis://127.0.0.1:6379/14"))
if celery_app is not None:
    celery_app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json",
                           worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True,
                           worker_hijack_root_logger=False)
    celery_cpu = celery_app.task(name="bench.isolation.cpu")(cpu)
