"""leased migration 0018: on PostgreSQL, the plain claim's due set in a table of its own, in generations that are
truncated."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0013_isolation")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=18), migrations.RunPython.noop, atomic=False)]
