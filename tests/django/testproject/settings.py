"""A small Django project for leased's backend: SQLite ("default") and, when reachable, PostgreSQL
("postgres") and MariaDB ("mariadb").

Each test run gets fresh test databases (a temporary SQLite file, a PostgreSQL and a MariaDB
database named after the run). Worker processes that tests start set LEASED_DJANGO_USE_TEST_DBS=1 to open those.
"""

import os
import tempfile
import uuid

RUN_ID = os.environ.setdefault("LEASED_DJANGO_TEST_RUN", uuid.uuid4().hex[:10])  # inherited by worker processes
USE_TEST_DBS = os.environ.get("LEASED_DJANGO_USE_TEST_DBS") == "1"
SQLITE_TEST_NAME = os.path.join(tempfile.gettempdir(), f"leased-django-{RUN_ID}.sqlite3")
POSTGRES_TEST_NAME = f"test_leased_django_{RUN_ID}"
MARIADB_TEST_NAME = f"test_leased_django_{RUN_ID}"
# Under pytest-xdist, pytest-django names each worker's test databases with the worker's id appended
# (`_gw0`); the worker processes a test starts inherit PYTEST_XDIST_WORKER and open the same ones.
_XDIST_SUFFIX = (f"_{os.environ['PYTEST_XDIST_WORKER']}" if USE_TEST_DBS and os.environ.get("PYTEST_XDIST_WORKER")
                 else "")

SECRET_KEY = "leased-tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "testproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "leased.contrib.django",
    "signups",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": SQLITE_TEST_NAME + _XDIST_SUFFIX if USE_TEST_DBS else SQLITE_TEST_NAME + ".unused",
        # IMMEDIATE: a transaction takes SQLite's write lock when it begins, so a worker and a
        # request never deadlock upgrading read locks (the setting leased recommends for Django on SQLite).
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30},
        "TEST": {"NAME": SQLITE_TEST_NAME},
    },
}
if os.environ.get("LEASED_DJANGO_POSTGRES") == "1":
    from psycopg.conninfo import conninfo_to_dict

    _postgres = conninfo_to_dict(os.environ.get("LEASED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    DATABASES["postgres"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": POSTGRES_TEST_NAME + _XDIST_SUFFIX if USE_TEST_DBS else _postgres.get("dbname", "test"),
        "USER": _postgres.get("user", "postgres"),
        "PASSWORD": _postgres.get("password", ""),
        "HOST": _postgres.get("host", "127.0.0.1"),
        "PORT": _postgres.get("port", "5432"),
        "TEST": {"NAME": POSTGRES_TEST_NAME},
    }
if os.environ.get("LEASED_DJANGO_MARIADB") == "1":
    from urllib.parse import unquote, urlsplit

    from leased.backends.mariadb.driver import pose_as_mysqldb

    pose_as_mysqldb()  # Django imports MySQLdb: PyMySQL (leased[mariadb]'s driver) stands in without mysqlclient

    _mariadb = urlsplit(os.environ.get("LEASED_TEST_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test"))
    DATABASES["mariadb"] = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": MARIADB_TEST_NAME + _XDIST_SUFFIX if USE_TEST_DBS else _mariadb.path.lstrip("/") or "test",
        "USER": unquote(_mariadb.username or "root"),
        "PASSWORD": unquote(_mariadb.password or ""),
        "HOST": _mariadb.hostname or "127.0.0.1",
        "PORT": str(_mariadb.port or 3306),
        # leased runs every transaction in READ COMMITTED (see leased.backends.mariadb): so do producers.
        "OPTIONS": {"isolation_level": "read committed", "charset": "utf8mb4"},
        "TEST": {"NAME": MARIADB_TEST_NAME, "CHARSET": "utf8mb4"},
    }

TASKS = {
    "default": {
        "BACKEND": "leased.contrib.django.LeasedBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"database": os.environ.get("LEASED_DJANGO_DATABASE", "default")},
    },
}
