"""leased migration 0022: which older code runs on the schema, for rolling deploys."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0017_due_set_heals")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=22), migrations.RunPython.noop, atomic=False)]
