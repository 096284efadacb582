"""`app.why(job_id)`: each reason, created for real on both backends, and its words.

Workers are rows in the workers table: a test announces the ones it needs (as a worker does, with
register_worker) or runs a real one. Times that must be in the past are moved there with SQL,
as another program could; lease expiry is left to the database's clock.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from conftest import raw_sql, running_worker, seconds_before, wait_for
from test_schedules import scheduler, set_last_tick
from leased import Backoff, JobNotFound, JobStatus, Leased, PermanentError
from leased.admin import WorkerInfo
from leased.backends.ports import ClaimRequest, WorkerRecord
from leased.explain import Explanation, Reason, explain
from leased.facts import AHEAD_LIMIT, JobFacts
from leased.jobs import ClaimedJob, Job


def reasons(explanation: Explanation) -> dict[str, Reason]:
    return {reason.code: reason for reason in explanation.reasons}


def utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def announce(app: Leased, worker_id: str, *, queues: tuple[str, ...] | None = None, tasks: tuple[str, ...] = (),
             concurrency: int = 4) -> None:
    app.backend.register_worker(WorkerRecord(worker_id, "host", 1, concurrency, queues, tasks))


def claim_as(app: Leased, worker_id: str, task_name: str) -> ClaimedJob:
    (job,) = app.backend.claim(ClaimRequest(worker_id, (task_name,), None, 1))
    return job


def seconds_earlier(app: Leased, table: str, column: str, seconds: int, where: str) -> None:
    raw_sql(app, f"UPDATE {table} SET {column} = {seconds_before(app, column, seconds)} WHERE {where}")


# Pending.
def test_a_job_not_due_yet_says_when_it_is_due(app):
    @app.task(name="later")
    def later(): ...

    job = later.using(run_after=timedelta(minutes=4)).enqueue()
    why = app.why(job.id)
    assert (why.job_id, why.status, why.summary) == (job.id, JobStatus.PENDING, f"Job {job.id} (later on queue "
                                                                                 f"default) is pending.")
    not_due = reasons(why)["not_due"]
    assert not_due.message.startswith("It is due in ") and f"(at {utc(job.run_after)})" in not_due.message
    assert not_due.data["run_after"] == job.run_after and 200 < not_due.data["seconds"] <= 240
    assert "no_workers" in reasons(why)  # told too: waiting out the delay will not be enough


def test_no_live_worker_at_all(app):
    @app.task(name="t")
    def t(): ...

    job = t.enqueue()
    assert [r.code for r in app.why(job.id).reasons] == ["no_workers"]
    announce(app, "w-old", tasks=("t",))
    seconds_earlier(app, "leased_workers", "last_seen_at", 40, "id = 'w-old'")
    no_workers = reasons(app.why(job.id))["no_workers"]
    assert no_workers.message.startswith("No live worker: none has announced itself in the last 15s (1 silent")
    assert no_workers.data == {"silent_workers": ["w-old"]}


def test_no_live_worker_serves_the_queue(app):
    @app.task(name="charge", queue_name="billing")
    def charge(): ...

    job = charge.enqueue()
    announce(app, "w1", queues=("default",), tasks=("charge",))
    announce(app, "w2", queues=("mail", "default"), tasks=("charge",))
    reason = reasons(app.why(job.id))["no_worker_for_queue"]
    assert reason.message == "No live worker serves queue billing: the live workers serve default and mail."
    assert reason.data["served_queues"] == ["default", "mail"]


def test_no_live_worker_has_the_handler(app):
    @app.task(name="charge", queue_name="billing")
    def charge(): ...

    job = charge.enqueue()
    announce(app, "w-all", tasks=("email",))  # every queue, but not this task
    reason = reasons(app.why(job.id))["no_worker_for_task"]
    assert reason.message.startswith("No live worker that serves queue billing has a handler for task charge: ")
    announce(app, "w-mail", queues=("mail",), tasks=("charge",))
    assert "(w-mail has it, but serves other queues)" in reasons(app.why(job.id))["no_worker_for_task"].message


def test_backing_off_after_a_failed_attempt(app):
    # The first retry comes at once, the second after two hours: the job is caught backing off.
    @app.task(name="fetch", max_attempts=5, backoff=Backoff(base=0.001, factor=10_000_000, cap=7200, jitter=0))
    def fetch():
        raise TimeoutError("relay did not answer in 10s")

    job = fetch.enqueue()
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).attempt == 2 and app.get_job(job.id).status == JobStatus.PENDING,
                 message="the second attempt to fail")
    job = app.get_job(job.id)
    reason = reasons(app.why(job.id))["backing_off"]
    assert reason.message.startswith("Backing off after attempt 2 of 5 failed with TimeoutError: relay did not "
                                     "answer in 10s; attempt 3 is due in ")
    assert f"(at {utc(job.run_after)})" in reason.message
    assert (reason.data["attempt"], reason.data["error_type"], reason.data["run_after"]) == (
        2, "TimeoutError", job.run_after)


def test_jobs_ahead_in_claim_order(app):
    @app.task(name="charge", queue_name="billing")
    def charge(n): ...

    charge.enqueue(1)  # earlier, same priority: ahead
    charge.using(priority=5).enqueue(2)  # higher priority: ahead
    charge.using(run_after=timedelta(hours=-1)).enqueue(3)  # due earlier: ahead
    job = charge.enqueue(4)
    charge.enqueue(5)  # later: behind
    charge.using(priority=9, run_after=timedelta(hours=1)).enqueue(6)  # not due: not counted
    charge.using(queue_name="other", priority=9).enqueue(7)  # another queue
    announce(app, "w1", tasks=("charge",))
    why = app.why(job.id)
    ahead = reasons(why)["jobs_ahead"]
    assert ahead.message == ("3 due jobs of queue billing are ahead of it in claim order (higher priority, due "
                             "earlier, or enqueued before it).")
    assert ahead.data == {"jobs_ahead": 3, "more": False, "queue_name": "billing"}
    assert "should_start" not in reasons(why)  # three come first: no promise


def test_due_with_a_free_worker_should_start_within_a_poll_interval(app):
    @app.task(name="t", queue_name="mail")
    def t(): ...

    job = t.enqueue()
    announce(app, "w-mail", queues=("mail",), tasks=("t",))
    (reason,) = app.why(job.id).reasons
    assert reason.code == "should_start"
    assert "w-mail can run it with a free slot: it should start within a poll interval (1s by default)" in \
        reason.message


def test_every_worker_that_could_run_it_is_busy(app):
    @app.task(name="long")
    def long(): ...

    long.enqueue()
    announce(app, "w1", tasks=("long",), concurrency=1)
    claim_as(app, "w1", "long")
    waiting = long.enqueue()
    reason = reasons(app.why(waiting.id))["workers_busy"]
    assert reason.message == "Every live worker that can run it is busy (w1 runs 1 of 1): it waits for a free slot."


# Pending, held back by a pause or a limit: each is a blocker, so no start is promised.
def test_a_paused_queue_says_since_when_and_how_to_resume(app):
    @app.task(name="charge", queue_name="billing")
    def charge(): ...

    job = charge.enqueue()
    announce(app, "w1", tasks=("charge",))
    app.pause("billing")
    seconds_earlier(app, "leased_queues", "paused_at", 300, "queue_name = 'billing'")
    why = app.why(job.id)
    paused = reasons(why)["queue_paused"]
    assert re.fullmatch(rf"Queue billing has been paused since {utc(paused.data['paused_at'])} \(for 5m\d\ds\): no "
                        r"worker claims its jobs until it is resumed with `leased resume APP billing`\.",
                        paused.message)
    assert paused.data["queue_name"] == "billing" and paused.data["paused_seconds"] >= 300
    assert "should_start" not in reasons(why)
    app.resume("billing")
    assert [reason.code for reason in app.why(job.id).reasons] == ["should_start"]


def test_waiting_on_the_concurrency_limit_of_its_key_names_the_running_jobs(app):
    @app.task(name="sync", concurrency=1, concurrency_key="customer:{customer_id}")
    def sync(customer_id): ...

    running, waiting = sync.enqueue(42), sync.enqueue(42)
    announce(app, "vm:4411", tasks=("sync",))
    assert claim_as(app, "vm:4411", "sync").id == running.id
    why = app.why(waiting.id)
    full = reasons(why)["key_concurrency_full"]
    assert full.message == (f"It waits on the concurrency limit of key customer:42: 1 of 1 running (job {running.id} "
                            f"on worker vm:4411).")
    assert full.data["running_jobs"] == [{"job_id": running.id, "worker_id": "vm:4411"}]
    assert "should_start" not in reasons(why)
    assert "key_concurrency_full" not in reasons(app.why(sync.enqueue(7).id))  # another key has room


def test_waiting_on_the_concurrency_limit_of_its_queue_names_three_running_jobs(app):
    @app.task(name="charge", queue_name="billing")
    def charge(n): ...

    app.limit("billing", concurrency=5)
    jobs = charge.enqueue_many([(n,) for n in range(6)])
    for n in range(5):
        announce(app, f"w{n}", tasks=("charge",))
        claim_as(app, f"w{n}", "charge")
    why = app.why(jobs[5].id)
    full = reasons(why)["queue_concurrency_full"]
    assert full.message == (f"It waits on the concurrency limit of queue billing: 5 of 5 running (job {jobs[0].id} on "
                            f"worker w0, job {jobs[1].id} on worker w1, job {jobs[2].id} on worker w2 and 2 more).")
    assert (full.data["concurrency"], full.data["running"]) == (5, 5)
    assert "should_start" not in reasons(why)


def test_a_reached_rate_limit_says_when_its_next_slot_opens(app):
    @app.task(name="call", concurrency_key="api:{host}", rate_limit="3/h")
    def call(host): ...

    @app.task(name="send", queue_name="mail")
    def send(): ...

    app.limit("mail", rate_limit="1/m")
    keyed = [call.enqueue("x") for _ in range(4)]
    announce(app, "w1", tasks=("call", "send"))
    for _ in range(3):
        claim_as(app, "w1", "call")
    # The oldest of the three starts began 30 minutes ago: the window lets one more in 30 minutes.
    raw_sql(app, f"UPDATE leased_starts SET started_at = {seconds_before(app, 'started_at', 1800)}"
                 " WHERE started_at = (SELECT min(started_at) FROM leased_starts)")
    why = app.why(keyed[3].id)
    full = reasons(why)["key_rate_full"]
    slot = full.data["next_slot_at"]
    assert full.message.startswith("The rate limit of key api:x (3/h) is reached: 3 starts in the last 1h00m; the "
                                   "next slot opens in ") and full.message.endswith(f"(at {utc(slot)}).")
    assert 1700 < full.data["next_slot_seconds"] <= 1800 and full.data["starts"] == 3
    assert "should_start" not in reasons(why)

    _sent, waiting = send.enqueue(), send.enqueue()
    claim_as(app, "w1", "send")
    full = reasons(app.why(waiting.id))["queue_rate_full"]
    assert full.message.startswith("The rate limit of queue mail (1/m) is reached: 1 start in the last 1m00s; the "
                                   "next slot opens in ")
    assert 0 < full.data["next_slot_seconds"] <= 60


def test_a_scheduled_job_says_which_tick_enqueued_it(app):
    @app.periodic(every=timedelta(minutes=5), name="send_digest")
    def send_digest(scheduled_at): ...

    scheduler(app).run_once()  # a first sight of the schedule runs nothing
    last = next(info for info in app.list_schedules() if info.name == "send_digest").last_tick_at
    set_last_tick(app, "send_digest", last - timedelta(minutes=5))
    scheduler(app).run_once()
    (job,) = app.list_jobs(task_name="send_digest")
    first = app.why(job.id).reasons[0]
    assert first.code == "scheduled" and first.message.startswith(
        f"It was enqueued by schedule send_digest for its tick at {utc(last)} (")
    assert first.data == {"schedule_name": "send_digest", "tick_at": last}
    assert app.why(send_digest.enqueue(scheduled_at=last.isoformat()).id).reasons[0].code != "scheduled"


# Running.
def test_running_on_a_live_worker(app):
    started, release = threading.Event(), threading.Event()

    @app.task(name="block")
    def block():
        started.set()
        release.wait(30)

    job = block.enqueue()
    with running_worker(app) as worker:
        assert started.wait(10)
        wait_for(lambda: app.workers(), message="the worker's row")
        why = app.why(job.id)
        release.set()
    running, lease = why.reasons
    assert running.code == "running" and running.message.startswith(
        f"Attempt 1 of 3 is running on worker {worker.id}, started ")
    assert lease.code == "worker_alive" and lease.message.startswith(f"Worker {worker.id} was last seen ")
    assert "it renews the lease while the handler runs" in lease.message


def test_running_on_a_silent_worker_says_when_the_lease_runs_out(app):
    @app.task(name="t", lease=3600)
    def t(): ...

    job = t.enqueue()
    announce(app, "w-frozen", tasks=("t",))
    claimed = claim_as(app, "w-frozen", "t")
    seconds_earlier(app, "leased_workers", "last_seen_at", 40, "id = 'w-frozen'")
    reason = reasons(app.why(job.id))["worker_silent"]
    assert reason.message.startswith("Worker w-frozen has been silent for 4")  # 40s, or a little more
    assert "unless it renews, the lease expires in " in reason.message and reason.message.endswith(
        f"(at {utc(claimed.job.lease_expires_at)}) and the job returns to the pool then.")
    assert reason.data["silent_seconds"] >= 40


def test_running_on_a_worker_that_never_announced_itself(app):
    @app.task(name="t")
    def t(): ...

    job = t.enqueue()
    claim_as(app, "w-ghost", "t")
    reason = reasons(app.why(job.id))["worker_unknown"]
    assert reason.message.startswith("Worker w-ghost is not in the workers table")


def test_an_expired_lease_says_the_next_claim_returns_the_job(app):
    @app.task(name="t", lease=0.2, max_attempts=1)
    def t(): ...

    job = t.enqueue()
    claim_as(app, "w-gone", "t")
    expired = wait_for(lambda: reasons(app.why(job.id)).get("lease_expired"), message="the lease to expire")
    assert expired.message.startswith("Its lease expired ")
    assert expired.message.endswith("no live worker is running; the first to start fails it (no attempts are left).")
    assert app.backend.reclaim_expired() == 1  # what the next claim does first
    assert app.why(job.id).reasons[0].message == ("It used its only attempt, which was lost when worker w-gone stopped "
                                                  "renewing its lease (crashed, stalled or cut off).")


def test_a_running_job_past_its_time_limit_says_by_how_much(app):
    @app.task(name="slow", timeout=30)
    def slow(): ...

    job = slow.enqueue()
    announce(app, "w1", tasks=("slow",))
    claim_as(app, "w1", "slow")
    limit = reasons(app.why(job.id))["time_limit"]
    assert limit.message.startswith("Its time limit of 30s ends in ")
    seconds_earlier(app, "leased_jobs", "attempt_started_at", 42, f"id = {job.id}")
    why = app.why(job.id)
    past = reasons(why)["past_time_limit"]
    assert past.message.startswith("Its time limit of 30s passed 1") and "yet attempt 1 has not ended: the handler " \
        "is still running and worker w1 has not stopped it" in past.message
    assert past.data["past_seconds"] >= 12 and past.data["timeout_seconds"] == 30
    assert [r.code for r in why.reasons] == ["running", "past_time_limit", "worker_alive"]


def test_a_timed_out_attempt_backs_off_with_its_time_limit(app):
    @app.task(name="hangs", timeout=0.2, max_attempts=2, backoff=Backoff(base=3600, jitter=0))
    async def hangs():
        await asyncio.Event().wait()  # only the time limit ends this

    job = hangs.enqueue()
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).history and app.get_job(job.id).status is JobStatus.PENDING,
                 message="the first attempt to time out")
    reason = reasons(app.why(job.id))["backing_off"]
    assert reason.message.startswith("Backing off after attempt 1 of 2 ran past its time limit of 200ms; attempt 2 "
                                     "is due in ")
    assert reason.data["outcome"] == "timeout"


def test_a_failed_job_whose_handler_is_stuck_past_its_time_limit(app):
    release = threading.Event()

    @app.task(name="ignores_limit", timeout=0.2, max_attempts=1)
    def ignores_limit():
        release.wait(60)  # does not look at its context

    @app.task(name="next_in_line")
    def next_in_line(): ...

    job = ignores_limit.enqueue()
    try:
        with running_worker(app, concurrency=1) as worker:
            wait_for(lambda: [w.stuck_handlers for w in app.workers()] == [1], message="the worker's row to say stuck")
            # The attempt's end is written as the handler is found stuck, apart from the worker's row.
            wait_for(lambda: app.get_job(job.id).status is JobStatus.FAILED, message="the attempt's end")
            failed, stuck, retry = app.why(job.id).reasons
            # The fact is the attempt's record, not the words of its error.
            assert app.get_job(job.id).history[0].handler_outlived_limit is True
            raw_sql(app, f"UPDATE leased_attempts SET error_message = 'edited' WHERE job_id = {job.id}")
            assert app.why(job.id).reasons[1] == stuck
            # An attempt ended before the fact was recorded (schema 0025) may be the stuck one: it says so.
            raw_sql(app, f"UPDATE leased_attempts SET handler_outlived_limit = NULL WHERE job_id = {job.id}")
            unrecorded = app.why(job.id).reasons[1]
            waiting = next_in_line.enqueue()
            busy = reasons(app.why(waiting.id))["workers_busy"]
            release.set()
    finally:
        release.set()
    assert (failed.code, failed.message) == ("attempts_exhausted",
                                             "It used its only attempt, which hit the time limit of 200ms.")
    assert stuck.code == "handler_stuck" and stuck.message == (
        f"The handler thread of attempt 1 was still running when its time limit ended the attempt, and worker "
        f"{worker.id} still reports 1 stuck handler thread, each holding a slot until it returns: the handler does "
        f"not check context.cancelled.")
    assert retry.code == "retry"
    assert unrecorded.code == "handler_stuck" and unrecorded.data["recorded"] is False
    assert unrecorded.message == (f"Worker {worker.id}, which ran attempt 1 until its time limit ended it, reports 1 "
                                  "stuck handler thread, each holding a slot until it returns; whether this attempt's "
                                  "thread is one of them was not recorded (it ended before schema 0025).")
    assert busy.message == (f"Every live worker that can run it is busy ({worker.id} has no free slot: 0 jobs running, "
                            f"1 held by a handler thread stuck past its time limit): it waits for a free slot.")


# Finished.
def test_attempts_exhausted_and_what_retry_would_do(app):
    @app.task(name="flaky", max_attempts=3, backoff=Backoff(base=0))
    def flaky():
        raise ValueError("upstream said 503")

    job = flaky.enqueue()
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).status == JobStatus.FAILED, message="three attempts")
    why = app.why(job.id)
    assert why.summary == f"Job {job.id} (flaky on queue default) has failed."
    failed, retry = why.reasons
    assert (failed.code, failed.message) == (
        "attempts_exhausted", "It used all 3 attempts; the last failed with ValueError: upstream said 503.")
    assert retry.message == (f"`leased retry APP {job.id}` (or Retry on the dashboard) puts it back to pending, due "
                             f"now, with one more attempt (attempt 4 of 4).")
    retried = app.retry(job.id)  # does what it said
    assert (retried.status, retried.attempt + 1, retried.max_attempts) == (JobStatus.PENDING, 4, 4)


def test_permanent_error_fails_at_once(app):
    @app.task(name="charge", max_attempts=8)
    def charge():
        raise PermanentError("no such order")

    job = charge.enqueue()
    app.run_until_empty()
    failed, retry = app.why(job.id).reasons
    assert failed.message == ("Attempt 1 of 8 raised PermanentError: no such order, and a PermanentError fails the "
                              "job at once, without retrying.")
    assert retry.message.endswith("with the attempts it has left (2 to 8).")


def test_stored_arguments_that_no_longer_fit_the_handler(app):
    @app.task(name="charge")
    def charge(order_id): ...

    job = charge.enqueue("o-1")
    deployed = Leased(app.database_url)  # the next release: the handler takes another argument
    try:
        @deployed.task(name="charge")
        def charge_with_amount(order_id, amount): ...

        deployed.run_until_empty()
    finally:
        deployed.close()
    failed = app.why(job.id).reasons[0]
    assert failed.code == "arguments_mismatch"
    assert failed.message.startswith("Its stored arguments no longer fit the handler (arguments do not match "
                                     "charge(order_id, amount): ")
    assert failed.message.endswith("so attempt 1 of 3 failed it at once, without retrying.")


def test_a_payload_error_the_handler_raises_is_its_own_error_not_a_result_left_unstored(app):
    """The explainer reads what the worker recorded the attempt as (its error_type), not the words
    of its message: a PayloadError raised by the handler's own code (here its own bad enqueue) is
    an error like any other, retried by the task's policy; neither stored arguments that no longer
    fit nor a result that could not be stored."""
    from leased import PayloadError

    @app.task(name="notify", max_attempts=2, backoff=Backoff(base=0))
    def notify():
        raise PayloadError("notify: argument 'user_id' (int): got str 'u-1'")

    job = notify.enqueue()
    app.run_until_empty()
    failed = app.why(job.id).reasons[0]
    assert (failed.code, failed.message) == (
        "attempts_exhausted", "It used all 2 attempts; the last failed with PayloadError: notify: argument "
                              "'user_id' (int): got str 'u-1'.")


def test_a_result_that_cannot_be_stored_fails_the_job_at_once(app):
    @app.task(name="report", max_attempts=3)
    def report():
        return object()  # not JSON

    job = report.enqueue()
    app.run_until_empty()
    failed = app.get_job(job.id)
    (reason, _) = app.why(job.id).reasons
    assert failed.attempt == 1 and reason.code == "result_not_stored"
    assert reason.message.startswith("The handler's result could not be stored (") and reason.message.endswith(
        "so attempt 1 of 3 failed it at once, without retrying.")


def test_done_says_when_and_after_how_many_attempts(app):
    @app.task(name="add")
    def add(a, b):
        return a + b

    job = add.enqueue(1, 2)
    app.run_until_empty()
    finished = app.get_job(job.id).finished_at
    (done,) = app.why(job.id).reasons
    assert done.code == "done" and done.message.endswith(
        f"(at {utc(finished)}) after 1 attempt; its result is stored.")


def test_cancelled_says_when_and_what_retry_would_do(app):
    @app.task(name="t")
    def t(): ...

    waiting = t.enqueue()
    app.cancel(waiting.id)
    cancelled, retry = app.why(waiting.id).reasons
    assert cancelled.message.startswith("A user cancelled it ") and cancelled.message.endswith(
        "before its first attempt.")
    assert retry.message.endswith("with the attempts it has left (1 to 3).")

    running = t.enqueue()
    claim_as(app, "w1", "t")
    app.cancel(running.id)
    cancelled = app.why(running.id).reasons[0]
    assert cancelled.message.endswith("while attempt 1 ran on worker w1, whose handler was told to stop.")


def test_an_unknown_job_is_not_found(app):
    with pytest.raises(JobNotFound, match="no job with id 424242"):
        app.why(424242)


# The reasoning alone, over facts values.
NOW = datetime(2026, 12, 1, 10, 10, tzinfo=UTC)


def facts(**changes) -> JobFacts:
    job = Job(id=42, task_name="charge", queue_name="billing", status=JobStatus.PENDING, args=[], kwargs={},
              priority=0, attempt=0, max_attempts=3, lease_seconds=30, run_after=NOW - timedelta(seconds=2),
              created_at=NOW - timedelta(seconds=2))
    worker = WorkerInfo("w1", "host", 1, NOW, NOW - timedelta(seconds=2), 4, None, ["charge"], 0, True)
    values = {"job": job, "now": NOW, "workers": (worker,), "jobs_ahead": 0}
    values.update(changes)
    return JobFacts(**values)


def test_jobs_ahead_are_counted_up_to_a_limit():
    reason = reasons(explain(facts(jobs_ahead=AHEAD_LIMIT + 1)))["jobs_ahead"]
    assert reason.message.startswith("more than 10,000 due jobs of queue billing are ahead of it")


def test_a_lease_that_expired_while_workers_live_returns_at_the_next_claim():
    job = replace(facts().job, status=JobStatus.RUNNING, attempt=1, lease_owner="w1",
                  lease_expires_at=NOW - timedelta(seconds=5))
    lease = reasons(explain(facts(job=job)))["lease_expired"]
    assert lease.message == ("Its lease expired 5.0s ago (at 2026-12-01 10:09:55 UTC): the next live worker to look "
                             "for work (each does so about once a second) returns it to the pool.")


def test_a_job_due_for_long_with_a_free_worker_is_not_promised_blindly():
    job = replace(facts().job, run_after=NOW - timedelta(minutes=5))
    reason = explain(facts(job=job)).reasons[0]
    assert reason.message.startswith("It has been due for 5m00s, and w1 can run it with a free slot")
    assert reason.message.endswith("It has waited longer than that, so look at those workers' logs.")
