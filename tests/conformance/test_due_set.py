"""PostgreSQL's due set (migration 0018): the plain claim reads leased_due, which triggers keep in
step with leased_jobs whatever writes it, in generations that claiming workers rotate, truncating
the oldest, so that a transaction held open elsewhere leaves no dead entries for claims to walk.
Since migration 0019 it is the only index of pending jobs without a key, exact at every commit:
the counts, `leased why` and the limited claim read it too.

All on the real server: the held transaction is another session's, the rotations are the
migration's own function, and the crash kills a real process in the middle of one.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest

from conftest import _POSTGRES_PROBLEM, REQUIRE_POSTGRES, postgres_schema, running_worker, wait_for
from leased import Leased, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.testing import advance

if _POSTGRES_PROBLEM:
    if REQUIRE_POSTGRES:
        raise RuntimeError(f"{_POSTGRES_PROBLEM}, and LEASED_REQUIRE_POSTGRES=1 forbids skipping")
    pytest.skip(_POSTGRES_PROBLEM, allow_module_level=True)

TASKS = ("t",)
LATER = 3  # the generation of jobs due more than ten minutes after they were written


@pytest.fixture
def app():
    with postgres_schema() as url:
        application = Leased(url)
        application.task(name="t")(lambda: None)
        application.counts()  # the schema
        yield application
        application.close()


def sql(app: Leased, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        cursor = connection.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def rotate(app: Leased, most_rows: int = 1000) -> bool:
    """One rotation, whatever the current generation's size (workers wait for a page of it)."""
    return sql(app, "SELECT leased_rotate_due(0, %s)", (most_rows,))[0][0]


def generation_of(app: Leased) -> dict[int, int]:
    return dict(sql(app, "SELECT id, generation FROM leased_due"))


def partition_bytes(app: Leased, generation: int) -> int:
    return sql(app, "SELECT pg_relation_size(%s::regclass)", (f"leased_due_{generation}",))[0][0]


def assert_due_set_matches_the_jobs(app: Leased) -> None:
    """One due row per pending job without a key, carrying what the claim orders and filters by."""
    columns = "id, priority, run_after, queue_name, task_name"
    due = sql(app, f"SELECT {columns} FROM leased_due ORDER BY id")
    pending = sql(app, f"SELECT {columns} FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NULL "
                       "ORDER BY id")
    assert due == pending


def claim(app: Leased, limit: int = 100, worker: str = "w") -> list:
    return app.backend.claim(ClaimRequest(worker, TASKS, None, limit))


def finish(app: Leased, claimed: list, **end) -> None:
    app.backend.finish([AttemptEnd(job.lease, end.pop("outcome", Outcome.DONE), **end) for job in claimed])


def test_every_pending_job_has_one_due_row_whatever_writes_it(app):
    task = app.tasks["t"]
    bulk = task.enqueue_many([()] * 5)
    single = task.enqueue()
    keyed = app.task(name="keyed", concurrency=1, concurrency_key="k")(lambda: None).enqueue()
    assert set(generation_of(app)) == {job.id for job in bulk} | {single.id}  # a keyed job is not the plain claim's
    assert keyed.id not in generation_of(app)
    assert_due_set_matches_the_jobs(app)

    claimed = claim(app, limit=3)
    assert len(claimed) == 3 and not {job.id for job in claimed} & set(generation_of(app))
    assert_due_set_matches_the_jobs(app)

    retried, failed, done = claimed
    finish(app, [retried], outcome=Outcome.ERROR, error_type="E", error_message="again", retry_in_seconds=30)
    finish(app, [failed], outcome=Outcome.ERROR, error_type="E", error_message="no more")
    finish(app, [done])
    assert retried.id in generation_of(app)  # due again, at its backoff's time
    assert_due_set_matches_the_jobs(app)

    app.cancel(single.id)
    app.retry(failed.id)
    sql(app, "UPDATE leased_jobs SET priority = 5 WHERE id = %s", (bulk[-1].id,))  # an operator's own UPDATE
    assert_due_set_matches_the_jobs(app)
    assert claim(app, limit=1)[0].id == bulk[-1].id

    held = claim(app, limit=1)
    app.backend.release([held[0].lease], Outcome.CANCELLED, "shutdown")
    assert_due_set_matches_the_jobs(app)
    sql(app, "DELETE FROM leased_jobs WHERE id = %s", (held[0].id,))
    assert_due_set_matches_the_jobs(app)


def test_a_transaction_held_open_elsewhere_leaves_no_dead_rows_once_rotated(app):
    """The point of the generations: truncating one removes its dead rows and index entries at once,
    while another session's snapshot could still see them and vacuum may remove none."""
    holder = psycopg.connect(app.database_url, application_name="leased-test-holder")
    holder.execute("SELECT txid_current()")  # idle in transaction from here on, an xid and a snapshot
    try:
        first = None
        for _ in range(3):
            jobs = app.tasks["t"].enqueue_many([()] * 300)
            if first is None:
                first = generation_of(app)[jobs[0].id]
            while claimed := claim(app):
                finish(app, claimed)
            assert rotate(app)
        assert partition_bytes(app, first) == 0  # truncated, though the horizon is held
        dead_in_jobs = sql(app, "SELECT count(*) FROM leased_jobs WHERE status = 'done'")[0][0]
        assert dead_in_jobs == 900
        assert_due_set_matches_the_jobs(app)
        again = app.tasks["t"].enqueue_many([()] * 10)
        assert sorted(job.id for job in claim(app)) == sorted(job.id for job in again)
    finally:
        holder.close()


def test_a_rotation_carries_pending_jobs_over_and_a_backlog_holds_it_back(app):
    due_soon = app.tasks["t"].using(run_after=timedelta(minutes=5)).enqueue_many([()] * 5)
    backlog = app.tasks["t"].enqueue_many([()] * 20)
    generation = generation_of(app)[backlog[0].id]
    assert rotate(app, most_rows=50) and rotate(app, most_rows=50)  # the jobs' generation is now the oldest
    assert not rotate(app, most_rows=10)  # 25 jobs still pending in it: their claims come first
    assert set(generation_of(app).values()) == {generation}

    claim(app, limit=15)
    assert rotate(app, most_rows=10)  # 10 left: carried over, and the generation truncated
    assert partition_bytes(app, generation) == 0 and generation not in generation_of(app).values()
    assert_due_set_matches_the_jobs(app)

    advance(app, timedelta(minutes=6))
    assert {job.id for job in claim(app)} == {job.id for job in due_soon + backlog[15:]}


def test_jobs_due_far_ahead_wait_in_a_generation_of_their_own(app):
    tomorrow = app.tasks["t"].using(run_after=timedelta(days=1)).enqueue()
    assert generation_of(app) == {tomorrow.id: LATER}
    for _ in range(3):
        app.tasks["t"].enqueue()
        assert rotate(app)
    assert generation_of(app)[tomorrow.id] == LATER and claim(app) != []
    advance(app, timedelta(days=1, seconds=1))
    assert [job.id for job in claim(app)] == [tomorrow.id]


def test_claims_keep_claim_order_across_the_due_sets_generations(app):
    """The documented order is the whole due set's, whichever generation holds a row: jobs written
    between rotations (so each of the three holds some), rows that rotations carry over, and jobs
    due far ahead in a generation of their own, claimed a few at a time with a rotation after each.
    (Reported as jobs started up to ~470 places late on PostgreSQL: the claims were in order, the
    handler threads were not; see tests/unit/test_slots.py.)"""
    task = app.tasks["t"]
    jobs = []
    for burst in range(3):
        for priority in (0, 2, 1):
            jobs += task.using(priority=priority).enqueue_many([()] * 5)
        if burst < 2:
            assert rotate(app)
    jobs += task.using(priority=1, run_after=timedelta(hours=1)).enqueue_many([()] * 5)
    jobs += task.using(priority=3, run_after=timedelta(hours=1)).enqueue_many([()] * 2)
    assert set(generation_of(app).values()) == {0, 1, 2, LATER}

    def in_claim_order(written: list) -> list:
        return sorted(written, key=lambda job: (-job.priority, job.run_after, job.id))

    claimed: list[int] = []
    while batch := claim(app, limit=4):
        claimed += [job.id for job in batch]
        rotate(app)
    assert claimed == [job.id for job in in_claim_order(jobs[:45])]
    advance(app, timedelta(hours=1, seconds=1))
    assert [job.id for job in claim(app, limit=4)] == [job.id for job in in_claim_order(jobs[45:])][:4]


ROTATE_AND_DIE = """
import sys, psycopg
connection = psycopg.connect(sys.argv[1])
connection.execute("SELECT leased_rotate_due(0, 1000)")  # inside a transaction that never commits
print("rotated", flush=True)
sys.stdin.read()
"""


def test_a_worker_killed_in_the_middle_of_a_rotation_loses_no_job(app):
    jobs = app.tasks["t"].enqueue_many([()] * 50)
    assert rotate(app) and rotate(app)  # the jobs' generation is the oldest: the next rotation truncates it
    dying = subprocess.Popen([sys.executable, "-c", ROTATE_AND_DIE, app.database_url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert dying.stdout.readline().strip() == "rotated"  # copied and truncated, not committed
        os.kill(dying.pid, signal.SIGKILL)
    finally:
        dying.wait(timeout=30)
    assert dying.returncode == -signal.SIGKILL
    wait_for(lambda: not sql(app, "SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                                  "WHERE c.relname LIKE 'leased_due%%' AND l.mode = 'AccessExclusiveLock'"),
             message="the killed session's locks to go")
    assert_due_set_matches_the_jobs(app)  # the sequence moved on alone: its generation is current again
    claimed = claim(app, limit=100)
    assert sorted(job.id for job in claimed) == [job.id for job in jobs]


def test_claims_cancels_and_rotations_at_once_lose_and_repeat_nothing(app):
    """Three workers drain while a producer enqueues, an operator cancels jobs and another session
    rotates as fast as it can: each job ends once, done or cancelled, none runs twice, and no due
    row is left."""
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(name="counted", takes_context=True)
    def counted(context):
        with lock:
            ran.append(context.job_id)

    stop = threading.Event()
    rotations = []

    def rotating() -> None:
        while not stop.is_set():
            rotations.append(rotate(app))

    def cancelling(ids: list[int]) -> None:
        for job_id in random.Random(7).sample(ids, 150):
            try:
                app.cancel(job_id)
            except Exception:  # already running or done: a cancel that came too late
                pass

    threads = [threading.Thread(target=rotating)]
    threads[0].start()
    try:
        with running_worker(app, concurrency=4), running_worker(app, concurrency=4), \
                running_worker(app, concurrency=4):
            ids = []
            for _ in range(10):
                ids += [job.id for job in counted.enqueue_many([()] * 200)]
                if len(ids) == 600:
                    threads.append(threading.Thread(target=cancelling, args=(list(ids),)))
                    threads[-1].start()
            wait_for(lambda: sql(app, "SELECT count(*) FROM leased_jobs WHERE status IN ('pending', 'running')")
                     == [(0,)], timeout=120, message="every job to end")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    statuses = dict(sql(app, "SELECT status, count(*) FROM leased_jobs GROUP BY status"))
    assert set(statuses) <= {"done", "cancelled"} and sum(statuses.values()) == 2000, statuses
    done = {job_id for (job_id,) in sql(app, "SELECT id FROM leased_jobs WHERE status = 'done'")}
    assert len(ran) == len(set(ran)) and done <= set(ran)  # a cancel may end a job whose handler ran
    assert sql(app, "SELECT max(attempt) FROM leased_jobs WHERE status = 'done'") == [(1,)]
    assert sum(rotations) >= 3 and generation_of(app) == {}


@contextmanager
def holding_due_row(app: Leased, job_id: int) -> Iterator[psycopg.Connection]:
    """Another session holding a job's due row as a plain claim does between reading the due set
    and locking the jobs (its `due` CTE): a claim that will find the job held and leave the row."""
    with psycopg.connect(app.database_url) as connection:
        assert connection.execute("SELECT id FROM leased_due WHERE id = %s FOR UPDATE", (job_id,)).fetchall()
        yield connection
        connection.commit()


def blocked_on_a_lock(app: Leased) -> bool:
    return bool(sql(app, "SELECT 1 FROM pg_stat_activity "
                         "WHERE datname = current_database() AND wait_event_type = 'Lock'"))


@pytest.mark.alone  # blocked_on_a_lock reads every session of the database
def test_a_cancel_waits_for_the_claim_holding_its_due_row_so_the_due_set_stays_exact(app):
    """Migration 0019: the counts read the due set, so a writer taking a job out of it waits for a
    claim that holds the job's due row, rather than leave the row behind for the next claim."""
    job = app.tasks["t"].enqueue()
    with holding_due_row(app, job.id) as claim_session:
        cancel = threading.Thread(target=app.cancel, args=(job.id,))
        cancel.start()
        wait_for(lambda: blocked_on_a_lock(app), message="the cancel to wait for the due row")
        assert claim_session.execute("SELECT id FROM leased_jobs WHERE id = %s FOR UPDATE SKIP LOCKED",
                                     (job.id,)).fetchall() == []  # the claim finds the job held: it skips it
    cancel.join(timeout=30)
    assert app.get_job(job.id).status.value == "cancelled"
    assert generation_of(app) == {} and app.job_counts().totals["pending"] == 0


@pytest.mark.alone  # blocked_on_a_lock reads every session of the database
def test_a_limited_claim_waits_for_a_plain_claim_holding_its_jobs_due_row(app):
    """The limited claim deletes its jobs' due rows; one a plain claim holds (which will find the
    job locked and leave the row) is waited for, not skipped: no row is left for a running job."""
    app.limit("slow", concurrency=1)  # limits in use: the worker's claims go through claim_limited
    job = app.tasks["t"].enqueue()
    claimed: list = []
    with holding_due_row(app, job.id):
        limited = threading.Thread(target=lambda: claimed.extend(claim(app)))
        limited.start()
        wait_for(lambda: blocked_on_a_lock(app), message="the limited claim to wait for the due row")
    limited.join(timeout=30)
    assert [claimed_job.id for claimed_job in claimed] == [job.id]
    assert generation_of(app) == {}


def test_the_upgrade_to_0019_drops_the_due_rows_left_behind():
    """The triggers of 0018 skipped a due row a claim held, leaving it for the next claim; 0019's
    counts read the due set, so the upgrade drops such rows and the two old indexes."""
    from leased.backends import migrator

    with postgres_schema() as url:
        with psycopg.connect(url, autocommit=True) as connection:
            assert migrator("postgres").apply(connection, up_to=18)[-1] == 18
            connection.execute(
                "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds) "
                "SELECT 't', 'default', 'pending', 3, 30 FROM generate_series(1, 4)")
            connection.execute("ALTER TABLE leased_jobs DISABLE TRIGGER leased_jobs_due_changed")  # as a skip left it
            connection.execute("UPDATE leased_jobs SET status = 'cancelled' WHERE id = 1")
            connection.execute("UPDATE leased_jobs SET priority = 5 WHERE id = 2")
            connection.execute("ALTER TABLE leased_jobs ENABLE TRIGGER leased_jobs_due_changed")
        app = Leased(url)
        try:
            app.task(name="t")(lambda: None)
            assert app.job_counts().totals["pending"] == 3  # the first use migrates the rest
            indexes = {name for (name,) in sql(app, "SELECT indexname FROM pg_indexes WHERE tablename = 'leased_jobs' "
                                                    "AND schemaname = current_schema()")}
            assert not indexes & {"leased_jobs_due", "leased_jobs_queue_due"}
            assert_due_set_matches_the_jobs(app)
        finally:
            app.close()


def test_a_rotation_that_fails_costs_its_turn_not_the_jobs_just_claimed(app, caplog):
    sql(app, "CREATE OR REPLACE FUNCTION leased_rotate_due(min_bytes bigint, most_rows integer) RETURNS boolean "
             "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$")
    jobs = app.tasks["t"].enqueue_many([()] * 3)
    claimed = app.backend.claim(ClaimRequest("w", TASKS, None, 10, reclaim_expired=True))
    assert sorted(job.id for job in claimed) == [job.id for job in jobs]
    assert "the due set's rotation failed, to be tried again in a second: disk full" in caplog.text


def test_a_rotation_reads_the_jobs_by_primary_key_however_large_the_table(app):
    """A rotation holds the lock every claim waits for: it must not read the whole of leased_jobs,
    which a held horizon swells (a hash join did, and pickup p99 rose with the table in the soak)."""
    sql(app, "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, finished_at) "
             "SELECT 't', 'default', 'done', 3, 30, now() FROM generate_series(1, 20000)")
    sql(app, "ANALYZE leased_jobs")
    app.tasks["t"].enqueue_many([()] * 50)
    assert rotate(app) and rotate(app)  # those 50 are in the oldest generation: the next rotation carries them
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        def sequential_scans() -> int:
            connection.execute("SELECT pg_stat_force_next_flush()")
            connection.execute("SELECT pg_stat_clear_snapshot()")
            return connection.execute("SELECT seq_scan FROM pg_stat_user_tables "
                                      "WHERE relid = 'leased_jobs'::regclass").fetchone()[0]

        before = sequential_scans()
        assert connection.execute("SELECT leased_rotate_due(0, 1000)").fetchone()[0]
        assert sequential_scans() == before
    assert_due_set_matches_the_jobs(app)


def test_the_upgrade_to_0018_puts_the_jobs_already_pending_in_the_due_set():
    from leased.backends import migrator

    with postgres_schema() as url:
        with psycopg.connect(url, autocommit=True) as connection:
            assert migrator("postgres").apply(connection, up_to=17)[-1] == 17
            connection.execute(
                "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, run_after, "
                "concurrency_key) SELECT 't', 'default', CASE WHEN i % 3 = 0 THEN 'done' ELSE 'pending' END, 3, 30, "
                "now() + CASE WHEN i = 1 THEN interval '1 day' ELSE interval '0' END, "
                "CASE WHEN i = 2 THEN 'k' END FROM generate_series(1, 30) AS i")
        app = Leased(url)
        try:
            app.task(name="t")(lambda: None)
            app.counts()  # the first use migrates the rest
            assert_due_set_matches_the_jobs(app)
            assert generation_of(app)[1] == LATER and 2 not in generation_of(app)
            claimed = {job.id for job in claim(app)}  # the keyed one through claim_limited
            assert claimed == {i for i in range(2, 31) if i % 3}
        finally:
            app.close()
