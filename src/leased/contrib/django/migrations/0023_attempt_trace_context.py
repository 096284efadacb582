"""leased migration 0027: the trace context of an attempt's own span, for a step's links to its parents."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    # Renumber on merge: 0022 is reserved for leased's 0026, made elsewhere.
    dependencies = [("leased", "0021_handler_outlived_limit")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=27), migrations.RunPython.noop, atomic=False)]
