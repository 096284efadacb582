"""leased migration 0028: each task's signature on its worker's row, to warn of two apps sharing a task name."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0023_attempt_trace_context")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=28), migrations.RunPython.noop, atomic=False)]
