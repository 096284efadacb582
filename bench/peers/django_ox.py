"""django-ox on PostgreSQL and SQLite, as its docs show: Django 6.1's Tasks API with
`django_ox.backend.OxBackend` in TASKS, `task.enqueue()`, bulk `django_ox.bulk.enqueue_many`, and
workers started with `manage.py ox_worker --concurrency N`.

It runs in bench/django_project (the project bench/django_backends.py uses, its database settings:
SQLite with WAL, synchronous=NORMAL, IMMEDIATE transactions; PostgreSQL with persistent
connections). Django reads its settings once per process, so the producer is a child process of
its own that enqueues what it is sent on stdin (one line per 1,000 jobs); `python -m
peers.django_ox` is that process."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid

import psycopg
from common import BENCH, drop_database, pg_url, recreate_database, remove_sqlite

from peers.base import Peer, chunks, scratch

PROJECT = BENCH / "django_project"
TASKS = {"noop": "suite_noop", "probe": "suite_probe", "nap": "suite_nap"}
DONE = "SELECT count(*) FROM django_ox_oxtask WHERE status = 'SUCCESSFUL'"


class _DjangoOx(Peer):
    package = "django-ox"
    handler = "sync"
    recovery = ("a task whose lock is older than the lock timeout is reclaimed by the next worker "
                "(`--lock-timeout`, set to 5 s here)")
    database = "?"  # sqlite or postgres: BENCH_DATABASE in bench/django_project/benchsite.py

    def __init__(self) -> None:
        self.lock_timeout: float | None = None

    def settings(self):
        return ("`manage.py ox_worker --concurrency N` (threads, polls every 1 s), Django 6.1 Tasks API, "
                "`task.enqueue()`, bulk `django_ox.bulk.enqueue_many`")

    def version(self):
        from importlib import metadata

        return f"{metadata.version('django-ox')} (Django {metadata.version('django')})"

    def worker_env(self):
        return {**self.env, "PYTHONPATH": os.pathsep.join([str(PROJECT), str(BENCH)])}

    def setup(self):
        self.env = {"BENCH_BACKEND": "ox", "BENCH_DATABASE": self.database, "DJANGO_SETTINGS_MODULE": "benchsite",
                    **self.store_env()}
        self.producer = subprocess.Popen([sys.executable, "-m", "peers.django_ox"], cwd=str(BENCH),
                                         env={**os.environ, **self.worker_env()}, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
        self._ask({"migrate": True})

    def _ask(self, request: dict) -> None:
        self.producer.stdin.write(json.dumps(request) + "\n")
        self.producer.stdin.flush()
        answer = self.producer.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"django-ox producer: {answer or 'exited with code ' + str(self.producer.wait())}")

    def enqueue_one(self, kind, numbers, seconds=0.0):
        for chunk in chunks(numbers):
            self._ask({"task": TASKS[kind], "numbers": chunk, "seconds": seconds, "bulk": False})

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        for chunk in chunks(numbers):
            self._ask({"task": TASKS[kind], "numbers": chunk, "seconds": seconds, "bulk": True})

    def worker_argv(self, concurrency, index):
        return [sys.executable, str(PROJECT / "manage.py"), "ox_worker", "--concurrency", str(concurrency),
                *(["--lock-timeout", str(self.lock_timeout)] if self.lock_timeout else [])]

    def crash_settings(self):
        self.lock_timeout = 5.0
        return {}

    def teardown(self):
        self.lock_timeout = None
        self.producer.stdin.close()
        self.producer.wait(30)


class DjangoOxPostgres(_DjangoOx):
    name = "django-ox-pg"
    label = "django-ox (PostgreSQL)"
    store = "PostgreSQL"
    database = "postgres"
    pg_database = "bench_django_ox"

    def store_env(self):
        recreate_database(self.pg_database)
        return {"BENCH_PG_NAME": self.pg_database}

    def setup(self):
        super().setup()
        self.counter = psycopg.connect(pg_url(self.pg_database), autocommit=True)

    def count_done(self):
        return self.counter.execute(DONE).fetchone()[0]

    def teardown(self):
        self.counter.close()
        super().teardown()
        drop_database(self.pg_database)


class DjangoOxSQLite(_DjangoOx):
    name = "django-ox-sqlite"
    label = "django-ox (SQLite)"
    store = "SQLite"
    database = "sqlite"

    def store_env(self):
        self.path = scratch("django-ox") / f"tasks-{uuid.uuid4().hex[:8]}.sqlite3"
        return {"BENCH_SQLITE_PATH": str(self.path)}

    def setup(self):
        super().setup()
        self.counter = sqlite3.connect(self.path, timeout=30)

    def count_done(self):
        return self.counter.execute(DONE).fetchone()[0]

    def teardown(self):
        self.counter.close()
        super().teardown()
        remove_sqlite(self.path)


def main() -> None:
    """The producer: Django set up once, then one request a line, "ok" once it is done."""
    import django

    django.setup()
    from benchapp import tasks
    from django.core.management import call_command
    from django_ox.bulk import enqueue_many

    for line in sys.stdin:
        request = json.loads(line)
        if request.get("migrate"):
            call_command("migrate", verbosity=0)
        else:
            task = getattr(tasks, request["task"])
            calls = [((n, request["seconds"]) if request["task"] == "suite_nap" else (n,)) for n in request["numbers"]]
            if request["bulk"]:
                enqueue_many(task, [(args, {}) for args in calls])
            else:
                for args in calls:
                    task.enqueue(*args)
        print("ok", flush=True)


if __name__ == "__main__":
    main()
