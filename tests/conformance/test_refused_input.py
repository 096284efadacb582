"""Refused input is never half-written: every name, key, count and time a user gives is checked
before anything is written, by one rule on every database (leased/names.py, tasks.py), and the
refusal is one line naming the field. Before, a run_after out of range was committed and then
broke every listing that held it, MariaDB cut a long task name and clamped max_attempts in
silence (its INSERT IGNORE), and a queue named "default\\n" was accepted and never served.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import raw_scalar
from leased import ConfigurationError

LONG = "x" * 256


def jobs_written(app) -> int:
    return raw_scalar(app, "SELECT count(*) FROM leased_jobs")


@pytest.mark.parametrize("options, field", [
    ({"run_after": datetime.max.replace(tzinfo=timezone.utc)}, "run_after"),
    ({"run_after": datetime(1900, 1, 1, tzinfo=timezone.utc)}, "run_after"),
    ({"run_after": timedelta(days=3_000_000)}, "run_after"),
    ({"max_attempts": 2**40}, "max_attempts"),
    ({"max_attempts": 2**31}, "max_attempts"),
    ({"queue_name": "default\n"}, "queue_name"),
    ({"idempotency_key": "a\x00b"}, "idempotency_key"),
    ({"idempotency_key": "\ud800"}, "idempotency_key"),
    ({"idempotency_key": "late\n"}, "idempotency_key"),
    ({"idempotency_key": LONG}, "idempotency_key"),
])
def test_an_enqueue_refused_writes_nothing(app, options, field):
    task = app.task(name="t")(lambda: None)
    task.enqueue()  # the schema, and one job
    with pytest.raises(ConfigurationError, match=field) as refused:
        task.using(**options).enqueue()
    assert "\n" not in str(refused.value)
    assert jobs_written(app) == 1


@pytest.mark.parametrize("name", ["", " ", LONG, "a\nb", "nul\x00", "\ud800", "rev\u202eersed", " padded"])
def test_a_task_name_is_checked_when_registered(app, name):
    with pytest.raises(ConfigurationError, match="invalid task name"):
        app.task(name=name)(lambda: None)
    with pytest.raises(ConfigurationError, match="invalid task name"):
        app.periodic("*/5 * * * *", name=name)(lambda scheduled_at: None)


@pytest.mark.parametrize("name", ["", LONG, "a\nb", "\ud800"])
def test_workflow_and_step_names_are_checked_before_anything_is_written(app, name):
    task = app.task(name="t")(lambda: None)
    task.enqueue()
    with pytest.raises(ConfigurationError, match="invalid workflow name"):
        app.workflow(name)
    workflow = app.workflow("w")
    with pytest.raises(ConfigurationError, match="invalid step name"):
        workflow.add(task, name=name)
    assert jobs_written(app) == 1


def test_the_longest_names_are_kept_whole_on_every_database(app):
    name, key = "n" * 255, "k" * 255
    job = app.task(name=name)(lambda: None).using(idempotency_key=key, max_attempts=2**31 - 1).enqueue()
    stored = app.get_job(job.id)
    assert (stored.task_name, stored.idempotency_key, stored.max_attempts) == (name, key, 2**31 - 1)


@pytest.mark.parametrize("field, value", [("task_name", "t" * 300), ("queue_name", "q" * 300),
                                          ("max_attempts", 2**40), ("priority", -2**40),
                                          ("idempotency_key", "k" * 300)])
@pytest.mark.parametrize("count", [1, 3], ids=["one", "batch"])
def test_the_store_writes_a_value_whole_or_not_at_all(database_url, field, value, count):
    """Beneath the checks of names.py and tasks.py, no statement may change a value to fit: MariaDB's
    INSERT IGNORE stored a value its column could not hold cut or clamped (and a batch's JSON_TABLE
    did so even without IGNORE), while enqueue reported it stored whole. Whatever a database cannot
    hold is an error with nothing written; what it can hold is stored as given."""
    from leased.backends import connect
    from leased.testing.conformance import new_job

    backend = connect(database_url)
    backend.migrate()
    try:
        jobs = [new_job(idempotency_key=f"key-{n}") for n in range(count)]
        jobs[-1] = jobs[-1]._replace(**{field: value})
        try:
            created = backend.enqueue(jobs)
        except Exception:  # the database's own error: the store is beneath the one-line checks
            assert sum(backend.counts().values()) == 0
        else:
            stored = backend.get_job(created[-1][0].id)
            assert getattr(stored, field) == value
    finally:
        backend.close()


def test_a_step_name_derived_past_255_characters_is_refused_naming_the_step(app):
    """A step without name= is named after its task, numbered from the second on (`<task>-2`); a
    step added at run time is `<task>-1 of <job id>`. From a task name near 255 characters, the
    derived names passed 255: MariaDB cut them, so two became equal and the workflow's enqueue was a
    raw IntegrityError (its unique step names), and PostgreSQL and SQLite stored names no other
    name may have. Now each is refused in one line naming the task and asking for name=."""
    long_name = "t" * 254
    task = app.task(name=long_name)(lambda: None)
    workflow = app.workflow("w")
    workflow.add(task)
    with pytest.raises(ConfigurationError, match=r"step of task 'tttt.*name=") as refused:
        workflow.add(task)
    assert "\n" not in str(refused.value)
    assert workflow.add(task, name="second").name == "second"
    workflow.enqueue()
    assert jobs_written(app) == 2


def test_a_step_added_at_run_time_with_a_derived_name_past_255_characters_fails_its_adder(app):
    from leased import JobStatus

    long_name = "t" * 250
    app.task(name=long_name)(lambda: None)

    @app.task(name="adder", takes_context=True, max_attempts=1)
    def adder(context):
        context.workflow.add(app.tasks[long_name])

    workflow = app.workflow("w")
    workflow.add(adder)
    workflow.enqueue()
    app.run_until_empty()
    (job,) = app.list_jobs()  # the adder alone: its step was not added
    assert job.status is JobStatus.FAILED, job.last_error
    assert "step of task" in job.last_error and "name=" in job.last_error, job.last_error
