"""leased migration 0012: a lease's renewal can be a HOT update on PostgreSQL (nothing to change elsewhere)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0007_finishes_counted")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=12), migrations.RunPython.noop, atomic=False)]
