"""leased migration 0013: workflows (a waiting status, steps and their dependencies)."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0008_renewals_hot")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=13), migrations.RunPython.noop, atomic=False)]
