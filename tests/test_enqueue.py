"""Enqueueing: the job value, per-call options, validation, idempotency and transactional enqueue."""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import FrozenInstanceError, fields
from datetime import datetime, timedelta, timezone

import pytest

from conftest import callers_connection
from leased import ConfigurationError, Job, JobStatus, Leased, PayloadError
from leased.backends.sql import enqueue


@pytest.fixture
def notify(app):
    @app.task(name="notify_owner", max_attempts=5)
    def notify_owner(proposal_id: str, urgent: bool = False) -> None:
        pass

    return notify_owner


def test_enqueue_returns_a_pending_job_with_every_field(app, notify):
    job = notify.enqueue("p-1", urgent=True)
    assert job.id > 0
    assert job.task_name == "notify_owner"
    assert job.queue_name == "default"
    assert job.status is JobStatus.PENDING
    assert (job.args, job.kwargs) == (["p-1"], {"urgent": True})
    assert (job.priority, job.attempt, job.max_attempts) == (0, 0, 5)
    assert job.created_at.tzinfo is not None and job.run_after >= job.created_at - timedelta(seconds=1)
    assert job.finished_at is None and job.result is None and job.last_error is None and job.history == ()
    assert app.get_job(job.id) == job


def test_an_enqueued_job_is_a_frozen_job_like_one_built_from_its_fields(app, notify):
    # enqueue builds its Jobs another way than Job(...) (see JobDraft): the same value comes out.
    jobs = notify.using(timeout=7).enqueue_many([("p-1",), {"proposal_id": "p-2"}])
    jobs += notify.using(idempotency_key="k").enqueue_many([("p-3",), ("p-4", True)])[:1]
    for job in jobs:
        assert type(job) is Job
        values = {field.name: getattr(job, field.name) for field in fields(Job)}
        assert values == {field.name: getattr(Job(**values), field.name) for field in fields(Job)}
        assert (values["status"], values["attempt"], values["created"]) == (JobStatus.PENDING, 0, True)
        assert repr(job) == repr(Job(**values))
        with pytest.raises(FrozenInstanceError):
            job.priority = 1  # type: ignore[misc]


def test_a_created_job_takes_each_field_where_job_has_it():
    given = {"id": 1, "task_name": "t", "queue_name": "q", "args": [1], "kwargs": {"k": 2}, "priority": 3,
             "max_attempts": 4, "lease_seconds": 5.0, "run_after": datetime(2030, 1, 1, tzinfo=timezone.utc),
             "created_at": datetime(2029, 1, 1, tzinfo=timezone.utc), "idempotency_key": "key",
             "timeout_seconds": 6.0, "concurrency_key": "c", "workflow_id": 7, "isolation": "process",
             "max_crashes": 8, "fairness_key": "tenant-9"}
    job = enqueue._created_job(**given, status="waiting")
    expected = Job(**given, status=JobStatus.WAITING, attempt=0, created=True)
    assert {field.name: getattr(job, field.name) for field in fields(Job)} == {
        field.name: getattr(expected, field.name) for field in fields(Job)}


def test_using_sets_queue_priority_schedule_and_key(app, notify):
    job = notify.using(run_after=timedelta(minutes=5), idempotency_key="proposal:p-1", priority=10,
                       queue_name="mail").enqueue("p-1")
    assert (job.queue_name, job.priority, job.idempotency_key) == ("mail", 10, "proposal:p-1")
    assert job.run_after - job.created_at >= timedelta(minutes=5) - timedelta(seconds=1)
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert notify.using(run_after=at).enqueue("p-2").run_after == at


def test_async_enqueue(app, notify):
    job = asyncio.run(notify.aenqueue("p-1"))
    assert app.get_job(job.id).args == ["p-1"]


@pytest.mark.parametrize("value, named", [
    (object(), "argument 0"),
    ({1, 2}, "argument 0"),
    (float("nan"), "argument 0"),
])
def test_non_json_arguments_are_refused_naming_the_argument(app, notify, value, named):
    with pytest.raises(PayloadError, match=named):
        notify.enqueue(value)
    with pytest.raises(PayloadError, match="keyword argument 'urgent'"):
        notify.enqueue("p", urgent=value)
    assert app.list_jobs() == []


def test_oversized_payload_is_refused_with_size_and_limit(database_url):
    small = Leased(database_url, max_payload_bytes=1000)

    @small.task(name="t")
    def t(text): ...

    with pytest.raises(PayloadError, match=r"\d+ bytes encoded, over the limit of 1000 bytes"):
        t.enqueue("x" * 2000)
    assert small.list_jobs() == []
    small.close()


def test_arguments_that_do_not_bind_are_refused_at_enqueue(app, notify):
    with pytest.raises(PayloadError, match=r"notify_owner\(proposal_id, urgent=False\)"):
        notify.enqueue("p", "q", "r")
    with pytest.raises(PayloadError, match="unexpected keyword argument 'colour'"):
        notify.enqueue("p", colour="red")


@pytest.mark.parametrize("options, field", [
    ({"queue_name": ""}, "queue_name"),
    ({"queue_name": "has space"}, "queue_name"),
    ({"priority": 10**6}, "priority"),
    ({"priority": "high"}, "priority"),
    ({"run_after": datetime(2030, 1, 1)}, "naive"),
    ({"run_after": "tomorrow"}, "run_after"),
    ({"idempotency_key": ""}, "idempotency_key"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"lease": -1}, "lease"),
])
def test_bad_options_get_a_clear_error(notify, options, field):
    with pytest.raises(ConfigurationError, match=field):
        notify.using(**options)


def test_idempotency_key_is_unique_among_unclaimed_pending_jobs(app, notify):
    first = notify.using(idempotency_key="k").enqueue("p-1")
    again = notify.using(idempotency_key="k").enqueue("p-1")
    assert again.id == first.id
    assert len(app.list_jobs()) == 1
    other = notify.using(idempotency_key="other").enqueue("p-1")
    assert other.id != first.id


def test_idempotency_key_is_free_again_once_the_job_was_claimed(app, notify):
    first = notify.using(idempotency_key="k").enqueue("p-1")
    app.run_until_empty()
    assert app.get_job(first.id).status is JobStatus.DONE
    second = notify.using(idempotency_key="k").enqueue("p-1")
    assert second.id != first.id and second.status is JobStatus.PENDING
    assert app.get_job(first.id).status is JobStatus.DONE  # history stays


def test_enqueue_in_callers_transaction_commits_and_rolls_back_with_it(app, notify):
    app.counts()  # create the schema before borrowing a connection
    connection = callers_connection(app)
    kept = notify.using(connection=connection).enqueue("kept")
    connection.commit()
    connection.close()
    assert app.get_job(kept.id).args == ["kept"]

    connection = callers_connection(app)
    rolled_back = notify.using(connection=connection).enqueue("rolled back")
    connection.rollback()
    connection.close()
    assert [job.args for job in app.list_jobs()] == [["kept"]]
    assert app.backend.get_job(rolled_back.id) is None


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)  # async connections are psycopg's
def test_async_enqueue_on_callers_async_connection(app, notify):
    import psycopg

    app.counts()

    async def scenario():
        async with await psycopg.AsyncConnection.connect(app.database_url) as connection:
            job = await notify.using(connection=connection).aenqueue("in tx")
            await connection.rollback()
            committed = await notify.using(connection=connection).aenqueue("committed")
            await connection.commit()
            return job, committed

    rolled_back, committed = asyncio.run(scenario())
    assert app.backend.get_job(rolled_back.id) is None
    assert app.get_job(committed.id).args == ["committed"]


def test_list_jobs_filters_and_pages_newest_first(app, notify):
    ids = [notify.using(queue_name="mail" if i % 2 else "default").enqueue(f"p-{i}").id for i in range(7)]
    assert [job.id for job in app.list_jobs()] == ids[::-1]
    assert [job.id for job in app.list_jobs(queue_name="mail")] == ids[1::2][::-1]
    page = app.list_jobs(limit=3)
    next_page = app.list_jobs(limit=3, before_id=page[-1].id)
    assert [job.id for job in page + next_page] == ids[::-1][:6]
    assert app.list_jobs(status="failed") == []
    with pytest.raises(ConfigurationError, match="invalid status"):
        app.list_jobs(status="exploded")
    assert app.counts() == {
        "default": {"pending": 4, "running": 0, "done": 0, "failed": 0, "cancelled": 0, "waiting": 0},
        "mail": {"pending": 3, "running": 0, "done": 0, "failed": 0, "cancelled": 0, "waiting": 0},
    }


def test_invalid_database_urls_are_named(tmp_path):
    for url in ["nonsense", "oracle://x/y", "sqlite://"]:
        with pytest.raises(ConfigurationError, match="database URL"):
            Leased(url).backend


@pytest.mark.parametrize("url, message", [
    ("mongodb://x", "unsupported database URL scheme 'mongodb' in 'mongodb://x': use sqlite:///"),
    ("sqlite:jobs.db", "invalid database URL 'sqlite:jobs.db': use sqlite:///path/to/jobs.db, postgresql://"),
    ("sqlite:///:memory:", "SQLite needs a file"),
])
def test_a_bad_database_url_is_refused_at_construction_without_connecting(url, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Leased(url)


def test_enqueue_many_writes_every_job_in_one_go(app, notify):
    jobs = notify.using(queue_name="mail").enqueue_many([("p-1",), ["p-2", True], {"proposal_id": "p-3"}])
    assert [(job.args, job.kwargs, job.queue_name) for job in jobs] == [
        (["p-1"], {}, "mail"), (["p-2", True], {}, "mail"), ([], {"proposal_id": "p-3"}, "mail")]
    assert sorted(job.id for job in app.list_jobs()) == sorted(job.id for job in jobs)
    assert notify.enqueue_many([]) == []


def test_enqueue_many_refuses_the_whole_batch_if_one_call_is_bad(app, notify):
    with pytest.raises(PayloadError, match="keyword argument 'urgent'"):
        notify.enqueue_many([("p-1",), {"proposal_id": "p-2", "urgent": object()}])
    with pytest.raises(ConfigurationError, match="call 1 is 'p-2'"):
        notify.enqueue_many([("p-1",), "p-2"])
    assert app.list_jobs() == []


def test_enqueue_many_keeps_idempotency_per_job(app, notify):
    first = notify.using(idempotency_key="k").enqueue("p-1")
    batch = notify.using(idempotency_key="k").enqueue_many([("p-1",), ("p-1",)])
    assert [job.id for job in batch] == [first.id, first.id]
    assert len(app.list_jobs()) == 1


def test_enqueue_many_returns_each_job_as_stored_in_the_batch_order(app, notify):
    calls = [(f"p-{n}",) if n % 3 else {"proposal_id": f"p-{n}", "urgent": n % 2 == 0} for n in range(200)]
    jobs = notify.using(queue_name="mail", priority=3, run_after=timedelta(minutes=1)).enqueue_many(calls)
    assert [app.get_job(job.id) for job in jobs] == jobs
    assert [job.id for job in jobs] == sorted(job.id for job in jobs)
    assert [(job.args, job.kwargs) for job in jobs] == [
        (list(call), {}) if isinstance(call, tuple) else ([], call) for call in calls]
    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    scheduled = notify.using(run_after=at).enqueue_many([("a",), ("b",)])
    assert [job.run_after for job in scheduled] == [at, at]
    assert [app.get_job(job.id) for job in scheduled] == scheduled


def test_a_batch_mixing_keys_gets_each_position_its_job(app, notify):
    def call(key, argument):
        return notify.using(idempotency_key=key).new_job((argument,), {})

    notify.using(idempotency_key="claimed").enqueue("old")
    app.run_until_empty()  # that job ran: its key is free again
    held = notify.using(idempotency_key="held").enqueue("pending")

    batch = [call(None, "a"), call("held", "b"), call("new", "c"), call(None, "d"), call("new", "e"),
             call("claimed", "f"), call("held", "g")]
    results = app.backend.enqueue(batch)

    assert [created for _, created in results] == [True, False, True, True, False, True, False]
    jobs = [job for job, _ in results]
    assert jobs[1] == jobs[6] == held
    assert jobs[4] == jobs[2] and jobs[2].args == ["c"]
    assert [jobs[i].args for i in (0, 3, 5)] == [["a"], ["d"], ["f"]]
    assert all(app.get_job(job.id) == job for job in jobs)
    assert len(app.list_jobs()) == 6  # two from before, four new


def test_a_key_freed_before_the_lookup_is_inserted_after_all(app, notify):
    # The branch taken when a worker claims the key's holder between our insert and our lookup:
    # the first insert is answered "key held", the lookup then finds no holder, the next insert wins.
    from leased.backends.sql.enqueue import InsertJobs, drive, enqueue_steps

    new = notify.using(idempotency_key="k").new_job(("p",), {})
    app.migrate()
    inserts = []

    def answer(connection, step):
        if isinstance(step, InsertJobs) and not inserts:
            inserts.append(step)
            return [None]
        return app.backend._answer(connection, step)

    with app.backend._transaction() as connection:
        ((job, created),) = drive(enqueue_steps([new]), lambda step: answer(connection, step))
    assert created and app.get_job(job.id) == job and job.idempotency_key == "k"


def test_enqueue_many_in_callers_transaction_commits_and_rolls_back_whole(app, notify):
    app.counts()
    connection = callers_connection(app)
    rolled_back = notify.using(connection=connection).enqueue_many([("a",), ("b",)])
    rolled_back += notify.using(connection=connection, idempotency_key="k").enqueue_many([("c",), ("d",)])
    connection.rollback()
    connection.close()
    assert app.list_jobs() == []
    assert all(app.backend.get_job(job.id) is None for job in rolled_back)

    connection = callers_connection(app)
    kept = notify.using(connection=connection).enqueue_many([("e",), ("f",)])
    connection.commit()
    connection.close()
    assert sorted(app.list_jobs(), key=lambda job: job.id) == kept


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)  # async connections are psycopg's
def test_async_batch_on_callers_connection_keeps_idempotency(app, notify):
    import psycopg

    held = notify.using(idempotency_key="held").enqueue("pending")
    batch = [notify.using(idempotency_key=key).new_job((argument,), {})
             for key, argument in [(None, "a"), ("held", "b"), ("new", "c"), ("new", "d")]]

    async def scenario():
        async with await psycopg.AsyncConnection.connect(app.database_url) as connection:
            results = await app.backend.enqueue_async(batch, connection)
            await connection.commit()
            return results

    results = asyncio.run(scenario())
    assert [created for _, created in results] == [True, False, True, False]
    assert results[1][0] == held and results[3][0] == results[2][0]
    assert all(app.get_job(job.id) == job for job, _ in results)


def test_a_batch_wakes_each_queue_with_a_due_job_once(app, notify, capabilities):
    from leased.backends.ports import WorkerRecord

    listener = app.backend.listener()
    try:
        if not capabilities.listen_notify:  # the producer sends a datagram to each port its host's workers recorded
            app.backend.register_worker(WorkerRecord("w", socket.gethostname(), 1, 1, None, ("notify_owner",),
                                                     wake_port=listener.port))
        else:
            listener.wait(0.01)  # connects and listens
        batch = [notify.using(queue_name=queue, run_after=delay).new_job((f"p-{n}",), {})
                 for n, (queue, delay) in enumerate([("mail", None), ("sms", None), ("mail", None),
                                                     ("later", timedelta(hours=1)), ("sms", None)])]
        app.backend.enqueue(batch)
        heard = listener.wait(5.0)
        while more := listener.wait(0.3):
            heard += more
    finally:
        listener.close()
    assert sorted(heard) == ["mail", "sms"]


def test_positional_calls_are_checked_as_strictly_as_bind(tmp_path):
    import functools
    import inspect

    app = Leased(f"sqlite:///{tmp_path / 'unused.db'}")

    def no_parameters(): ...
    def one(a): ...
    def defaults(a, b=1, c=2): ...
    def positional_only(a, /, b, c=3): ...
    def var_positional(a, *rest): ...
    def keyword_only(a, *, key): ...
    def keyword_only_default(a, *, key=1): ...
    def var_keyword(a, **options): ...

    class Callable:
        def __call__(self, a, b=1): ...

    functions = [no_parameters, one, defaults, positional_only, var_positional, keyword_only,
                 keyword_only_default, var_keyword, functools.partial(defaults, 1), Callable()]
    cases = [(function, False) for function in functions] + [(one, True), (defaults, True), (var_positional, True)]
    for number, (function, takes_context) in enumerate(cases):
        task = app.task(name=f"t{number}", takes_context=takes_context)(function)
        for count in range(5):
            args = tuple(range(count))
            try:
                inspect.signature(function).bind(*((None,) if takes_context else ()), *args)
                binds = True
            except TypeError:
                binds = False
            try:
                task.check_arguments(args, {})
                accepted = True
            except PayloadError:
                accepted = False
            assert accepted == binds, (function, takes_context, count)


def test_a_batch_larger_than_one_statement_keeps_order_and_keys(app, notify, monkeypatch):
    monkeypatch.setattr("leased.backends.sql.enqueue.INSERT_BATCH", 3)
    held = notify.using(idempotency_key="held").enqueue("pending")
    keys = [None, "k", None, "held", None, None, None, "k", "m", None]
    batch = [notify.using(idempotency_key=key).new_job((f"p-{n}",), {}) for n, key in enumerate(keys)]
    results = app.backend.enqueue(batch)
    assert [created for _, created in results] == [True, True, True, False, True, True, True, False, True, True]
    jobs = [job for job, _ in results]
    assert jobs[3] == held and jobs[7] == jobs[1]
    assert [job.args for job, created in results if created] == [[f"p-{n}"] for n in (0, 1, 2, 4, 5, 6, 8, 9)]
    assert all(app.get_job(job.id) == job for job in jobs)


def test_a_duplicate_enqueue_says_it_returned_the_existing_job(app, notify):
    first = notify.using(idempotency_key="k").enqueue("p-1")
    again = notify.using(idempotency_key="k").enqueue("p-1")
    assert (first.created, again.created) == (True, False)
    assert again == first  # the same row: `created` is not part of equality
    assert app.get_job(first.id) == first and app.get_job(first.id).created is None  # not from an enqueue
    batch = notify.using(idempotency_key="n").enqueue_many([("p-2",), ("p-2",)])
    assert [job.created for job in batch] == [True, False] and batch[0] == batch[1]
    assert [job.created for job in notify.using(idempotency_key="k").enqueue_many([("p-1",)])] == [False]
    assert notify.enqueue("p-3").created is True


def test_the_argument_mismatch_of_a_context_task_lists_only_what_the_caller_passes(app):
    @app.task(name="mail", takes_context=True)
    def mail(context, to: str, subject: str = "hi") -> None: ...

    with pytest.raises(PayloadError) as error:
        mail.enqueue()
    assert str(error.value) == "arguments do not match mail(to, subject='hi'): missing a required argument: 'to'"


def test_an_unexpected_keyword_is_named_with_the_nearest_parameter(app):
    @app.task(name="send_order_email")
    def send_order_email(order_id: int, email: str, *, locale: str = "en") -> None: ...

    with pytest.raises(PayloadError) as error:
        send_order_email.enqueue(1, emial="ada@example.com")  # not "missing a required argument: 'email'"
    assert str(error.value) == ("arguments do not match send_order_email(order_id, email, *, locale='en'): "
                                "unexpected keyword argument 'emial' (did you mean 'email'?)")
    with pytest.raises(PayloadError, match=r"unexpected keyword argument 'colour'$"):
        send_order_email.enqueue(1, "ada@example.com", colour="red")
    assert app.list_jobs() == []
