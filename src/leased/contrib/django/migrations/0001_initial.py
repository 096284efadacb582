"""leased's tables (leased migrations 0001-0002), and the unmanaged models that read them."""

import django.db.models.deletion
from django.db import migrations, models

import leased.contrib.django.models
from leased.contrib.django.schema import apply_leased_migrations, drop_leased_tables


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        # atomic=False: MariaDB commits DDL on its own, and Django refuses DDL inside atomic() there.
        migrations.RunPython(apply_leased_migrations(up_to=2), drop_leased_tables, atomic=False),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("task_name", models.TextField(verbose_name="task")),
                ("queue_name", models.TextField(verbose_name="queue")),
                ("status", models.TextField(choices=[("pending", "pending"), ("running", "running"), ("done", "done"),
                                                     ("failed", "failed"), ("cancelled", "cancelled")],
                                            verbose_name="status")),
                ("priority", models.IntegerField(verbose_name="priority")),
                ("args", leased.contrib.django.models.LeasedJSONField(verbose_name="positional arguments")),
                ("kwargs", leased.contrib.django.models.LeasedJSONField(verbose_name="keyword arguments")),
                ("attempt", models.IntegerField(verbose_name="attempts")),
                ("max_attempts", models.IntegerField(verbose_name="max attempts")),
                ("lease_seconds", models.FloatField(verbose_name="lease (seconds)")),
                ("run_after", leased.contrib.django.models.LeasedTimeField(verbose_name="run after")),
                ("created_at", leased.contrib.django.models.LeasedTimeField(verbose_name="enqueued at")),
                ("finished_at", leased.contrib.django.models.LeasedTimeField(null=True, verbose_name="finished at")),
                ("lease_owner", models.TextField(null=True, verbose_name="lease owner")),
                ("lease_expires_at",
                 leased.contrib.django.models.LeasedTimeField(null=True, verbose_name="lease expires at")),
                ("idempotency_key", models.TextField(null=True, verbose_name="idempotency key")),
                ("result", leased.contrib.django.models.LeasedJSONField(null=True, verbose_name="result")),
                ("last_error", models.TextField(null=True, verbose_name="last error")),
            ],
            options={
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
                "db_table": "leased_jobs",
                "ordering": ["-id"],
                "default_permissions": ("view", "change"),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Attempt",
            fields=[
                ("pk", models.CompositePrimaryKey("job", "attempt", blank=True, editable=False, primary_key=True,
                                                  serialize=False)),
                ("attempt", models.IntegerField(verbose_name="attempt")),
                ("worker_id", models.TextField(verbose_name="worker")),
                ("started_at", leased.contrib.django.models.LeasedTimeField(verbose_name="started at")),
                ("finished_at", leased.contrib.django.models.LeasedTimeField(null=True, verbose_name="finished at")),
                ("outcome", models.TextField(choices=[("done", "done"), ("error", "error"),
                                                      ("lease_lost", "lease_lost"), ("expired", "expired"),
                                                      ("cancelled", "cancelled"), ("shutdown", "shutdown")],
                                             null=True, verbose_name="outcome")),
                ("error_type", models.TextField(null=True, verbose_name="error type")),
                ("error_message", models.TextField(null=True, verbose_name="error message")),
                ("traceback", models.TextField(null=True, verbose_name="traceback")),
                ("job", models.ForeignKey(db_column="job_id", on_delete=django.db.models.deletion.DO_NOTHING,
                                          related_name="attempts", to="leased.job")),
            ],
            options={
                "verbose_name": "attempt",
                "verbose_name_plural": "attempts",
                "db_table": "leased_attempts",
                "ordering": ["job", "attempt"],
                "default_permissions": ("view",),
                "managed": False,
            },
        ),
    ]
