"""leased migration 0014: durable steps (a step's result, kept for the job's later attempts)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0009_workflows")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=14), migrations.RunPython.noop, atomic=False)]
