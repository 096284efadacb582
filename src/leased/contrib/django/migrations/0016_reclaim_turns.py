"""leased migration 0020: on PostgreSQL, the workers' periodic reclaims take turns."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0015_due_set_only")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=20), migrations.RunPython.noop, atomic=False)]
