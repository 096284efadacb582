"""leased migration 0011: finished jobs counted per minute as they finish, in rows per worker."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0006_attempt_written_once")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=11), migrations.RunPython.noop, atomic=False)]
