"""leased migration 0027: the trace context of an attempt's own span, for a step's links to its parents."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0022_waits")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=27), migrations.RunPython.noop, atomic=False)]
