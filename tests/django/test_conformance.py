"""A conformance suite for django.tasks backends: what Django's own tests pin for its backends
(tests/tasks/test_immediate_backend.py, test_tasks.py in Django 6.1), written once for any backend.

A backend under test is a `Subject`: its TASKS setting and a way to run what is queued (nothing
to do for Django's ImmediateBackend, which runs a task as it is enqueued; leased's worker for
ours). Run against Django's ImmediateBackend too, which shows that the suite tests the contract
and not leased. The capability flags decide which checks apply. For leased the tasks get one
attempt (OPTIONS max_attempts=1): Django's backends do not retry, and these checks expect a
failure to be final.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"

from djangotest import close_leased_connections, require_database, run_async, run_queued, tasks_setting  # noqa: F401  (fixtures)

import conformance_tasks as test_tasks
from django.db import connections
from django.tasks import TaskResult, TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.test import override_settings
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

IMMEDIATE = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": []}}


@dataclass
class Subject:
    settings: dict
    run_queued: Callable[[], Any]
    runs_in_the_caller: bool = False  # the task runs in enqueue()'s process (ImmediateBackend), not a worker

    @property
    def backend(self) -> Any:
        return task_backends["default"]

    def run(self, result: TaskResult) -> TaskResult:
        """Run what is queued; the result as the backend now knows it."""
        self.run_queued()
        if self.backend.supports_get_result:
            return self.backend.get_result(result.id)
        return result


def _leased(alias: str) -> dict:
    setting = tasks_setting(alias, max_attempts=1)
    setting["default"]["QUEUES"] = []
    return setting


SUBJECTS = {
    "immediate": lambda: Subject(IMMEDIATE, lambda: None, runs_in_the_caller=True),
    "leased-sqlite": lambda: Subject(_leased("default"), lambda: run_queued(task_backends["default"])),
    "leased-postgres": lambda: Subject(_leased("postgres"), lambda: run_queued(task_backends["default"])),
    "leased-mariadb": lambda: Subject(_leased("mariadb"), lambda: run_queued(task_backends["default"])),
}


@pytest.fixture(params=list(SUBJECTS))
def subject(request) -> Iterator[Subject]:
    require_database(request.param.removeprefix("leased-"))
    chosen = SUBJECTS[request.param]()
    with override_settings(TASKS=chosen.settings):
        yield chosen


def _django_task_records(caplog: pytest.LogCaptureFixture, level: int = logging.DEBUG) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "django.tasks" and record.levelno >= level]


def _formatted(record: logging.LogRecord) -> str:
    return logging.Formatter("%(levelname)s:%(name)s:%(message)s").format(record)


def _assert_finished_in_order(result: TaskResult) -> None:
    assert result.is_finished is True
    assert None not in (result.started_at, result.last_attempted_at, result.finished_at, result.enqueued_at)
    assert result.enqueued_at <= result.started_at <= result.finished_at


def test_using_the_configured_backend(subject):
    assert default_task_backend.alias == "default"
    assert type(task_backends["default"]).__name__ == subject.settings["default"]["BACKEND"].rsplit(".", 1)[1]


@pytest.mark.parametrize("task", [test_tasks.noop_task, test_tasks.noop_task_async], ids=["sync", "async"])
def test_enqueue_task(subject, task):
    result = subject.run(task.enqueue(1, two=3))
    assert result.status == TaskResultStatus.SUCCESSFUL
    _assert_finished_in_order(result)
    assert result.return_value is None
    assert result.task == task
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert result.attempts == 1


@pytest.mark.parametrize("task", [test_tasks.noop_task, test_tasks.noop_task_async], ids=["sync", "async"])
def test_aenqueue_task(subject, task):
    result = subject.run(run_async(task.aenqueue()))
    assert result.status == TaskResultStatus.SUCCESSFUL
    _assert_finished_in_order(result)
    assert (result.task, result.args, result.kwargs, result.attempts) == (task, [], {}, 1)


@pytest.mark.parametrize("task,exception,message", [
    (test_tasks.failing_task_value_error, ValueError, "This Task failed due to ValueError"),
    (test_tasks.failing_task_system_exit, SystemExit, "This Task failed due to SystemExit"),
], ids=["ValueError", "SystemExit"])
def test_any_exception_fails_the_task(subject, caplog, task, exception, message):
    with caplog.at_level(logging.ERROR, logger="django.tasks"):
        result = subject.run(task.enqueue())
    errors = _django_task_records(caplog, logging.ERROR)
    assert len(errors) == 1 and message in _formatted(errors[0])
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value
    _assert_finished_in_order(result)
    assert result.errors[0].exception_class == exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n"), result.errors[0].traceback
    assert (result.task, result.args, result.kwargs) == (task, [], {})


def test_keyboard_interrupt(subject, caplog):
    """Run in the caller (ImmediateBackend), a KeyboardInterrupt is the caller's: it goes on and the
    task is not failed. In a worker it is the task's own (the operator's Ctrl-C reaches a worker as
    a signal, which stops it gracefully): it fails the attempt like SystemExit, so that a task that
    raises it cannot stop every worker that claims it, and the task ends by its max_attempts."""
    task = test_tasks.failing_task_keyboard_interrupt
    if subject.runs_in_the_caller:
        with caplog.at_level(logging.ERROR, logger="django.tasks"), pytest.raises(KeyboardInterrupt):
            subject.run(default_task_backend.enqueue(task, [], {}))
        assert _django_task_records(caplog, logging.ERROR) == []
        return
    with caplog.at_level(logging.ERROR, logger="django.tasks"):
        result = subject.run(default_task_backend.enqueue(task, [], {}))
    assert len(_django_task_records(caplog, logging.ERROR)) == 1
    assert result.status == TaskResultStatus.FAILED
    _assert_finished_in_order(result)
    assert result.errors[0].exception_class is KeyboardInterrupt
    assert result.errors[0].traceback.endswith("KeyboardInterrupt: This Task failed due to KeyboardInterrupt\n")


@pytest.mark.parametrize("task,exception,fragment", [
    (test_tasks.complex_exception, ValueError, 'ValueError(ValueError("This task failed"))'),
    (test_tasks.complex_return_value, TypeError, "Unsupported type"),  # a return value that is not JSON
], ids=["complex-exception", "return-value-not-json"])
def test_complex_failures(subject, caplog, task, exception, fragment):
    with caplog.at_level(logging.ERROR, logger="django.tasks"):
        result = subject.run(task.enqueue())
    assert len(_django_task_records(caplog, logging.ERROR)) == 1
    assert result.status == TaskResultStatus.FAILED
    _assert_finished_in_order(result)
    assert result._return_value is None
    assert result.errors[0].exception_class == exception
    assert fragment in result.errors[0].traceback


def test_result(subject):
    result = subject.run(default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, [], {}))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_result_async(subject):
    result = subject.run(run_async(default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, [], {})))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_enqueue_with_an_argument_that_is_not_json(subject):
    with pytest.raises(TypeError, match="Unsupported type"):
        test_tasks.noop_task.enqueue(object())


def test_takes_context(subject):
    result = test_tasks.get_task_id.enqueue()
    assert subject.run(result).return_value == result.id


def test_context_counts_the_attempt(subject):
    assert subject.run(test_tasks.check_context.enqueue(1)).status == TaskResultStatus.SUCCESSFUL


def test_logs_enqueued_running_and_successful(subject, caplog):
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = subject.run(test_tasks.noop_task.enqueue())
    messages = [record.getMessage() for record in _django_task_records(caplog)]
    assert len(messages) == 3, messages
    assert "enqueued" in messages[0] and result.id in messages[0]
    assert "state=RUNNING" in messages[1] and result.id in messages[1]
    assert "state=SUCCESSFUL" in messages[2] and result.id in messages[2]
    assert not any("NoneType" in message for message in messages)


def test_logs_a_failure(subject, caplog):
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = subject.run(test_tasks.failing_task_value_error.enqueue())
    messages = [record.getMessage() for record in _django_task_records(caplog)]
    assert len(messages) == 3, messages
    assert "state=RUNNING" in messages[1] and result.id in messages[1]
    assert "state=FAILED" in messages[2] and result.id in messages[2]


def test_enqueue_validates_the_queue(subject):
    task = test_tasks.noop_task.using(queue_name="unknown_queue")
    settings = {"default": {**subject.settings["default"], "QUEUES": ["queue-1"]}}
    with override_settings(TASKS=settings), pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid"):
        task.enqueue()


def test_aenqueue_validates_the_queue(subject):
    task = test_tasks.noop_task.using(queue_name="unknown_queue")
    settings = {"default": {**subject.settings["default"], "QUEUES": ["queue-1"]}}
    with override_settings(TASKS=settings), pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid"):
        run_async(task.aenqueue())


def test_run_after_needs_support_for_defer(subject):
    later = test_tasks.record.using(run_after=timezone.now() + timedelta(hours=1)) \
        if subject.backend.supports_defer else None
    if later is None:
        with pytest.raises(InvalidTask, match="Backend does not support run_after"):
            default_task_backend.validate_task(test_tasks.noop_task.using(run_after=timezone.now()))
        return
    result = subject.run(later.enqueue("/dev/null", "later"))
    assert result.status == TaskResultStatus.READY and not result.is_finished
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value


def test_priority_orders_due_tasks(subject, tmp_path):
    path = str(tmp_path / "order")
    low = test_tasks.record.using(priority=-10).enqueue(path, "low")
    test_tasks.record.using(priority=10).enqueue(path, "high")
    test_tasks.record.enqueue(path, "normal")
    subject.run(low)
    if not subject.backend.supports_get_result:  # it runs each task as it is enqueued: nothing queues
        assert open(path).read().split() == ["low", "high", "normal"]
        return
    assert subject.backend.supports_priority
    assert open(path).read().split() == ["high", "normal", "low"]


def test_get_result(subject):
    if not subject.backend.supports_get_result:
        with pytest.raises(NotImplementedError, match="does not support retrieving or refreshing results"):
            default_task_backend.get_result("123")
        return
    result = default_task_backend.enqueue(test_tasks.noop_task, (), {})
    assert test_tasks.noop_task.get_result(result.id) == result
    assert run_async(test_tasks.noop_task.aget_result(result.id)) == result
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        test_tasks.calculate_meaning_of_life.get_result(result.id)
    subject.run(result)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    connections.close_all()


def test_get_a_missing_result(subject):
    if not subject.backend.supports_get_result:
        with pytest.raises(NotImplementedError, match="does not support retrieving or refreshing results"):
            test_tasks.noop_task.get_result("123456789")
        return
    with pytest.raises(TaskResultDoesNotExist):
        test_tasks.noop_task.get_result("123456789")
    with pytest.raises(TaskResultDoesNotExist):
        run_async(test_tasks.noop_task.aget_result("123456789"))


def test_task_functions_must_be_module_level(subject):
    from django.tasks import task

    with pytest.raises(InvalidTask, match="Task function must be defined at a module level"):
        task()(lambda: None)


def test_takes_context_needs_a_context_parameter(subject):
    from django.tasks import task

    with pytest.raises(InvalidTask, match="Task takes context but does not have a first argument of 'context'"):
        task(takes_context=True)(test_tasks.calculate_meaning_of_life.func)
