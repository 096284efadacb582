"""leased migration 0010: an attempt's record written once, when it ends; its start on the job row."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0005_status_queue_index")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=10), migrations.RunPython.noop, atomic=False)]
