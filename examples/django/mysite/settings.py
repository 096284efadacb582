"""The least a Django project needs for leased's backend: the app, a database, TASKS."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only"
DEBUG = True
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "static"  # where `manage.py collectstatic` gathers them for a web server

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the admin's CSS and JavaScript, served by runserver while DEBUG
    "leased.contrib.django",  # leased's tables (a migration), manage.py leased_worker, the admin pages
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
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

# SQLite here; PostgreSQL works the same ("ENGINE": "django.db.backends.postgresql", psycopg 3).
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DATABASE", BASE_DIR / "db.sqlite3"),
        # Transactions take SQLite's write lock up front: requests and workers then queue for it
        # instead of failing with "database is locked".
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30},
    }
}

TASKS = {
    "default": {
        "BACKEND": "leased.contrib.django.LeasedBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"database": "default", "max_attempts": 5},
    }
}
