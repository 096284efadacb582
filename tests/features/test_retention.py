"""Retention: finished jobs past their period go, with their attempts, in small batches; pending
and running jobs never; the per-minute rollup keeps the history the dashboard draws."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import callers_connection, raw_scalar, raw_sql, running_worker, seconds_before, time_literal, wait_for
from leased import ConfigurationError, InvalidTransition, JobNotFound, JobStatus, Leased, PermanentError, Retention
from leased.backends.ports import PruneRule
from leased.engine import pruner
from leased.engine.pruner import prune, prune_rules


def age(app: Leased, job_ids: list[int], days: float) -> None:
    """Move jobs' finished_at (and their attempts') `days` into the past."""
    ids = ", ".join(str(job_id) for job_id in job_ids)
    for table, key in (("leased_jobs", "id"), ("leased_attempts", "job_id")):
        raw_sql(app, f"UPDATE {table} SET finished_at = {seconds_before(app, 'finished_at', days * 86400)} "
                     f"WHERE {key} IN ({ids})")


@pytest.fixture
def history(app):
    """Jobs of every status: finished ones eight days old (cancelled 31, brief's 2.4 hours) but `recent`."""

    @app.task(name="ok")
    def ok(n):
        return n

    @app.task(name="broken", max_attempts=1)
    def broken():
        raise PermanentError("no")

    @app.task(name="kept", retention=None)
    def kept():
        return "kept"

    @app.task(name="brief", retention={"done": timedelta(hours=1)})
    def brief():
        return "brief"

    done = [ok.enqueue(n).id for n in range(5)]
    failed = [broken.enqueue().id]
    forever = [kept.enqueue().id]
    short = [brief.enqueue().id]
    app.run_until_empty()
    cancelled = [ok.enqueue(99).id]
    app.cancel(cancelled[0])
    age(app, done + failed + forever, days=8)
    age(app, cancelled, days=31)  # past the default 30 days for cancelled jobs
    age(app, short, days=0.1)  # 2.4 hours: past brief's hour, within the default week
    recent = ok.enqueue(100).id
    app.run_until_empty()
    pending = ok.using(run_after=timedelta(hours=1)).enqueue(101).id
    return {"done": done, "failed": failed, "kept": forever, "brief": short, "cancelled": cancelled,
            "recent": recent, "pending": pending}


def test_retention_settings_and_their_errors():
    assert Leased("sqlite:///x.db").retention == Retention()
    assert Retention().done == timedelta(days=7) and Retention().failed == timedelta(days=30)
    assert Leased("sqlite:///x.db", retention={"done": "3d"}).retention == Retention(done=timedelta(days=3))
    assert Leased("sqlite:///x.db", retention=None).retention == Retention(None, None, None)
    assert Retention(done=60).done == timedelta(minutes=1)
    with pytest.raises(ConfigurationError, match=r"invalid retention done 'soon': use a duration"):
        Leased("sqlite:///x.db", retention={"done": "soon"})
    with pytest.raises(ConfigurationError, match=r"unknown field 'pending'"):
        Leased("sqlite:///x.db", retention={"pending": "1d"})
    with pytest.raises(ConfigurationError, match=r"invalid retention failed -1"):
        Retention(failed=-1)
    app = Leased("sqlite:///x.db")
    with pytest.raises(ConfigurationError, match=r"invalid retention of task 'mail': cancelled \[\]"):
        app.task(name="mail", retention={"cancelled": []})(lambda: None)


def test_rules_group_overriding_tasks_and_leave_them_out_of_the_default():
    week, hour = timedelta(days=7), timedelta(hours=1)
    rules = prune_rules(Retention(failed=None), {"a": {JobStatus.DONE: hour}, "b": {JobStatus.DONE: hour},
                                                 "c": {JobStatus.DONE: None}, "d": {JobStatus.DONE: week}})
    assert rules == [
        PruneRule(JobStatus.DONE, 3600.0, task_names=("a", "b")),
        PruneRule(JobStatus.DONE, week.total_seconds(), except_task_names=("a", "b", "c")),
        PruneRule(JobStatus.CANCELLED, timedelta(days=30).total_seconds()),
    ]


def test_prune_deletes_finished_jobs_past_retention_with_their_attempts(app, history):
    attempts_before = raw_scalar(app, "SELECT count(*) FROM leased_attempts")
    assert app.prune(dry_run=True) == {"done": 6, "failed": 0, "cancelled": 1}
    assert app.prune() == {"done": 6, "failed": 0, "cancelled": 1}
    for job_id in history["done"] + history["brief"] + history["cancelled"]:
        with pytest.raises(JobNotFound):
            app.get_job(job_id)
    kept = {job_id: app.get_job(job_id).status for key in ("failed", "kept", "recent", "pending")
            for job_id in (history[key] if isinstance(history[key], list) else [history[key]])}
    assert list(kept.values()) == ["failed", "done", "done", "pending"]
    assert raw_scalar(app, "SELECT count(*) FROM leased_attempts") == attempts_before - 6  # the cancelled one never ran
    assert raw_scalar(app, "SELECT count(*) FROM leased_attempts WHERE job_id NOT IN (SELECT id FROM leased_jobs)") == 0
    assert app.prune() == {"done": 0, "failed": 0, "cancelled": 0}


def test_older_than_prunes_every_finished_job_past_it_whatever_the_settings(app, history):
    assert app.prune(older_than="1d", dry_run=True) == {"done": 6, "failed": 1, "cancelled": 1}
    assert app.prune(older_than=timedelta(days=1)) == {"done": 6, "failed": 1, "cancelled": 1}
    assert app.counts()["default"] == {"pending": 1, "running": 0, "done": 2, "failed": 0, "cancelled": 0, "waiting": 0,
                                       "sleeping": 0}
    with pytest.raises(ConfigurationError, match="invalid older_than 'later'"):
        app.prune(older_than="later")


def test_small_batches_delete_it_all_and_the_rollup_keeps_the_counts(app, history):
    before = sum(row.done for row in app.throughput(timedelta(days=9)))
    failed_before = sum(row.failed for row in app.throughput(timedelta(days=9)))
    recent = app.overview(timedelta(days=9)).queues[0]
    rules = [PruneRule(JobStatus.DONE, 3600.0), PruneRule(JobStatus.FAILED, 3600.0)]
    assert prune(app.backend, rules, batch_size=2) == {"done": 7, "failed": 1, "cancelled": 0}
    assert app.counts()["default"]["done"] == 1  # the recent one
    assert sum(row.done for row in app.throughput(timedelta(days=9))) == before == 8
    assert sum(row.failed for row in app.throughput(timedelta(days=9))) == failed_before == 1
    after = app.overview(timedelta(days=9)).queues[0]
    assert (after.done_recently, after.failed_recently) == (recent.done_recently, recent.failed_recently) == (8, 1)


def test_the_rollup_forgets_its_old_minutes(app, history):
    app.prune(older_than="1h")
    assert raw_scalar(app, "SELECT count(*) FROM leased_throughput") > 0
    raw_sql(app, f"UPDATE leased_throughput SET minute = {seconds_before(app, 'minute', 31 * 86400)}")
    app.prune()
    assert raw_scalar(app, "SELECT count(*) FROM leased_throughput") == 0


def test_a_worker_prunes_in_the_background_unless_told_not_to(app, history, monkeypatch):
    assert app.worker(prune=False).pruner is None
    keep_all = Leased(app.database_url, retention=None)
    keep_all.task(name="x")(lambda: None)
    assert keep_all.worker().pruner is None
    keep_all.close()
    monkeypatch.setattr(pruner, "FIRST_PASS_WITHIN", 0.0)
    with running_worker(app) as worker:
        assert worker.pruner is not None
        wait_for(lambda: app.counts()["default"]["cancelled"] == 0 and app.counts()["default"]["done"] == 2,
                 message="the worker's pruner")
    assert app.counts()["default"]["failed"] == 1
    assert {job.task_name for job in app.list_jobs(status="done")} == {"kept", "ok"}  # kept, and the recent one


def test_one_pruner_at_a_time_on_a_server_database(app, history, capabilities):
    other = Leased(app.database_url)
    try:
        with other.backend.pruning() as allowed:
            assert allowed
            if capabilities.pruning_lock:  # a lock the pruners take turns on
                with pytest.raises(InvalidTransition, match="another process is pruning"):
                    app.prune()
            else:  # SQLite's write lock serializes pruners batch by batch
                assert app.prune()["done"] == 6
    finally:
        other.close()
    app.prune()
    assert app.prune() == {"done": 0, "failed": 0, "cancelled": 0}


def test_a_prune_batch_reads_the_finished_index_not_the_table(app, backend_name):
    """With 20,000 rows of recent history a pass that has nothing to delete reads none of them."""
    app.counts()
    if backend_name == "sqlite":
        from leased.backends.sqlite.backend import QUERIES

        connection = app.backend.connection()
        plan = " ".join(row[3] for row in connection.execute(
            "EXPLAIN QUERY PLAN " + QUERIES["prunable_ids"],
            {"status": "done", "older_than": 60, "task_names": None, "except_task_names": "[]", "limit": 10}))
        assert "leased_jobs_finished" in plan and "SCAN leased_jobs " not in plan + " ", plan
        return
    if backend_name == "mariadb":
        plan = _mariadb_prune_plan(app)
        assert plan["key"] == "leased_jobs_finished" and plan["type"] == "range", plan
        return
    import psycopg

    from leased.backends.postgres.queries import QUERIES

    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, finished_at) "
            "SELECT 't', 'default', 'done', 3, 30, now() FROM generate_series(1, 20000)")
        connection.execute("ANALYZE leased_jobs")
        plan = "\n".join(row[0] for row in connection.execute(
            "EXPLAIN " + QUERIES["fused_prune_batch"], {"status": "done", "older_than": 3600.0, "task_names": None,
                                                  "except_task_names": [], "limit": 1000}))
    assert "leased_jobs_finished" in plan and "Seq Scan on leased_jobs" not in plan, plan


def _mariadb_prune_plan(app: Leased) -> dict:
    """The prune batch's access to leased_jobs over 20,000 rows of recent history."""
    from leased.backends.mariadb import driver

    from leased.backends.mariadb.backend import QUERIES

    connection = callers_connection(app, autocommit=True)
    try:
        cursor = driver.dict_cursor(connection)
        cursor.execute("INSERT INTO leased_jobs (task_name, queue_name, status, args, kwargs, max_attempts, "
                       "lease_seconds, run_after, created_at, finished_at) SELECT 't', 'default', 'done', '[]', "
                       "'{}', 3, 30, 0, 0, UNIX_TIMESTAMP(NOW(6)) FROM seq_1_to_20000")
        cursor.execute("ANALYZE TABLE leased_jobs")
        cursor.fetchall()
        cursor.execute("EXPLAIN " + QUERIES["prunable_ids"], {"status": "done", "older_than": 3600.0,
                                                             "task_names": None, "except_task_names": "[]",
                                                             "limit": 1000})
        return next(row for row in cursor.fetchall() if row["table"] == "leased_jobs")
    finally:
        connection.close()


def test_old_minutes_fold_into_one_row_per_queue_and_task_and_keep_their_sums(app):
    """Each worker counts its finishes in rows of its own; past ten minutes a pass sums them into
    one row per minute, queue and task, and what the readers sum stays the same."""
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    old, recent = time_literal(app, now - timedelta(minutes=20)), time_literal(app, now)
    app.counts()  # the schema
    for minute, worker, done, failed in ((old, "", 4, 0), (old, "w1", 1, 2), (old, "w2", 3, 0), (old, "w3", 0, 1),
                                         (recent, "w1", 5, 0), (recent, "w2", 1, 1)):
        raw_sql(app, "INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed) "
                     f"VALUES ({minute}, 'q', 't', '{worker}', {done}, {failed})")
    before = [(row.minute, row.done, row.failed) for row in app.throughput(timedelta(hours=1))]
    assert before == [(now - timedelta(minutes=20), 8, 3), (now, 6, 1)]
    assert app.prune() == {"done": 0, "failed": 0, "cancelled": 0}  # a pass folds
    assert [(row.minute, row.done, row.failed) for row in app.throughput(timedelta(hours=1))] == before
    assert raw_scalar(app, "SELECT count(*) FROM leased_throughput") == 3  # the old minute's one, the recent two
    assert raw_scalar(app, f"SELECT worker_id FROM leased_throughput WHERE minute = {old}") == ""
    assert app.backend.fold_throughput(600) == 0
