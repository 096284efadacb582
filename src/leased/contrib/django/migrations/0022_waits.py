"""leased migration 0026: jobs that wait (a 'sleeping' status, their waits and their signals)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0021_handler_outlived_limit")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=26), migrations.RunPython.noop, atomic=False)]
