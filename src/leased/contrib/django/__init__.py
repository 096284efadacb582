"""leased for Django: a django.tasks backend with leases, retries and recovery.

    INSTALLED_APPS = [..., "leased.contrib.django"]     # the migration, the worker command, the admin
    TASKS = {"default": {"BACKEND": "leased.contrib.django.LeasedBackend"}}

Then `python manage.py migrate` and `python manage.py leased_worker`. Needs Django 6.1 (Python 3.12+).
"""

from typing import Any

__all__ = ["LeasedBackend", "LeasedTask"]


def __getattr__(name: str) -> Any:
    # Lazily: INSTALLED_APPS imports this package before Django's app registry is ready.
    if name == "LeasedBackend":
        from leased.contrib.django.backend import LeasedBackend

        return LeasedBackend
    if name == "LeasedTask":
        from leased.contrib.django.options import LeasedTask

        return LeasedTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
