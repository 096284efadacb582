"""leased migration 0007: leased_now(), the clock seam that test helpers move."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0002_operations")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=7), migrations.RunPython.noop, atomic=False)]
