"""Django's tasks contract where the conformance suite does not reach: TASKS aliases, USE_TZ =
False, run_after read back, and the flush between transactional tests. On SQLite, PostgreSQL and
MariaDB, through pytest-django (Django's TransactionTestCase machinery)."""

from __future__ import annotations

from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"

from djangotest import (  # noqa: F401  (fixtures)
    backend, close_leased_connections, db_alias, job_id, leased_tasks, require_database, run_async, run_queued,
    tasks_setting, worker_process)

from django.core.management import call_command
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.db import connections
from django.tasks import TaskResultStatus, task_backends
from django.tasks.signals import task_started
from django.test import override_settings
from django.utils import timezone
from signups import tasks

from leased import Backoff
from leased.backends import dialect_named

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def two_aliases(db_alias: str) -> dict:
    """TASKS with two LeasedBackend aliases on one database."""
    setting = tasks_setting(db_alias)
    return {**setting, "other": {**setting["default"]}}


def started_backends() -> tuple[list[tuple[str, str]], object]:
    seen: list[tuple[str, str]] = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.id, task_result.backend))

    task_started.connect(receiver)
    return seen, receiver


def test_a_result_belongs_to_the_alias_it_was_enqueued_through(db_alias):
    seen, receiver = started_backends()
    try:
        with override_settings(TASKS=two_aliases(db_alias)):
            through_other = tasks.report_backend.using(backend="other").enqueue()
            through_default = tasks.report_backend.enqueue()
            assert (through_default.backend, through_other.backend) == ("default", "other")
            run_queued(task_backends["other"])  # one worker runs both, each under its own alias
            for result, alias in ((through_default, "default"), (through_other, "other")):
                for reader in ("default", "other"):
                    done = task_backends[reader].get_result(result.id)
                    assert (done.status, done.backend, done.return_value) == (TaskResultStatus.SUCCESSFUL, alias, alias)
                    assert done.task.backend == alias
    finally:
        task_started.disconnect(receiver)
    assert sorted(seen) == sorted([(through_default.id, "default"), (through_other.id, "other")])


def test_a_worker_runs_tasks_after_override_settings_removed_the_alias_that_ran_them_first(db_alias):
    with override_settings(TASKS=two_aliases(db_alias)):
        first = tasks.report_backend.using(backend="other").enqueue()
        run_queued(task_backends["other"])
        assert task_backends["other"].get_result(first.id).return_value == "other"
    seen, receiver = started_backends()
    try:
        with leased_tasks(db_alias) as only_default:  # TASKS has no "other" now
            result = tasks.report_backend.enqueue()
            stats = run_queued(only_default)
            done = tasks.report_backend.get_result(result.id)
    finally:
        task_started.disconnect(receiver)
    assert (stats.done, stats.failed) == (1, 0)
    assert (done.status, done.return_value, done.errors) == (TaskResultStatus.SUCCESSFUL, "default", [])
    assert seen == [(result.id, "default")]


@pytest.mark.parametrize("other_alias", ["postgres", "mariadb"])
def test_a_backend_never_reads_another_databases_job_of_the_same_id(other_alias):
    # Two databases number their jobs alike: a result id names its database where that is not
    # "default", so each backend refuses the other's ids even when its own job has the same number.
    require_database(other_alias)
    setting = {"default": tasks_setting("default")["default"], "other": tasks_setting(other_alias)["default"]}
    with override_settings(TASKS=setting):
        here, there = tasks.report_backend.enqueue(), tasks.report_backend.using(backend="other").enqueue()
        while job_id(here) != job_id(there):  # until both have a job numbered alike
            if job_id(here) < job_id(there):
                here = tasks.report_backend.enqueue()
            else:
                there = tasks.report_backend.using(backend="other").enqueue()
        assert there.id == f"{other_alias}:{here.id}"
        assert task_backends["default"].get_result(here.id).backend == "default"
        assert task_backends["other"].get_result(there.id).backend == "other"
        for reader, foreign in (("default", there.id), ("other", here.id)):
            with pytest.raises(TaskResultDoesNotExist):
                task_backends[reader].get_result(foreign)


def test_get_result_keeps_run_after(backend):
    later = timezone.now() + timedelta(hours=1)
    result = tasks.send_welcome.using(run_after=later).enqueue(1)
    read = tasks.send_welcome.get_result(result.id)
    assert read.task.run_after == later and read == result
    assert tasks.send_welcome.get_result(tasks.send_welcome.enqueue(2).id).task.run_after is None


@pytest.fixture
def naive_times(db_alias):
    """USE_TZ = False, on connections opened under it."""
    connections.close_all()
    with override_settings(USE_TZ=False):
        with leased_tasks(db_alias) as leased_backend:
            yield leased_backend
        connections.close_all()
    connections.close_all()


def test_with_use_tz_false_results_carry_naive_local_times(naive_times):
    before = timezone.now()
    assert timezone.is_naive(before)
    result = tasks.add_async.enqueue(1, 2)  # on PostgreSQL this refused "another PostgreSQL server"
    assert before <= result.enqueued_at <= timezone.now()
    later = timezone.now() + timedelta(hours=1)
    deferred = tasks.add_async.using(run_after=later).enqueue(3, 4)
    assert tasks.add_async.get_result(deferred.id) == deferred
    assert tasks.add_async.get_result(deferred.id).task.run_after == later

    run_queued(naive_times)

    done = tasks.add_async.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3
    times = (done.enqueued_at, done.started_at, done.last_attempted_at, done.finished_at)
    assert all(timezone.is_naive(moment) for moment in times)
    assert before <= done.enqueued_at <= done.started_at <= done.finished_at <= timezone.now()
    assert done.enqueued_at == result.enqueued_at


def test_with_use_tz_false_the_running_result_has_naive_times(naive_times):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.enqueued_at, task_result.started_at))

    task_started.connect(receiver)
    try:
        tasks.add_async.enqueue(1, 1)
        run_queued(naive_times)
    finally:
        task_started.disconnect(receiver)
    ((enqueued_at, started_at),) = seen
    assert timezone.is_naive(enqueued_at) and enqueued_at <= started_at <= timezone.now()


def test_flush_empties_leaseds_tables(backend, db_alias):
    from leased.contrib.django.models import Attempt, Job

    done = tasks.add_async.enqueue(1, 1)
    run_queued(backend)
    tasks.add_async.enqueue(2, 2)
    assert Job.objects.using(db_alias).count() == 2 and Attempt.objects.using(db_alias).exists()
    call_command("flush", database=db_alias, interactive=False, verbosity=0)
    assert not Job.objects.using(db_alias).exists() and not Attempt.objects.using(db_alias).exists()
    assert run_queued(backend).claimed == 0
    after = tasks.add_async.enqueue(3, 3)
    assert job_id(after) > job_id(done)  # ids go on: an old result id never names a new job


def test_flush_asks_first_and_a_no_keeps_leaseds_rows(backend, db_alias, monkeypatch, capsys):
    from leased.contrib.django.models import Job

    tasks.add_async.enqueue(1, 1)
    monkeypatch.setattr("builtins.input", lambda prompt: "no" if "leased's jobs" in prompt else "yes")
    call_command("flush", database=db_alias, interactive=True)
    assert "Flush cancelled." in capsys.readouterr().out
    assert Job.objects.using(db_alias).count() == 1


# Two tests in this order: the first leaves a job behind, which the flush after it removes.
def test_a_transactional_test_that_leaves_a_job_behind(backend):
    tasks.add_async.enqueue(40, 2)


def test_the_next_transactional_test_starts_without_it(backend):
    assert run_queued(backend).claimed == 0


def test_from_async_code_get_result_is_refused_and_aget_result_works(backend):
    from django.core.exceptions import SynchronousOnlyOperation

    result = tasks.add_async.enqueue(1, 2)

    async def scenario():
        with pytest.raises(SynchronousOnlyOperation):
            tasks.add_async.get_result(result.id)
        return await tasks.add_async.aget_result(result.id)

    assert run_async(scenario()) == result


@pytest.mark.slow
def test_a_task_raising_keyboard_interrupt_fails_and_leased_worker_goes_on(backend, db_alias):
    poison, after = tasks.interrupting.enqueue(), tasks.add_async.enqueue(2, 2)
    outputs = []
    for _ in range(2):  # before: each run died of it and left the task READY, one attempt more
        worker = worker_process(db_alias, "--until-empty")
        outputs.append(worker.communicate(timeout=120)[0])
        assert worker.returncode == 0, outputs[-1]
    assert "stopped: 1 done, 1 failed" in outputs[0] and "stopped: 0 done, 0 failed" in outputs[1], outputs
    failed = tasks.interrupting.get_result(poison.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 1)
    assert failed.errors[0].exception_class is KeyboardInterrupt
    assert tasks.add_async.get_result(after.id).return_value == 4


def test_override_settings_reaches_backoff_and_transactional_after_a_first_run(db_alias):
    with leased_tasks(db_alias, backoff=Backoff(base=0, jitter=0)) as at_once:
        quick = tasks.fails_first.enqueue()
        run_queued(at_once)
        assert tasks.fails_first.get_result(quick.id).status == TaskResultStatus.SUCCESSFUL
    with leased_tasks(db_alias, backoff=Backoff(base=3600, jitter=0)) as in_an_hour:
        slow = tasks.fails_first.enqueue()
        run_queued(in_an_hour)  # before: the first settings' handler retried it at once
        assert tasks.fails_first.get_result(slow.id).status == TaskResultStatus.READY
        in_an_hour.app.cancel(job_id(slow))
    for transactional in (False, True, False):
        with leased_tasks(db_alias, transactional=transactional) as backend:
            result = tasks.in_transaction.enqueue(db_alias)
            run_queued(backend)
            assert tasks.in_transaction.get_result(result.id).return_value is transactional


def test_using_refuses_options_that_belong_to_the_task(backend):
    for option, value in (("backoff", Backoff(base=60)), ("transactional", True)):
        with pytest.raises(InvalidTask, match=rf"{option} cannot be changed per call with using\(\); "
                                              rf"set it in @task\({option}=\.\.\.\)"):
            tasks.fails_first.using(**{option: value})


def test_a_return_value_that_is_not_json_fails_for_good(backend):
    result = tasks.returns_a_set.enqueue()
    stats = run_queued(backend)
    failed = tasks.returns_a_set.get_result(result.id)
    assert (stats.failed, failed.status, failed.attempts) == (1, TaskResultStatus.FAILED, 1)  # before: 3 attempts
    assert failed.errors[0].exception_class is TypeError
    assert "Unsupported type" in failed.errors[0].traceback


def test_system_checks_warn_of_a_database_without_the_transactions_leased_needs(backend, db_alias, monkeypatch):
    assert [message.id for message in backend.check()] == []  # the test project sets them
    capabilities = dialect_named(connections[db_alias].vendor).capabilities
    # A single writer's lock is taken up front; REPEATABLE READ by default is set to READ COMMITTED.
    key, value, expected = (("transaction_mode", "'IMMEDIATE'", ["leased.W001"]) if capabilities.single_writer
                            else ("isolation_level", "'read committed'", ["leased.W002"])
                            if capabilities.repeatable_read_by_default else ("none", "", []))
    options = dict(connections[db_alias].settings_dict["OPTIONS"])
    options.pop(key, None)
    monkeypatch.setitem(connections[db_alias].settings_dict, "OPTIONS", options)
    messages = backend.check()
    assert [message.id for message in messages] == expected
    if messages:
        assert messages[0].hint == f"set DATABASES[{db_alias!r}]['OPTIONS'][{key!r}] = {value}"


def test_a_system_check_names_queued_jobs_whose_alias_left_tasks(db_alias):
    from leased.contrib.django.stranded import jobs_of_aliases_gone

    with override_settings(TASKS=two_aliases(db_alias)):
        stranded = tasks.report_backend.using(backend="other").enqueue()
        tasks.report_backend.enqueue()
        assert jobs_of_aliases_gone(databases=[db_alias]) == []
    with leased_tasks(db_alias) as only_default:  # TASKS has no "other" now
        (warning,) = jobs_of_aliases_gone(databases=[db_alias])
        assert warning.id == "leased.W003"
        assert warning.msg == (f"DATABASES[{db_alias!r}] has 1 queued job(s) of signups.tasks.report_backend "
                               "enqueued through TASKS['other'], which TASKS no longer has: no worker runs them")
        assert run_queued(only_default).done == 1  # the default alias's job; the other's waits
        only_default.app.cancel(only_default.job_id(stranded.id))
        assert jobs_of_aliases_gone(databases=[db_alias]) == []
    from django.core import checks

    assert jobs_of_aliases_gone in checks.registry.registry.get_checks(include_deployment_checks=False)


@pytest.mark.slow
def test_leased_worker_warns_of_queued_jobs_whose_alias_left_tasks(db_alias):
    with override_settings(TASKS=two_aliases(db_alias)):
        tasks.report_backend.using(backend="other").enqueue()
    worker = worker_process(db_alias, "--until-empty")  # its TASKS has "default" alone
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output
    assert (f"warning: DATABASES[{db_alias!r}] has 1 queued job(s) of signups.tasks.report_backend enqueued "
            "through TASKS['other'], which TASKS no longer has: no worker runs them; "
            "put 'other' back in TASKS") in output
