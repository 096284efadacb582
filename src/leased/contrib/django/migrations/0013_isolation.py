"""leased migration 0017: isolation chosen per call (on the job's row), and each worker's children."""

from django.db import migrations

from leased.contrib.django.schema import apply_leased_migrations


class Migration(migrations.Migration):
    dependencies = [("leased", "0012_crashed")]

    operations = [migrations.RunPython(apply_leased_migrations(up_to=17), migrations.RunPython.noop, atomic=False)]
