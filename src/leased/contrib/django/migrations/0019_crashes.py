"""leased migration 0023: crashes counted on a job's row, and its task's max_crashes (poison jobs)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0018_schema_compatibility")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=23), migrations.RunPython.noop, atomic=False)]
