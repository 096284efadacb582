"""Jobs in Django's admin: filter and search them, read every attempt's traceback, retry or cancel.

Reading goes through the unmanaged models; retry and cancel go through leased's API (Leased.retry,
Leased.cancel), which owns the state machine: a running job's worker loses its lease and stops.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.tasks import task_backends
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from leased.contrib.django.models import Job
from leased.errors import InvalidTransition, JobNotFound


def leased_backend() -> Any:
    """The first LeasedBackend in TASKS (whose database the admin shows), or None."""
    from leased.contrib.django.backend import LeasedBackend

    return next((backend for backend in task_backends.all() if isinstance(backend, LeasedBackend)), None)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "task_name", "queue_name", "status_badge", "attempts", "priority", "created_at",
                    "finished_at")
    list_display_links = ("id", "task_name")
    list_filter = ("status", "queue_name", "task_name")
    search_fields = ("=id", "=idempotency_key", "task_name")
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False  # a count over millions of rows on every page costs more than the page
    actions = ("retry_jobs", "cancel_jobs")
    fieldsets = (
        (None, {"fields": ("task_name", "queue_name", "status", "priority", "idempotency_key")}),
        (_("Payload"), {"fields": ("arguments", "result_json", "last_error")}),
        (_("Schedule"), {"fields": ("attempts", "lease_seconds", "run_after", "created_at", "finished_at",
                                    "lease_owner", "lease_expires_at")}),
        (_("Attempts"), {"fields": ("history",)}),
    )
    readonly_fields = ("task_name", "queue_name", "status", "priority", "idempotency_key", "arguments",
                       "result_json", "last_error", "attempts", "lease_seconds", "run_after", "created_at",
                       "finished_at", "lease_owner", "lease_expires_at", "history")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        backend = leased_backend()
        queryset = super().get_queryset(request)
        return queryset.using(backend.database) if backend is not None else queryset

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued by code, not typed in

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # history is the point; prune finished jobs with SQL if they pile up

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> Any:
        extra_context = {**(extra_context or {}), "show_save": False, "show_save_and_continue": False,
                         "show_save_and_add_another": False}
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, job: Job) -> str:
        colours = {"pending": "#777", "running": "#1f6feb", "done": "#1a7f37", "failed": "#cf222e",
                   "cancelled": "#9a6700"}
        return format_html('<strong style="color: {}">{}</strong>', colours.get(job.status, "inherit"), job.status)

    @admin.display(description=_("attempts"))
    def attempts(self, job: Job) -> str:
        return f"{job.attempt} / {job.max_attempts}"

    @admin.display(description=_("arguments"))
    def arguments(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", json.dumps({"args": job.args, "kwargs": job.kwargs}, indent=2))

    @admin.display(description=_("result"))
    def result_json(self, job: Job) -> str:
        return "-" if job.result is None else format_html("<pre>{}</pre>", json.dumps(job.result, indent=2))

    @admin.display(description=_("history"))
    def history(self, job: Job) -> str:
        rows = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((a.number, a.worker_id, a.started_at, a.finished_at or "-", a.outcome or "running",
              _error_cell(a)) for a in job.history()))
        return format_html('<table><thead><tr><th>#</th><th>worker</th><th>started</th><th>finished</th>'
                           '<th>outcome</th><th>error</th></tr></thead><tbody>{}</tbody></table>', rows)

    @admin.action(description=_("Retry the selected failed or cancelled jobs"), permissions=["change"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._act(request, queryset, "retry", _("retried"))

    @admin.action(description=_("Cancel the selected pending or running jobs"), permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._act(request, queryset, "cancel", _("cancelled"))

    def _act(self, request: HttpRequest, queryset: QuerySet, verb: str, done: str) -> None:
        backend = leased_backend()
        if backend is None:
            self.message_user(request, _("No LeasedBackend in TASKS."), messages.ERROR)
            return
        act = getattr(backend.app, verb)
        changed, refused = [], []
        for job_id in queryset.values_list("id", flat=True):
            try:
                act(job_id)
                changed.append(job_id)
            except (InvalidTransition, JobNotFound) as error:
                refused.append(str(error))
        if changed:
            self.message_user(request, format_html("{} {}: {}", len(changed), done,
                                                   ", ".join(f"#{job_id}" for job_id in changed)), messages.SUCCESS)
        for reason in refused:
            self.message_user(request, reason, messages.WARNING)


def _error_cell(attempt: Any) -> str:
    if not attempt.error_type and not attempt.error_message:
        return "-"
    summary = f"{attempt.error_type or ''}: {attempt.error_message or ''}".strip(": ")
    if not attempt.traceback:
        return summary
    return format_html("<details><summary>{}</summary><pre>{}</pre></details>", summary, attempt.traceback)
