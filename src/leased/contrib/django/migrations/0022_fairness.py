"""leased migration 0029: fairness keys, their weights, and (SQLite) the fair claim's key table."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0021_handler_outlived_limit")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=29), migrations.RunPython.noop, atomic=False)]
