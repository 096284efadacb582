"""python manage.py leased_worker [--concurrency N] [--queues a,b] [--backend ALIAS] [--until-empty]

leased's Worker in Django's process: it imports every installed app's `tasks` module, runs the
tasks of a LeasedBackend until SIGINT or SIGTERM (the first lets running tasks finish, within the
grace period; a second cancels them), and closes stale database connections around each task.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.tasks.exceptions import InvalidTaskBackend
from django.utils.module_loading import autodiscover_modules

from leased.errors import ConfigurationError, LeasedError


class Command(BaseCommand):
    help = "Run a leased worker for this project's django.tasks (Ctrl-C or SIGTERM stops it gracefully)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=8, help="tasks run at once (default 8)")
        parser.add_argument("--queues", default=None,
                            help="comma-separated queue names to work on (default: every queue)")
        parser.add_argument("--backend", default=DEFAULT_TASK_BACKEND_ALIAS,
                            help="the TASKS alias of a LeasedBackend (default 'default')")
        parser.add_argument("--poll-interval", type=float, default=1.0,
                            help="seconds between looks for due tasks when nothing wakes the worker")
        parser.add_argument("--shutdown-grace", type=float, default=30.0,
                            help="seconds running tasks get to finish after the first stop signal")
        parser.add_argument("--worker-id", default=None, help="this worker's id (default: host:pid:random)")
        parser.add_argument("--until-empty", action="store_true",
                            help="run the tasks that are due, then exit (for cron jobs and tests)")

    def handle(self, *args: Any, **options: Any) -> None:
        from leased.contrib.django.backend import LeasedBackend

        try:
            backend = task_backends[options["backend"]]
        except InvalidTaskBackend as error:
            raise CommandError(str(error)) from None
        if not isinstance(backend, LeasedBackend):
            raise CommandError(f"TASKS[{options['backend']!r}] is {type(backend).__name__}, not "
                               "leased.contrib.django.LeasedBackend")
        queues = [name.strip() for name in options["queues"].split(",") if name.strip()] if options["queues"] else None
        unknown = [name for name in queues or () if backend.queues and name not in backend.queues]
        if unknown:
            raise CommandError(f"--queues: {unknown[0]!r} is not in TASKS[{backend.alias!r}]['QUEUES'] "
                               f"({', '.join(sorted(backend.queues))})")
        if options["concurrency"] < 1:
            raise CommandError(f"--concurrency must be at least 1, got {options['concurrency']}")
        if "leased_jobs" not in connections[backend.database].introspection.table_names():
            raise CommandError(f"leased's tables are missing from database {backend.database!r}: "
                               f"run python manage.py migrate --database {backend.database}")
        autodiscover_modules("tasks")
        try:
            worker = backend.worker(concurrency=options["concurrency"], queues=queues,
                                    poll_interval=options["poll_interval"],
                                    shutdown_grace=options["shutdown_grace"], worker_id=options["worker_id"])
        except ConfigurationError as error:
            raise CommandError(f"{error} (django.tasks are found in the tasks module of each installed app, "
                               "or wherever those modules import them from)") from None
        from leased.contrib.django.stranded import jobs_of_aliases_gone

        for stranded in jobs_of_aliases_gone(databases=[backend.database]):  # jobs this worker will never run
            self.stderr.write(f"warning: {stranded.msg}; {stranded.hint}")
        connections.close_all()  # the checks above used this thread's connection; handlers open their own
        self.stdout.write(f"leased worker {worker.id}: {len(backend.app.tasks)} tasks, "
                          f"queues {', '.join(queues) if queues else 'all'}, concurrency {options['concurrency']}, "
                          f"database {backend.database!r}")
        self.stdout.flush()
        try:
            stats = worker.run(stop_when_idle=options["until_empty"])
        except LeasedError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"stopped: {stats.done} done, {stats.failed} failed, "
                          f"{stats.retried} to retry")
