"""manage.py flush, which empties leased's tables too (jobs, attempts, workers, queues, schedules).

Django's flush empties the tables of managed models only, and leased's models are unmanaged (its
schema is leased's own SQL). TransactionTestCase (and pytest-django's transactional tests) flush
the database after each test, so without this the jobs of one test would be there for the next
one's worker. Installed with "leased.contrib.django", this command takes the place of Django's
(an app's command overrides Django's own). The schema version stays, and job ids are not reset:
an old result id never names a new job.
"""

from __future__ import annotations

from typing import Any

from django.core.management.commands import flush
from django.db import connections, transaction

from leased.contrib.django.schema import LEASED_TABLES

# Children first, as for dropping them; what leased_schema_version records is still true.
LEASED_DATA_TABLES = tuple(table for table in LEASED_TABLES if table != "leased_schema_version")


class Command(flush.Command):
    help = flush.Command.help + " Empties leased's tables too (its jobs and their history)."

    def handle(self, **options: Any) -> None:
        database = options["database"]
        if options["interactive"]:
            confirm = input(f"""You have requested a flush of the database.
This will IRREVERSIBLY DESTROY all data currently in the "{connections[database].settings_dict["NAME"]}" database,
leased's jobs and their history included, and return each table to an empty state.
Are you sure you want to do this?

    Type 'yes' to continue, or 'no' to cancel: """)
            if confirm != "yes":
                self.stdout.write("Flush cancelled.")
                return
        empty_leased_tables(database)  # before Django's flush: a post_migrate receiver may enqueue jobs
        super().handle(**{**options, "interactive": False})


def empty_leased_tables(database: str) -> None:
    """Delete every row of leased's tables on Django's database `database` (nothing if it has none)."""
    connection = connections[database]
    existing = set(connection.introspection.table_names())
    tables = [table for table in LEASED_DATA_TABLES if table in existing]
    with transaction.atomic(using=database), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
