"""leased migration 0009: SQLite and MariaDB count a status by queue from an index alone."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0004_lean_hot_table")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=9), migrations.RunPython.noop, atomic=False)]
