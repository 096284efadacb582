"""No state of the jobs tables keeps a pending job from a worker for more than a poll.

The rule behind PostgreSQL's migration 0021, checked on every database against what a user or an
operator can do to the tables: leased's own verbs, raw DELETEs, a TRUNCATE (with CASCADE, and with
ids restarted), and on PostgreSQL writes with triggers off and an older release's claims, which its
due set's triggers do not see. After any sequence of them, a fresh worker's first claim starts every
due job, and the counts are the truth.
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import _POSTGRES_PROBLEM, REQUIRE_POSTGRES, postgres_schema, raw_rows, raw_scalar, raw_sql
from leased import Leased, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest

TASKS = ("t",)
QUEUES = ("default", "other")
PENDING_DUE = "SELECT id FROM leased_jobs WHERE status = 'pending' AND concurrency_key IS NULL AND run_after <= {now}"
# Due now, read a second ahead: a job enqueued for now is due, whatever the clock's resolution
# (SQLite's 'now' has milliseconds, a run_after written from Python microseconds: one written in
# the same millisecond read as not yet due here, and due at the claim a moment later); the steps'
# later jobs are an hour away.
NOW = {"postgres": "now() + interval '1 second'", "sqlite": "(julianday('now') - 2440587.5) * 86400.0 + 1",
       "mariadb": "UNIX_TIMESTAMP(NOW(6)) + 1"}


def backend_of(app: Leased) -> str:
    return app.database_url.split(":", 1)[0].split("+")[0].replace("postgresql", "postgres")


def due_ids(app: Leased) -> set[int]:
    return {job_id for (job_id,) in raw_rows(app, PENDING_DUE.format(now=NOW[backend_of(app)]))}


def pending_count(app: Leased) -> int:
    return raw_scalar(app, "SELECT count(*) FROM leased_jobs WHERE status = 'pending'")


def postgres_without_triggers(app: Leased, statement: str) -> None:
    """A write the due set's triggers do not see: a restore, a replica's apply, a DBA's bulk fix."""
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute("SET session_replication_role = replica")
        connection.execute(statement)


def empty_the_tables(app: Leased, restart_ids: bool) -> None:
    """What a test suite's teardown or a "clear the queue" does, as each database allows it."""
    backend = backend_of(app)
    if backend == "postgres":
        raw_sql(app, "TRUNCATE leased_jobs, leased_attempts" + (" RESTART IDENTITY" if restart_ids else "")
                + " CASCADE")
    else:
        raw_sql(app, "DELETE FROM leased_attempts")
        raw_sql(app, "DELETE FROM leased_jobs")
        if restart_ids and backend == "sqlite":
            raw_sql(app, "DELETE FROM sqlite_sequence WHERE name = 'leased_jobs'")
        elif restart_ids:
            raw_sql(app, "ALTER TABLE leased_jobs AUTO_INCREMENT = 1")


class Operator:
    """Does one step of a sequence to the app's tables, holding what it claimed for later steps."""

    def __init__(self, app: Leased, pick: random.Random):
        self.app, self.pick, self.held = app, pick, []

    def some_job(self, status: str) -> int | None:
        ids = [job_id for (job_id,) in raw_rows(self.app, f"SELECT id FROM leased_jobs WHERE status = '{status}'")]
        return self.pick.choice(sorted(ids)) if ids else None

    def enqueue(self) -> None:
        later = self.pick.random() < 0.2
        self.app.tasks["t"].using(queue_name=self.pick.choice(QUEUES), priority=self.pick.randint(0, 2),
                                  run_after=timedelta(hours=1) if later else None).enqueue()

    def enqueue_many(self) -> None:
        self.app.tasks["t"].using(queue_name=self.pick.choice(QUEUES)).enqueue_many([()] * self.pick.randint(2, 5))

    def claim(self) -> None:
        self.held += self.app.backend.claim(ClaimRequest("earlier", TASKS, None, self.pick.randint(1, 3)))

    def finish(self) -> None:
        if self.held:
            job = self.held.pop(0)
            outcome = self.pick.choice(["done", "retry", "fail"])
            end = AttemptEnd(job.lease, Outcome.DONE) if outcome == "done" else AttemptEnd(
                job.lease, Outcome.ERROR, error_type="E", error_message="boom",
                retry_in_seconds=0 if outcome == "retry" else None)
            self.app.backend.finish([end])

    def cancel(self) -> None:
        if (job_id := self.some_job("pending")) is not None:
            self.app.cancel(job_id)

    def retry(self) -> None:
        if (job_id := self.some_job("failed")) is not None:
            self.app.retry(job_id)

    def delete(self) -> None:
        if (job_id := self.some_job(self.pick.choice(["pending", "done", "failed"]))) is not None:
            raw_sql(self.app, f"DELETE FROM leased_attempts WHERE job_id = {job_id}")
            raw_sql(self.app, f"DELETE FROM leased_jobs WHERE id = {job_id}")

    def truncate(self) -> None:
        empty_the_tables(self.app, restart_ids=False)
        self.held.clear()

    def truncate_restarting_ids(self) -> None:
        empty_the_tables(self.app, restart_ids=True)
        self.held.clear()

    def limit_a_queue(self) -> None:
        self.app.limit("other", concurrency=1000)  # claims go through the limited claim from here

    # PostgreSQL's own: what its due set's triggers do not see.
    def delete_without_triggers(self) -> None:
        if (job_id := self.some_job("pending")) is not None:
            postgres_without_triggers(self.app, f"DELETE FROM leased_jobs WHERE id = {job_id}")

    def move_without_triggers(self) -> None:
        if (job_id := self.some_job("pending")) is not None:
            postgres_without_triggers(self.app, f"UPDATE leased_jobs SET queue_name = 'other', priority = 7 "
                                                f"WHERE id = {job_id}")

    def insert_without_triggers(self) -> None:
        postgres_without_triggers(self.app, "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, "
                                            "lease_seconds) VALUES ('t', 'default', 'pending', 3, 30)")

    def older_release_claims(self) -> None:
        """A claim as releases before migration 0018 made it: the jobs taken, their due rows untouched."""
        raw_sql(self.app, "UPDATE leased_jobs SET status = 'running', attempt = attempt + 1, lease_owner = 'old', "
                          "lease_expires_at = now() + interval '1 hour', attempt_started_at = now() "
                          "WHERE id IN (SELECT id FROM leased_jobs WHERE status = 'pending' AND run_after <= now() "
                          "ORDER BY priority DESC, run_after, id LIMIT 2 FOR UPDATE SKIP LOCKED)")


EVERYWHERE = ["enqueue", "enqueue_many", "claim", "finish", "cancel", "retry", "delete", "truncate",
              "truncate_restarting_ids", "limit_a_queue"]
POSTGRES_ONLY = ["delete_without_triggers", "move_without_triggers", "insert_without_triggers", "older_release_claims"]
UNSEEN_BY_TRIGGERS = {"delete_without_triggers", "move_without_triggers", "insert_without_triggers"}


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.sampled_from(EVERYWHERE + POSTGRES_ONLY), max_size=12), seed=st.integers(0, 2**16))
def test_a_fresh_worker_starts_every_due_job_at_its_first_claim_and_the_counts_are_true(app, steps, seed):
    postgres = backend_of(app) == "postgres"
    steps = [step for step in steps if postgres or step not in POSTGRES_ONLY]
    if "t" not in app.tasks:
        app.task(name="t")(lambda: None)
    app.counts()  # the schema, on the first example
    empty_the_tables(app, restart_ids=False)
    app.limit("other")  # no limit
    operator = Operator(app, random.Random(seed))
    for step in steps:
        getattr(operator, step)()

    if not UNSEEN_BY_TRIGGERS & set(steps):  # the due set is exact at every commit its triggers see
        assert app.job_counts().totals["pending"] == pending_count(app)
    due = due_ids(app)
    fresh = Leased(app.database_url)
    try:
        claimed = fresh.backend.claim(ClaimRequest("fresh", TASKS, None, len(due) + 5))
        assert sorted(job.id for job in claimed) == sorted(due), steps
        assert fresh.job_counts().totals["pending"] == pending_count(app), steps
    finally:
        fresh.close()


@pytest.fixture
def postgres_app():
    """PostgreSQL's due set, on its own: the tests below are about its triggers and claims."""
    if _POSTGRES_PROBLEM:
        if REQUIRE_POSTGRES:
            pytest.fail(_POSTGRES_PROBLEM)
        pytest.skip(_POSTGRES_PROBLEM)
    with postgres_schema() as url:
        app = Leased(url)
        app.task(name="t")(lambda: None)
        app.counts()  # the schema
        yield app
        app.close()


def test_after_a_truncate_a_fresh_worker_claims_the_new_job_at_once(postgres_app):
    """The reproduction of issue 40: ten pending jobs, the tables truncated as a test suite's
    teardown does, then one new job: the due rows of the ten no longer sit at the claim's head."""
    app = postgres_app
    app.tasks["t"].enqueue_many([()] * 10)
    raw_sql(app, "TRUNCATE leased_jobs, leased_attempts CASCADE")
    assert raw_scalar(app, "SELECT count(*) FROM leased_due") == 0
    job = app.tasks["t"].enqueue()
    assert [claimed.id for claimed in app.backend.claim(ClaimRequest("w", TASKS, None, 10))] == [job.id]


def test_a_left_due_row_claims_only_the_job_it_was_written_for(postgres_app):
    """With ids reused, a row left behind (here: by a restore with triggers off) names a job now in
    another queue, at another priority: it claims nothing there, and is dropped as met."""
    app = postgres_app
    sleepy = app.tasks["t"].using(queue_name="sleepy", priority=5).enqueue_many([()] * 3)
    postgres_without_triggers(app, "TRUNCATE leased_due")  # nothing fires: mimic the rows a restore left
    postgres_without_triggers(app, "DELETE FROM leased_jobs")
    raw_sql(app, "INSERT INTO leased_due SELECT 0, id, 5, now() - interval '1 minute', 'noop', 't' "
                 f"FROM unnest(ARRAY{[job.id for job in sleepy]}::bigint[]) AS id")
    raw_sql(app, f"ALTER SEQUENCE leased_jobs_id_seq RESTART WITH {sleepy[0].id}")
    reused = app.tasks["t"].using(queue_name="sleepy").enqueue_many([()] * 3)
    assert [job.id for job in reused] == [job.id for job in sleepy]
    noop = app.tasks["t"].using(queue_name="noop").enqueue()
    app.backend.claims.due_set_mended = True  # this worker's first claim is past: the claim alone must cope
    claimed = app.backend.claim(ClaimRequest("w", TASKS, ("noop",), 10))
    assert [job.id for job in claimed] == [noop.id]  # not the sleepy jobs the left rows' ids now name
    assert raw_scalar(app, "SELECT count(*) FROM leased_due WHERE queue_name = 'noop'") == 0


def test_a_claim_that_meets_left_rows_drops_them_claims_again_and_says_so(postgres_app, caplog):
    app = postgres_app
    gone = app.tasks["t"].using(priority=9).enqueue_many([()] * 25)
    postgres_without_triggers(app, f"DELETE FROM leased_jobs WHERE id <= {gone[-1].id}")
    healthy = app.tasks["t"].enqueue()
    app.backend.claims.due_set_mended = True  # as above: the claim alone must cope
    with caplog.at_level(logging.WARNING, logger="leased"):
        claimed = app.backend.claim(ClaimRequest("w", TASKS, None, 10))
    assert [job.id for job in claimed] == [healthy.id]  # in one call, though 25 left rows came first
    assert raw_scalar(app, "SELECT count(*) FROM leased_due") == 0
    assert "dropped 25 due rows whose jobs were gone or had moved" in caplog.text


def test_an_older_release_claim_leaves_no_due_row(postgres_app):
    """Releases before 0018 claim without knowing the due set: the update trigger deletes their rows."""
    app = postgres_app
    app.tasks["t"].enqueue_many([()] * 4)
    Operator(app, random.Random(0)).older_release_claims()
    assert raw_scalar(app, "SELECT count(*) FROM leased_due") == 2
    assert app.job_counts().totals["pending"] == 2


def test_a_fresh_worker_finds_a_job_written_with_triggers_off(postgres_app, caplog):
    app = postgres_app
    Operator(app, random.Random(0)).insert_without_triggers()
    fresh = Leased(app.database_url)
    try:
        with caplog.at_level(logging.WARNING, logger="leased"):
            assert len(fresh.backend.claim(ClaimRequest("w", TASKS, None, 10))) == 1
        assert "added 1 for pending jobs that had none" in caplog.text
    finally:
        fresh.close()


def test_left_rows_of_other_jobs_do_not_hold_a_rotation_back(postgres_app):
    """The rotation counts the rows that hold, not rows whose id a pending job now has."""
    app = postgres_app
    jobs = app.tasks["t"].enqueue_many([()] * 30)
    raw_sql(app, "INSERT INTO leased_due SELECT generation, id, priority - 1, run_after, queue_name, task_name "
                 "FROM leased_due")  # 30 rows naming pending jobs, at a priority they do not have, claimed last
    rotate = "SELECT leased_rotate_due(0, 9)"
    assert raw_scalar(app, rotate) and raw_scalar(app, rotate)  # the jobs' generation is now the oldest
    assert len(app.backend.claim(ClaimRequest("w", TASKS, None, 25))) == 25
    assert raw_scalar(app, rotate)  # 5 rows hold, 5 more name their jobs: the 5 carried over, the rest dropped
    assert sorted(raw_scalar(app, "SELECT array_agg(id) FROM leased_due")) == [job.id for job in jobs[25:]]


def test_a_drained_generation_is_truncated_without_waiting_for_new_enqueues(postgres_app):
    """A burst drained: its generation's dead entries went only two rotations later, each waiting
    for 64 KB of new enqueues, and every claim stepped over them meanwhile."""
    app = postgres_app
    burst = app.tasks["t"].enqueue_many([()] * 1500)  # over 64 KB of due rows
    generation = raw_scalar(app, f"SELECT generation FROM leased_due WHERE id = {burst[0].id}")
    assert raw_scalar(app, "SELECT leased_rotate_due(65536, 100000)")  # the burst's is no longer current
    while claimed := app.backend.claim(ClaimRequest("w", TASKS, None, 500)):
        app.backend.finish([AttemptEnd(job.lease, Outcome.DONE) for job in claimed])
    drained = f"SELECT pg_relation_size('leased_due_{generation}')"
    assert raw_scalar(app, drained) > 0
    assert not raw_scalar(app, "SELECT leased_rotate_due(65536, 1000)")  # no rotation due: no new enqueues
    assert raw_scalar(app, drained) == 0
