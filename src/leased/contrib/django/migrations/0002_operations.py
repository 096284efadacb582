"""leased migrations 0003-0006: paused queues and retention, schedules, limits, time limits."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0001_initial")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=6), migrations.RunPython.noop, atomic=False)]
