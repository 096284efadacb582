from django.apps import AppConfig


class LeasedConfig(AppConfig):
    name = "leased.contrib.django"
    label = "leased"  # not "django", the last part of the name
    verbose_name = "leased jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.test.signals import setting_changed

        from leased.contrib.django import stranded  # noqa: F401  (registers the check of queued jobs)
        from leased.contrib.django.available_apps import on_installed_apps_changed

        # A TransactionTestCase whose available_apps leaves leased out flushes without leased's flush.
        setting_changed.connect(on_installed_apps_changed, dispatch_uid="leased.available_apps")
