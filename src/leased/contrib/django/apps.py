from django.apps import AppConfig


class LeasedConfig(AppConfig):
    name = "leased.contrib.django"
    label = "leased"  # not "django", the last part of the name
    verbose_name = "leased jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from leased.contrib.django import checks  # noqa: F401  (registers the check of queued jobs)
