"""Jobs that wait, on every backend: context.sleep() and context.wait_for() end the attempt (not
counted against max_attempts), the job sleeps without a slot or a lease, and its handler runs again
when it wakes, its durable steps and its waits replayed; Leased.signal() fills a job's mailbox."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leased import ConfigurationError, InvalidTransition, JobNotFound, PayloadError, SignalTimeout, TaskContext
from leased.jobs import JobStatus, Outcome
from leased.testing import advance

import connections


def test_a_sleep_frees_the_attempt_and_resumes_after_its_recorded_steps(app):
    calls: list[str] = []

    @app.task(name="remind", takes_context=True, max_attempts=1)
    def remind(context: TaskContext, user: str):
        context.step("signed_up", lambda: calls.append(f"signed up {user}"))
        context.sleep(timedelta(days=3))
        return context.step("reminded", lambda: calls.append(f"remind {user}") or "sent")

    job = remind.enqueue("ada")
    stats = app.run_until_empty()
    sleeping = app.get_job(job.id)
    assert (sleeping.status, stats.waited, sleeping.lease_owner) == (JobStatus.SLEEPING, 1, None)
    assert sleeping.history[-1].outcome is Outcome.WAITED
    assert app.counts()["default"]["sleeping"] == 1
    why = app.why(job.id)
    assert "is sleeping" in why.summary and "Sleeping until" in why.reasons[0].message
    assert "Its next attempt resumes after step 'leased.sleep#1'" in why.reasons[-1].message
    advance(app, 2 * 86400)
    app.run_until_empty()
    assert app.get_job(job.id).status is JobStatus.SLEEPING, "the end is the first run's: three days"
    advance(app, 86400 + 1)
    app.run_until_empty()
    done = app.get_job(job.id)
    assert (done.status, done.result) == (JobStatus.DONE, "sent"), "its one attempt's worth: the waits are not counted"
    assert calls == ["signed up ada", "remind ada"], "each step ran once"


def test_a_signal_sent_before_during_or_after_the_wait_is_returned(app):
    @app.task(name="payout", takes_context=True)
    def payout(context: TaskContext, mode: str):
        if mode == "during":
            context.step("ask", lambda: app.signal(context.job_id, "approved", {"by": "self"}) and None)
        return context.wait_for("approved", timeout=3600)

    before, during, after = payout.enqueue("before"), payout.enqueue("during"), payout.enqueue("after")
    app.signal(before.id, "approved", {"by": "ann"})
    app.run_until_empty()
    assert app.get_job(before.id).result == {"by": "ann"}, "sent before the wait: returned at once"
    assert app.get_job(during.id).result == {"by": "self"}
    assert app.get_job(after.id).status is JobStatus.SLEEPING
    assert "Waiting for signal 'approved' since" in app.why(after.id).reasons[0].message
    app.signal(after.id, "approved", {"by": "bob"})
    assert app.get_job(after.id).status is JobStatus.PENDING, "the signal wakes the job in its own commit"
    app.run_until_empty()
    assert app.get_job(after.id).result == {"by": "bob"}
    assert [s.taken_by_attempt for s in app.backend.signals(after.id)] == [2]


def test_two_signals_of_one_name_are_taken_one_per_wait(app):
    @app.task(name="pair", takes_context=True)
    def pair(context: TaskContext):
        first = context.wait_for("item")
        second = context.wait_for("item")
        return [first, second]

    job = pair.using(idempotency_key="pair-1").enqueue()
    app.signal(None, "item", 1, idempotency_key="pair-1")
    app.run_until_empty()
    assert app.get_job(job.id).status is JobStatus.SLEEPING, "the second wait waits for the next signal"
    app.signal(job.id, "item", 2)
    app.run_until_empty()
    assert app.get_job(job.id).result == [1, 2]


def test_a_wait_times_out_into_an_error_the_handler_catches(app):
    @app.task(name="carrier", takes_context=True)
    def carrier(context: TaskContext):
        try:
            return context.wait_for("delivered", timeout=60)
        except SignalTimeout as timeout:
            return f"gave up: {timeout}"

    job = carrier.enqueue()
    app.run_until_empty()
    advance(app, 61)
    app.run_until_empty()
    assert app.get_job(job.id).result.startswith(f"gave up: job {job.id}: no signal 'delivered'")


def test_a_retried_attempt_sees_the_payload_it_took(app):
    seen: list[object] = []

    @app.task(name="flaky", takes_context=True, max_attempts=2)
    def flaky(context: TaskContext):
        seen.append(context.wait_for("go"))
        if len(seen) == 1:
            raise RuntimeError("after taking the signal")
        return seen[-1]

    job = flaky.enqueue()
    app.signal(job.id, "go", "once")
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    assert (app.get_job(job.id).result, seen) == ("once", ["once", "once"])


def test_a_signal_to_an_ended_job_is_refused_and_a_sleeping_job_can_be_cancelled(app):
    @app.task(name="noop")
    def noop():
        return None

    @app.task(name="idle", takes_context=True)
    def idle(context: TaskContext):
        context.wait_for("never")

    ended, sleeper = noop.enqueue(), idle.enqueue()
    app.run_until_empty()
    with pytest.raises(InvalidTransition, match=f"cannot signal job {ended.id} .*it is done"):
        app.signal(ended.id, "approved")
    assert app.cancel(sleeper.id).status is JobStatus.CANCELLED
    with pytest.raises(InvalidTransition, match="it is cancelled"):
        app.signal(sleeper.id, "never")
    with pytest.raises(ConfigurationError, match="by its id or by idempotency_key"):
        app.signal(None, "approved")


def test_a_signal_in_the_callers_transaction_is_sent_only_if_it_commits(app, database_url):
    @app.task(name="gate", takes_context=True)
    def gate(context: TaskContext):
        return context.wait_for("approved")

    job = gate.enqueue()
    app.run_until_empty()
    connection = connections.connect(database_url)
    try:
        app.signal(job.id, "approved", "no", connection=connection)
        connection.rollback()
        assert app.get_job(job.id).status is JobStatus.SLEEPING and app.backend.signals(job.id) == []
        app.signal(job.id, "approved", "yes", connection=connection)
        connection.commit()
    finally:
        connection.close()
    app.run_until_empty()
    assert app.get_job(job.id).result == "yes"


def test_a_wait_inside_a_durable_step_is_refused_with_why(app):
    @app.task(name="nested", takes_context=True, max_attempts=1)
    def nested(context: TaskContext):
        context.step("outer", lambda: context.sleep(1))

    job = nested.enqueue()
    app.run_until_empty()
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and "inside durable step 'outer'" in failed.last_error


def test_async_handlers_sleep_and_wait_too(app):
    @app.task(name="async_gate", takes_context=True)
    async def async_gate(context: TaskContext):
        await context.asleep(30)
        return await context.await_for("approved")

    job = async_gate.enqueue()
    app.signal(job.id, "approved", "early")  # in the mailbox before the wait: taken when it comes
    app.run_until_empty()
    assert app.get_job(job.id).status is JobStatus.SLEEPING
    advance(app, 31)
    app.run_until_empty()
    assert app.get_job(job.id).result == "early"


def test_bad_waits_and_signals_are_clear_errors_before_anything_is_written(app):
    problems: list[str] = []

    @app.task(name="careless", takes_context=True, max_attempts=1)
    def careless(context: TaskContext):
        for wait in (lambda: context.sleep(), lambda: context.sleep(5, until=datetime.now(UTC)),
                     lambda: context.sleep(-1), lambda: context.sleep(until=datetime(2030, 1, 1)),
                     lambda: context.wait_for(""), lambda: context.wait_for("ok", timeout="soon")):
            try:
                wait()
            except ConfigurationError as error:
                problems.append(str(error))
        return "went on"

    job = careless.enqueue()
    app.run_until_empty()
    assert app.get_job(job.id).result == "went on" and len(problems) == 6
    assert "either a duration" in problems[0] and "not both" in problems[1]
    assert "0 or more" in problems[2] and "with a timezone" in problems[3]
    assert "signal name" in problems[4] and "timeout" in problems[5]
    assert app.job_steps(job.id) == []
    with pytest.raises(PayloadError, match="signal 'go'"):
        app.signal(job.id, "go", object())
    with pytest.raises(JobNotFound, match="idempotency key 'nobody'"):
        app.signal(None, "go", idempotency_key="nobody")


def test_a_workflow_step_that_only_waits_is_an_approval_gate(app):
    @app.task(name="plan")
    def plan():
        return {"amount": 120}

    @app.task(name="pay", takes_context=True)
    def pay(context: TaskContext):
        return {"paid": context.parent_results["plan"]["amount"], "by": context.parent_results["approved"]["by"]}

    flow = app.workflow("payout")
    planned = flow.add(plan)
    gate = flow.wait_for("approved", after=[planned], timeout=timedelta(hours=1))
    flow.add(pay, after=[planned, gate])
    run = flow.enqueue()
    app.run_until_empty()
    assert app.get_job(run.job_ids["approved"]).status is JobStatus.SLEEPING
    assert app.get_job(run.job_ids["pay"]).status is JobStatus.WAITING
    app.signal(run.job_ids["approved"], "approved", {"by": "ann"})
    app.run_until_empty()
    assert app.get_job(run.job_ids["approved"]).result == {"by": "ann"}
    assert app.get_job(run.job_ids["pay"]).result == {"paid": 120, "by": "ann"}


def test_a_wait_step_past_its_timeout_fails_and_its_children_follow_their_when(app):
    @app.task(name="pay")
    def pay():
        return "paid"

    @app.task(name="refund")
    def refund():
        return "refunded"

    flow = app.workflow("payout")
    gate = flow.wait_for("approved", timeout=60, name="approval")
    flow.add(pay, after=[gate])
    flow.add(refund, after=[gate], when="failed")
    run = flow.enqueue()
    app.run_until_empty()
    assert app.get_job(run.job_ids["approval"]).status is JobStatus.SLEEPING
    advance(app, 120)
    app.run_until_empty()
    approval = app.get_job(run.job_ids["approval"])
    assert approval.status is JobStatus.FAILED
    assert "no signal 'approved' came before the wait's timeout" in approval.last_error
    assert app.get_job(run.job_ids["pay"]).status is JobStatus.CANCELLED
    assert app.get_job(run.job_ids["refund"]).result == "refunded"


@pytest.mark.parametrize("signal, options, message", [
    ("approved", {"timeout": 0}, "step 'approved': timeout must be a positive number of seconds or a timedelta, got 0"),
    ("approved", {"timeout": timedelta(seconds=-1), "name": "gate"}, "step 'gate': timeout must be a positive"),
    ("approved", {"timeout": "1h"}, "step 'approved': timeout must be a positive number"),
    ("", {}, "signal name"),
])
def test_a_wait_step_refuses_a_bad_timeout_or_signal_name_as_it_is_added(app, signal, options, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        app.workflow("payout").wait_for(signal, **options)


def test_a_run_waiting_at_its_gate_is_unfinished_keeps_its_key_and_cancels_whole(app):
    def payout_flow():
        flow = app.workflow("payout", idempotency_key="order-9")
        flow.wait_for("approved")
        return flow

    run = payout_flow().enqueue()
    app.run_until_empty()
    assert app.get_job(run.job_ids["approved"]).status is JobStatus.SLEEPING
    again = payout_flow().enqueue()  # the run still waits: it holds its key
    assert (again.id, again.created) == (run.id, False)
    assert app.cancel_workflow(run.id) == 1  # the sleeping gate is one of its unfinished steps
    assert app.get_job(run.job_ids["approved"]).status is JobStatus.CANCELLED
