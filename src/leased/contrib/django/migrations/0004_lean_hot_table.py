"""leased migration 0008: fewer indexes over every row of leased_jobs; HOT room for attempts."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0003_clock_seam")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=8), migrations.RunPython.noop, atomic=False)]
