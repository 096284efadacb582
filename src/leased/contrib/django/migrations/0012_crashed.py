"""leased migration 0016: a new outcome, crashed (a process-isolated handler's child died)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0011_progress")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=16), migrations.RunPython.noop, atomic=False)]
