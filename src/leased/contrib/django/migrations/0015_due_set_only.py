"""leased migration 0019: on PostgreSQL, the due set is the only index of pending jobs without a key."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0014_due_set")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=19), migrations.RunPython.noop, atomic=False)]
