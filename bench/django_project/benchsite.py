"""Settings of the Django backends benchmark: one task backend on one database, chosen by the
environment (BENCH_BACKEND: leased, tasks_db or ox; BENCH_DATABASE: sqlite or postgres), the same
database settings for all three backends."""

import os

BACKENDS = {
    "leased": ("leased.contrib.django", "leased.contrib.django.LeasedBackend"),
    "tasks_db": ("django_tasks_db", "django_tasks_db.DatabaseBackend"),
    "ox": ("django_ox", "django_ox.backend.OxBackend"),
}
BACKEND = os.environ.get("BENCH_BACKEND", "leased")
DATABASE = os.environ.get("BENCH_DATABASE", "sqlite")
app, backend = BACKENDS[BACKEND]

SECRET_KEY = "bench-only"
DEBUG = False  # db_worker reloads on code changes under DEBUG
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", app, "benchapp"]
TASKS = {"default": {"BACKEND": backend, "QUEUES": ["default"]}}

if DATABASE == "sqlite":
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["BENCH_SQLITE_PATH"],
        # WAL and synchronous=NORMAL as leased's own connections use them; IMMEDIATE so that a
        # transaction takes the write lock when it begins (leased's README recommends it for Django).
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30,
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["BENCH_PG_NAME"], "USER": "postgres", "HOST": "127.0.0.1", "PORT": "5432",
        "CONN_MAX_AGE": 600,  # persistent connections: db_worker closes "old" ones on every loop
    }}
