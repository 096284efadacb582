"""System checks of a LeasedBackend's configuration (`manage.py check` runs them)."""

from __future__ import annotations

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from leased.contrib.django.connection import database_url


def backend_problems(alias: str, database: str) -> list[checks.CheckMessage]:
    """What is wrong with TASKS[alias], a LeasedBackend on Django's database `database`."""
    where = f"TASKS[{alias!r}]"
    problems = []
    if not apps.is_installed("leased.contrib.django"):
        problems.append(checks.Error(
            f"{where} uses leased's backend, but 'leased.contrib.django' is not in INSTALLED_APPS",
            hint="add it: it brings the migration that creates leased's tables, get_result() and the worker command",
            id="leased.E001"))
    if database not in connections.settings:
        problems.append(checks.Error(
            f"{where}['OPTIONS']['database'] is {database!r}, which is not in DATABASES",
            hint=f"use one of {', '.join(connections.settings)}", id="leased.E002"))
        return problems
    try:
        database_url(database)
    except ImproperlyConfigured as error:
        problems.append(checks.Error(str(error), id="leased.E003"))
    return problems
