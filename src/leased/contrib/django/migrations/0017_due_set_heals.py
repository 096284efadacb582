"""leased migration 0021: on PostgreSQL, the due set heals itself (TRUNCATE, older releases)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0016_reclaim_turns")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=21), migrations.RunPython.noop, atomic=False)]
