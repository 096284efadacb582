"""leased migration 0015: progress (how far an attempt got, on the job's row and each attempt's record)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0010_durable_steps")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=15), migrations.RunPython.noop, atomic=False)]
