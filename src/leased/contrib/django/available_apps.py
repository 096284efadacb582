"""leased's tables emptied after a TransactionTestCase whose `available_apps` leaves leased out.

Such a test case flushes with Django's own flush command (only the available apps' commands are
found, so leased's flush, management/commands/flush.py, is not), which skips leased's unmanaged
tables: the jobs it enqueued would wait for the next test's worker. Django announces the restricted
registry with setting_changed("INSTALLED_APPS", enter=True) before the test and the full one with
enter=False after its flush; this receiver remembers whether leased was left out, and if so empties
leased's tables then, on every database this process has open and the test case may use.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import connections

_left_out: list[bool] = []  # one entry per restricted registry in force, innermost last


def on_installed_apps_changed(*, setting: str, enter: bool, **kwargs: Any) -> None:
    if setting != "INSTALLED_APPS":
        return
    if enter:
        _left_out.append(not apps.is_installed("leased.contrib.django"))
    elif _left_out and _left_out.pop():
        empty_open_databases()


def empty_open_databases() -> None:
    from django.test.testcases import DatabaseOperationForbidden

    from leased.contrib.django.management.commands.flush import empty_leased_tables

    for connection in connections.all(initialized_only=True):
        try:
            empty_leased_tables(connection.alias)
        except DatabaseOperationForbidden:  # not among the test case's databases: it wrote nothing there
            continue
