"""Enqueueing: the job value, per-call options, validation, idempotency and transactional enqueue."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from leased import ConfigurationError, JobStatus, Leased, PayloadError


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


def test_enqueue_in_callers_transaction_commits_and_rolls_back_with_it(app, notify, backend_name):
    app.counts()  # create the schema before borrowing a connection
    if backend_name == "sqlite":
        connection = sqlite3.connect(app.backend.path)
    else:
        import psycopg

        connection = psycopg.connect(app.database_url)
    with connection:
        kept = notify.using(connection=connection).enqueue("kept")
    connection.close()
    assert app.get_job(kept.id).args == ["kept"]

    if backend_name == "sqlite":
        connection = sqlite3.connect(app.backend.path)
    else:
        connection = psycopg.connect(app.database_url)
    rolled_back = notify.using(connection=connection).enqueue("rolled back")
    connection.rollback()
    connection.close()
    assert [job.args for job in app.list_jobs()] == [["kept"]]
    assert app.backend.get_job(rolled_back.id) is None


def test_async_enqueue_on_callers_async_connection(app, notify, backend_name):
    if backend_name != "postgres":
        pytest.skip("async connections are psycopg's")
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
        "default": {"pending": 4, "running": 0, "done": 0, "failed": 0, "cancelled": 0},
        "mail": {"pending": 3, "running": 0, "done": 0, "failed": 0, "cancelled": 0},
    }


def test_invalid_database_urls_are_named(tmp_path):
    for url in ["nonsense", "mysql://x/y", "sqlite://"]:
        with pytest.raises(ConfigurationError, match="database URL"):
            Leased(url).backend


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
