"""leased migration 0024: the trace context of the span that enqueued a job."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0019_crashes")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=24), migrations.RunPython.noop, atomic=False)]
