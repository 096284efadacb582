"""Durable steps on every backend: context.step(name, fn) runs fn once across a job's attempts;
a transactional step's writes commit with its record; a lost lease records nothing."""

from __future__ import annotations

import pytest

from leased import ConfigurationError, PayloadError, TaskContext
from leased.jobs import JobStatus, Outcome
from leased.testing import advance

import connections
from conftest import raw_rows, raw_sql


@pytest.fixture
def effects(app):
    raw_sql(app, "CREATE TABLE effects (job_id BIGINT NOT NULL, attempt INTEGER NOT NULL, note VARCHAR(100))")
    return lambda: sorted(raw_rows(app, "SELECT job_id, attempt, note FROM effects"))


def test_a_recorded_step_is_not_run_again_on_the_next_attempt(app):
    calls: list[str] = []

    @app.task(name="onboard", takes_context=True, max_attempts=3)
    def onboard(context: TaskContext, user: str):
        customer = context.step("create_customer", lambda: calls.append("create") or {"id": f"cus-{user}"})
        if context.attempt == 1:
            raise RuntimeError("mail is down")
        context.step("send_welcome", lambda: calls.append(f"mail {customer['id']}"))
        return customer

    job = onboard.enqueue("ada")
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()

    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == {"id": "cus-ada"}
    assert calls == ["create", "mail cus-ada"]
    steps = app.job_steps(job.id)
    assert [(step.name, step.attempt, step.result) for step in steps] == [
        ("create_customer", 1, {"id": "cus-ada"}), ("send_welcome", 2, None)]
    assert steps[0].finished_at >= steps[0].started_at


def test_a_step_that_raised_runs_again(app):
    tries: list[int] = []

    @app.task(name="retrying_step", takes_context=True, max_attempts=2)
    def retrying_step(context: TaskContext):
        def charge():
            tries.append(context.attempt)
            if context.attempt == 1:
                raise ConnectionError("the card network is down")
            return "charged"

        return context.step("charge", charge)

    job = retrying_step.enqueue()
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    assert app.get_job(job.id).result == "charged"
    assert tries == [1, 2]


def test_a_transactional_step_writes_with_its_record(app, effects):
    @app.task(name="two_steps", takes_context=True, max_attempts=2, lease=30)
    def two_steps(context: TaskContext):
        def debit(connection):
            connections.execute(connection, "INSERT INTO effects (job_id, attempt, note) VALUES (?, ?, ?)",
                                (context.job_id, context.attempt, "debit"))
            return "debited"

        context.step("debit", debit, transactional=True)
        if context.attempt == 1:
            raise RuntimeError("after the first step")
        return "ok"

    job = two_steps.enqueue()
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    assert app.get_job(job.id).status is JobStatus.DONE
    assert effects() == [(job.id, 1, "debit")]  # recorded by attempt 1, not run by attempt 2


def test_a_step_whose_lease_is_gone_is_not_recorded_and_stops_the_attempt(app, effects):
    reached: list[int] = []

    @app.task(name="lost", takes_context=True, lease=30)
    def lost(context: TaskContext):
        def debit(connection):
            connections.execute(connection, "INSERT INTO effects (job_id, attempt, note) VALUES (?, ?, ?)",
                                (context.job_id, context.attempt, "debit"))
            if context.attempt == 1:
                advance(app, 3600)  # the lease runs out before the record
            return context.attempt

        context.step("debit", debit, transactional=True)
        reached.append(context.attempt)

    job = lost.enqueue()
    app.run_until_empty()
    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE
    assert done.history[0].outcome in (Outcome.LEASE_LOST, Outcome.EXPIRED)
    assert reached == [2]
    assert effects() == [(job.id, 2, "debit")]
    assert [step.attempt for step in app.job_steps(job.id)] == [2]


def test_steps_in_a_transactional_handler_commit_with_its_end(app, effects):
    @app.task(name="tx_steps", takes_context=True, transactional=True, lease=30)
    def tx_steps(context: TaskContext):
        context.step("first", lambda: context.attempt)
        connections.execute(context.connection, "INSERT INTO effects (job_id, attempt, note) VALUES (?, ?, ?)",
                            (context.job_id, context.attempt, "body"))
        if context.attempt == 1:
            advance(app, 3600)  # everything of attempt 1 rolls back, its step's record too

    job = tx_steps.enqueue()
    app.run_until_empty()
    assert [(step.name, step.attempt, step.result) for step in app.job_steps(job.id)] == [("first", 2, 2)]
    assert effects() == [(job.id, 2, "body")]


def test_async_steps(app):
    calls: list[str] = []

    @app.task(name="async_steps", takes_context=True, max_attempts=2)
    async def async_steps(context: TaskContext):
        async def fetch():
            calls.append("fetch")
            return [1, 2]

        got = await context.astep("fetch", fetch)
        also = await context.astep("plain", lambda: "sync fn")
        if context.attempt == 1:
            raise RuntimeError("again")
        return [got, also]

    job = async_steps.enqueue()
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    assert app.get_job(job.id).result == [[1, 2], "sync fn"]
    assert calls == ["fetch"]


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_bad_steps_are_clear_errors(app):
    errors: list[str] = []

    @app.task(name="bad_steps", takes_context=True, max_attempts=1)
    def bad_steps(context: TaskContext):
        for name, fn in (("", lambda: 1), ("x" * 300, lambda: 1), ("ok", "not callable"), ("odd", lambda: {1, 2}),
                         ("late ", lambda: 1), ("mute", Unprintable())):
            try:
                context.step(name, fn)
            except (ConfigurationError, PayloadError) as error:
                errors.append(str(error))

    bad_steps.enqueue()
    app.run_until_empty()
    assert "invalid step name ''" in errors[0]
    assert "more than the 255 every database keeps" in errors[1]
    assert "step 'ok': fn must be callable" in errors[2]
    assert "step 'odd' returned what leased cannot store as its result" in errors[3]
    assert "invalid step name 'late '" in errors[4]  # MariaDB's unique index would take it for 'late'
    assert "step 'mute': fn must be callable, got <a Unprintable whose repr() failed>" in errors[5]
    assert app.job_steps(1) == []


def test_show_lists_the_recorded_steps(app, tmp_path):
    from click.testing import CliRunner

    from leased.cli.main import cli

    @app.task(name="shown", takes_context=True)
    def shown(context: TaskContext):
        context.step("fetch", lambda: {"rows": 3})

    job = shown.enqueue()
    app.run_until_empty()
    runner = CliRunner()
    result = runner.invoke(cli, ["show", "--database", app.database_url, str(job.id)])
    assert result.exit_code == 0, result.output
    assert "steps recorded" in result.output and "fetch" in result.output and '{"rows": 3}' in result.output
    as_json = runner.invoke(cli, ["show", "--database", app.database_url, "--json", str(job.id)])
    assert '"name": "fetch"' in as_json.output


def test_why_names_the_step_a_retried_job_resumes_after(app):
    @app.task(name="resumable", takes_context=True, max_attempts=2)
    def resumable(context: TaskContext):
        context.step("extract", lambda: 1)
        context.step("load", lambda: 2)
        raise RuntimeError("transform failed")

    @app.task(name="one_step", takes_context=True, max_attempts=2)
    def one_step(context: TaskContext):
        context.step("extract", lambda: 1)
        raise RuntimeError("load failed")

    job, single = resumable.enqueue(), one_step.enqueue()
    app.run_until_empty()
    reason = next(reason for reason in app.why(job.id).reasons if reason.code == "resumes_after_step")
    assert reason.message == ("Its next attempt resumes after step 'load': "
                              "its 2 recorded steps ('extract', 'load') do not run again.")
    reason = next(reason for reason in app.why(single.id).reasons if reason.code == "resumes_after_step")
    assert reason.message == ("Its next attempt resumes after step 'extract': "
                              "step 'extract' is recorded, so it does not run again.")


def test_the_job_page_lists_the_recorded_steps(app):
    import warnings

    from leased.web import dashboard

    with warnings.catch_warnings():  # Starlette's TestClient prefers httpx2, as test_web says
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    @app.task(name="paged", takes_context=True)
    def paged(context: TaskContext):
        context.step("fetch <rows>", lambda: [1, 2])

    job = paged.enqueue()
    app.run_until_empty()
    html = TestClient(dashboard(app)).get(f"/jobs/{job.id}").text
    # Text from the job is isolated (<bdi>), so that a bidi override in it cannot reverse the page.
    assert "<h2>Steps recorded</h2>" in html and "<code><bdi>fetch &lt;rows&gt;</bdi></code>" in html
    assert "[1, 2]" in html
