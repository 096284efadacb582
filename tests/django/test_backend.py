"""leased's django.tasks backend in a real Django project, on SQLite and PostgreSQL."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"

from djangotest import (  # noqa: F401  (fixtures)
    backend, close_leased_connections, db_alias, job_id, leased_tasks, run_async, run_queued, worker_process)

from conftest import wait_for
from django.db import transaction
from django.tasks import TaskResultStatus, task, task_backends
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from django.utils import timezone
from signups import tasks
from signups.models import Signup

from leased.contrib.django import LeasedBackend, LeasedTask
from leased.contrib.django.exceptions import LeaseExpired, TaskCancelled

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_the_backend_declares_every_capability(backend):
    assert isinstance(backend, LeasedBackend)
    assert (backend.supports_defer, backend.supports_async_task, backend.supports_get_result,
            backend.supports_priority) == (True, True, True, True)
    assert isinstance(tasks.send_welcome, LeasedTask)


def test_a_rolled_back_transaction_leaves_no_job(backend, db_alias):
    with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
        signup = Signup.objects.using(db_alias).create(email="gone@example.com")
        result = tasks.send_welcome.enqueue(signup.id, db_alias)
        assert tasks.send_welcome.get_result(result.id).status == TaskResultStatus.READY  # seen inside
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.send_welcome.get_result(result.id)
    assert not Signup.objects.using(db_alias).exists()
    assert run_queued(backend).claimed == 0


def test_a_committed_job_is_run_by_the_worker_with_every_field_set(backend, db_alias):
    with transaction.atomic(using=db_alias):
        signup = Signup.objects.using(db_alias).create(email="new@example.com")
        result = tasks.send_welcome.enqueue(signup.id, db_alias)
    assert (result.status, result.args, result.kwargs, result.backend) == (
        TaskResultStatus.READY, [signup.id, db_alias], {}, "default")
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    assert result.worker_ids == [] and result.errors == [] and result.attempts == 0
    assert (result.task.queue_name, result.task.priority) == ("mail", 10)

    stats = run_queued(backend)

    assert stats.done == 1
    done = tasks.send_welcome.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.is_finished
    assert done.return_value == "welcomed new@example.com"
    assert done.enqueued_at == result.enqueued_at
    assert done.enqueued_at <= done.started_at == done.last_attempted_at <= done.finished_at
    assert len(done.worker_ids) == 1 and done.attempts == 1 and done.errors == []
    assert done.task == tasks.send_welcome and (done.args, done.kwargs) == ([signup.id, db_alias], {})
    assert Signup.objects.using(db_alias).get().welcomed
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "welcomed new@example.com"


def test_retries_are_errors_and_attempts(backend, tmp_path):
    result = tasks.flaky.enqueue(2, str(tmp_path / "attempts"))
    run_queued(backend)
    done = tasks.flaky.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3
    assert done.attempts == 3 and len(done.errors) == 2
    assert [error.exception_class for error in done.errors] == [ConnectionError, ConnectionError]
    assert done.errors[0].exception_class_path == "builtins.ConnectionError"
    assert done.errors[1].traceback.endswith("ConnectionError: attempt 2 failed\n")
    assert 'raise ConnectionError(f"attempt {attempts} failed")' in done.errors[0].traceback
    assert done.started_at < done.last_attempted_at


def test_out_of_attempts_the_task_fails(backend, tmp_path):
    result = tasks.flaky.enqueue(5, str(tmp_path / "attempts"))
    run_queued(backend)
    failed = tasks.flaky.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.is_finished and failed.finished_at is not None
    assert failed.attempts == 3 and len(failed.errors) == 3
    with pytest.raises(ValueError, match="Task failed"):
        failed.return_value


def test_the_task_context_counts_attempts(backend):
    result = tasks.report_attempt.enqueue(3)
    run_queued(backend)
    done = tasks.report_attempt.get_result(result.id)
    assert done.return_value == {"attempt": 3, "id": result.id, "workers": 3}
    assert [str(error.exception_class.__name__) for error in done.errors] == ["RuntimeError", "RuntimeError"]


def test_per_task_options_reach_the_job(backend, db_alias):
    from leased.contrib.django.models import read_job

    result = tasks.slow_once.enqueue("a", "b")
    job = read_job(db_alias, job_id(result))
    assert (job.max_attempts, job.lease_seconds) == (3, 1.0)
    assert backend.app.cancel(job.id).status == "cancelled"  # never run it here
    changed = tasks.flaky.using(max_attempts=7, lease=timedelta(minutes=2), priority=-5).enqueue(0, "x")
    job = read_job(db_alias, job_id(changed))
    assert (job.max_attempts, job.lease_seconds, job.priority) == (7, 120.0, -5)
    backend.app.cancel(job.id)
    poisonable = read_job(db_alias, job_id(tasks.flaky.using(max_crashes=1).enqueue(0, "y")))
    assert (poisonable.max_crashes, poisonable.crashes, job.max_crashes) == (1, 0, 2)
    backend.app.cancel(poisonable.id)


def test_backend_options_are_the_defaults(db_alias):
    with leased_tasks(db_alias, max_attempts=9, lease=5):
        from leased.contrib.django.models import read_job

        result = tasks.send_welcome.enqueue(1)
        job = read_job(db_alias, job_id(result))
        assert (job.max_attempts, job.lease_seconds) == (9, 5.0)
        task_backends["default"].app.cancel(job.id)


def test_unknown_options_are_refused_with_the_known_ones(db_alias):
    with pytest.raises(InvalidTask, match=r"unknown task option 'retries'.*max_attempts"):
        task(retries=3)(tasks.flaky.func)
    with pytest.raises(InvalidTask, match="max_attempts"):
        task(max_attempts=0)(tasks.flaky.func)
    with pytest.raises(InvalidTask, match=r"invalid max_crashes 0: use a whole number from 1"):
        task(max_crashes=0)(tasks.flaky.func)
    with pytest.raises(InvalidTask, match="backoff"):
        task(backoff=5)(tasks.flaky.func)
    with pytest.raises(InvalidTaskBackend, match=r"unknown option 'databse'.*database"):
        with override_settings(TASKS={"default": {"BACKEND": "leased.contrib.django.LeasedBackend",
                                                  "OPTIONS": {"databse": "default"}}}):
            task_backends["default"]


def test_an_unknown_id_does_not_exist(backend):
    for missing in ("999999999", "abc", "", "-1", "1" * 30):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(missing)


def test_a_deferred_task_waits(backend):
    result = tasks.send_welcome.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1)
    assert run_queued(backend).claimed == 0
    assert backend.get_result(result.id).status == TaskResultStatus.READY
    backend.app.cancel(job_id(result))


def test_a_cancelled_job_is_failed_with_the_reason(backend):
    result = tasks.send_welcome.enqueue(1)
    backend.app.cancel(job_id(result))
    cancelled = backend.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in cancelled.errors] == [TaskCancelled]
    assert "cancelled" in cancelled.errors[0].traceback


def test_async_tasks_and_the_async_api(backend, db_alias):
    async def scenario():
        result = await tasks.add_async.aenqueue(2, 3)
        assert (await tasks.add_async.aget_result(result.id)).status == TaskResultStatus.READY
        return result

    result = run_async(scenario())
    run_queued(backend)
    done = run_async(tasks.add_async.aget_result(result.id))
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5


def test_signals_are_sent_as_djangos_backends_send_them(backend):
    seen = []

    def record(signal_name):
        def receiver(sender, task_result, **kwargs):
            seen.append((signal_name, sender, task_result.status, task_result.id))
        return receiver

    receivers = {task_enqueued: record("enqueued"), task_started: record("started"),
                 task_finished: record("finished")}
    for django_signal, receiver in receivers.items():
        django_signal.connect(receiver)
    try:
        result = tasks.report_attempt.enqueue(2)
        run_queued(backend)
    finally:
        for django_signal, receiver in receivers.items():
            django_signal.disconnect(receiver)
    assert seen == [
        ("enqueued", LeasedBackend, TaskResultStatus.READY, result.id),
        ("started", LeasedBackend, TaskResultStatus.RUNNING, result.id),  # attempt 1 fails, is retried:
        ("started", LeasedBackend, TaskResultStatus.RUNNING, result.id),  # not finished yet
        ("finished", LeasedBackend, TaskResultStatus.SUCCESSFUL, result.id),
    ]


def test_override_settings_switches_backends_both_ways(backend):
    with override_settings(TASKS={"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend",
                                              "QUEUES": []}}):
        immediate = tasks.add_async.enqueue(20, 22)  # declared under leased's backend, run by Django's
        assert immediate.status == TaskResultStatus.SUCCESSFUL and immediate.return_value == 42
    assert isinstance(task_backends["default"], LeasedBackend)
    queued = tasks.add_async.enqueue(1, 1)
    assert queued.status == TaskResultStatus.READY
    run_queued(backend)
    assert tasks.add_async.get_result(queued.id).return_value == 2


@pytest.mark.slow
def test_a_killed_leased_worker_task_is_finished_by_another(backend, db_alias, tmp_path):
    started, done = tmp_path / "started", tmp_path / "done"
    result = tasks.slow_once.enqueue(str(started), str(done))
    first = worker_process(db_alias, "--concurrency", "2")
    try:
        wait_for(lambda: started.exists() and started.read_text(), message="the first worker to start the task")
        running = tasks.slow_once.get_result(result.id)
        assert running.status == TaskResultStatus.RUNNING and running.attempts == 1
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = worker_process(db_alias)
    try:
        wait_for(done.exists, timeout=60, message="another worker to finish the task")
        finished = wait_for(lambda: (r := tasks.slow_once.get_result(result.id)).is_finished and r,
                            message="the result to be recorded")
    finally:
        second.send_signal(signal.SIGTERM)
        output, _ = second.communicate(timeout=60)
    assert second.returncode == 0, output
    assert finished.status == TaskResultStatus.SUCCESSFUL
    assert finished.return_value == int(done.read_text()) == second.pid
    assert finished.attempts == 2 and len(set(finished.worker_ids)) == 2
    assert [error.exception_class for error in finished.errors] == [LeaseExpired]
    assert "leased worker" in output and "stopped:" in output


def test_a_transactional_task_writes_once_with_its_end(backend, db_alias):
    """transactional=True: the task body runs in transaction.atomic() on the backend's database,
    and its writes commit with the job's end, or roll back when it raises or its lease is gone."""
    done = tasks.sign_up_once.enqueue("ada@example.com", db_alias)
    failed_once = tasks.sign_up_once.enqueue("bob@example.com", db_alias, fail_on=1)
    run_queued(backend)
    lost_once = tasks.sign_up_once.enqueue("cy@example.com", db_alias, lose_lease_on=1)
    try:
        run_queued(backend)  # apart: the clock it moves expires every lease claimed with it
    finally:
        backend.app.backend.clock.offset = 0.0  # the app is the database's, shared by the tests after

    assert [tasks.sign_up_once.get_result(result.id).return_value for result in (done, failed_once, lost_once)] \
        == [1, 2, 2]
    assert sorted(Signup.objects.using(db_alias).values_list("email", flat=True)) == [
        "1-ada@example.com", "2-bob@example.com", "2-cy@example.com"]
    lost = backend.app.get_job(job_id(lost_once))
    # Whoever ends the first attempt first names it: the worker finding its lease gone (lease_lost),
    # or its reclaim finding the lease run out (expired), or, the clock having jumped an hour past
    # the worker's last beat, run out on a worker that reads as gone (crashed, issue 41's rule).
    assert lost.history[0].outcome.value in ("lease_lost", "expired", "crashed")


def not_a_flag() -> None:
    pass


def test_transactional_must_be_a_flag():
    with pytest.raises(InvalidTask, match="transactional must be True or False"):
        task(transactional="yes")(not_a_flag)
