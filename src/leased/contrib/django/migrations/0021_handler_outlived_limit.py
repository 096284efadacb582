"""leased migration 0025: whether a timed-out attempt's handler thread outlived its time limit."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0020_trace_context")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=25), migrations.RunPython.noop, atomic=False)]
