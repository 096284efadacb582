"""Workflows on every backend: release in the parent's finish, failure and its undoing, cancel,
fan-out at run time, idempotency, retention, and bad input refused before anything is written."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

import pytest

from leased import Backoff, ConfigurationError, Leased, PayloadError, PermanentError, TaskContext, WorkflowNotFound
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.jobs import JobStatus, Outcome
from leased.runs import WorkflowStatus
from leased.testing import advance

from conftest import callers_connection


@pytest.fixture
def tasks(app):
    @app.task(name="extract")
    def extract(what):
        return {"what": what}

    @app.task(name="merge", takes_context=True)
    def merge(context: TaskContext):
        return sorted(context.parent_results)

    @app.task(name="outcomes", takes_context=True)
    def outcomes(context: TaskContext, label="x"):
        return {name: parent.status.value for name, parent in context.parents.items()}

    feed = {"down": True}

    @app.task(name="flaky", max_attempts=1)
    def flaky(should_fail):
        if should_fail and feed["down"]:
            raise PermanentError("refunds feed is down")
        return "ok"

    @app.task(name="add")
    def add(x, y=0):
        return x + y

    @app.task(name="fan", takes_context=True)
    def fan(context: TaskContext, n):
        return context.workflow.add_many([(add, (i, 100), {}, None, (), "succeeded") for i in range(n)])

    @app.task(name="summary", takes_context=True)
    def summary(context: TaskContext):
        batch = context.batch
        return [batch.succeeded, batch.failed, sorted(batch.results.values())]

    return {task.name: task for task in (extract, merge, outcomes, flaky, add, fan, summary)} | {"feed": feed}


def steps_of(app, run_id):
    return {step.name: step for step in app.get_workflow(run_id).steps}


def test_a_fan_in_runs_once_after_both_parents_with_their_results(app, tasks):
    wf = app.workflow("nightly-report")
    orders = wf.add(tasks["extract"], "orders")
    refunds = wf.add(tasks["extract"].using(queue_name="slow"), "refunds", name="refunds")
    report = wf.add(tasks["merge"], after=[orders, refunds])
    wf.add(tasks["outcomes"], "ops", after=[report], when="finished")
    run = wf.enqueue()

    assert set(run.job_ids) == {"extract", "refunds", "merge", "outcomes"}
    assert app.get_job(run.job_ids["merge"]).status is JobStatus.WAITING
    assert app.get_job(run.job_ids["merge"]).workflow_id == run.id
    assert app.job_counts().by_queue["default"]["waiting"] == 2
    app.run_until_empty()

    info = app.get_workflow(run.id)
    assert info.status is WorkflowStatus.SUCCEEDED and info.progress == "4 of 4 steps done"
    steps = {step.name: step for step in info.steps}
    assert steps["merge"].result == ["extract", "refunds"]
    assert steps["merge"].parents == ("extract", "refunds")
    assert steps["outcomes"].result == {"merge": "done"}
    merge, parents = app.get_job(run.job_ids["merge"]), [app.get_job(run.job_ids[n]) for n in ("extract", "refunds")]
    assert merge.history[0].started_at >= max(parent.finished_at for parent in parents)
    assert [w.id for w in app.list_workflows()] == [run.id]


def test_a_failed_parent_cancels_its_dependents_and_retrying_it_revives_them(app, tasks):
    wf = app.workflow("fragile")
    good = wf.add(tasks["flaky"], False, name="orders")
    bad = wf.add(tasks["flaky"], True, name="refunds")
    report = wf.add(tasks["merge"], after=[good, bad], name="report")
    email = wf.add(tasks["add"], 1, after=[report], name="email")
    wf.add(tasks["outcomes"], after=[bad], when="failed", name="compensate")
    wf.add(tasks["outcomes"], after=[email], when="finished", name="notify")
    run = wf.enqueue()
    app.run_until_empty()

    steps = steps_of(app, run.id)
    assert steps["refunds"].status is JobStatus.FAILED
    assert steps["report"].status is JobStatus.CANCELLED and steps["report"].last_error == "parent refunds failed"
    assert steps["email"].status is JobStatus.CANCELLED and steps["email"].last_error == "parent report was cancelled"
    assert steps["compensate"].result == {"refunds": "failed"}
    assert steps["notify"].result == {"email": "cancelled"}
    assert app.get_workflow(run.id).status is WorkflowStatus.FAILED

    # The feed is back: retrying the failed step revives what its failure cancelled.
    tasks["feed"]["down"] = False
    app.retry(run.job_ids["refunds"])
    steps = steps_of(app, run.id)
    assert steps["report"].status is JobStatus.WAITING and steps["email"].status is JobStatus.WAITING
    app.run_until_empty()
    steps = steps_of(app, run.id)
    assert steps["report"].status is JobStatus.DONE and steps["email"].status is JobStatus.DONE
    assert steps["email"].result == 1 and steps["refunds"].result == "ok"
    assert app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED  # the compensation ran, and stays done


def test_a_compensation_step_is_skipped_when_every_parent_succeeded(app, tasks):
    wf = app.workflow("all-good")
    first = wf.add(tasks["add"], 1)
    wf.add(tasks["outcomes"], after=[first], when="failed", name="undo")
    run = wf.enqueue()
    app.run_until_empty()
    info = app.get_workflow(run.id)
    undo = {step.name: step for step in info.steps}["undo"]
    assert undo.status is JobStatus.CANCELLED and undo.last_error == "skipped: no parent failed"
    assert info.status is WorkflowStatus.SUCCEEDED  # a skipped compensation is no failure
    assert app.list_workflows()[0].status is WorkflowStatus.SUCCEEDED


def test_a_chain_passes_each_result_on(app, tasks):
    wf = app.workflow("sums")
    wf.chain((tasks["add"], 1, 2), (tasks["add"], 10), (tasks["add"], 100))
    run = wf.enqueue()
    app.run_until_empty()
    assert [step.result for step in app.get_workflow(run.id).steps] == [3, 13, 113]


@dataclass
class Page:
    url: str
    words: int


def test_a_chain_takes_typed_handlers(app):
    """The stand-in for the previous step's result was type-checked like a real argument: a chain
    into `def parse(html: str)` (or a dataclass parameter) was refused at chain(), and the steps
    added before the refusal were already in the builder."""
    @app.task(name="fetch")
    def fetch(url: str) -> str:
        return f"<p>{url} has three words</p>"

    @app.task(name="parse")
    def parse(html: str, prefix: str) -> dict:
        return {"url": prefix + html[3:8], "words": 3}

    @app.task(name="store")
    def store(page: Page) -> str:
        return f"{page.url}: {page.words}"

    wf = app.workflow("crawl")
    wf.chain((fetch, "a.io"), (parse, "https://"), store)
    with pytest.raises(PayloadError, match="arguments do not match parse"):
        app.workflow("short").chain((fetch, "a.io"), parse)  # its shape is still checked: prefix missing
    run = wf.enqueue()
    app.run_until_empty()
    assert [step.result for step in app.get_workflow(run.id).steps] == [
        "<p>a.io has three words</p>", {"url": "https://a.io ", "words": 3}, "https://a.io : 3"]


def test_task_parameters_named_like_step_options_are_passable_and_a_collision_is_named(app):
    """wf.add(greet, name="ada") took name= as the step's name and failed with "missing a required
    argument: 'name'"; after= and when= likewise. kwargs= carries the task's keywords, beside the
    step's own options, on the builder and at run time."""
    @app.task(name="greet")
    def greet(name: str, when: str = "now", after: int = 0) -> str:
        return f"{name} {when} {after}"

    @app.task(name="adder", takes_context=True)
    def adder(context: TaskContext) -> int:
        return context.workflow.add(greet, kwargs={"name": "bob", "after": 2}, name="bob-step")

    for option, value in (("name", "ada"), ("when", "later"), ("after", [])):
        with pytest.raises(ConfigurationError, match=f"{option}= is the step's {option}, and task 'greet' has a "
                                                     f"parameter '{option}' too; pass the task's keyword arguments "
                                                     "as kwargs="):
            app.workflow("greetings").add(greet, **{option: value})
    with pytest.raises(ConfigurationError, match="'tone' given both in kwargs= and as a keyword"):
        app.workflow("greetings").add(greet, kwargs={"tone": "a"}, tone="b")
    wf = app.workflow("greetings")
    ada = wf.add(greet, kwargs={"name": "ada", "when": "today"}, name="ada-step")
    wf.add(greet, "cy", kwargs={}, after=[ada], when="finished", name="cy-step")
    wf.add(adder, after=[ada])
    run = wf.enqueue()
    app.run_until_empty()
    steps = steps_of(app, run.id)
    assert steps["ada-step"].result == "ada today 0"
    assert steps["cy-step"].result == "cy now 0" and steps["cy-step"].run_when == "finished"
    assert steps["bob-step"].result == "bob now 2" and steps["bob-step"].added_by == "adder"


def test_a_batch_tells_its_last_step_how_many_succeeded_and_failed(app, tasks):
    wf = app.workflow("album")
    members, last = wf.batch(tasks["flaky"], [(False,), (True,), (False,)], then=tasks["summary"])
    run = wf.enqueue()
    app.run_until_empty()
    assert steps_of(app, run.id)[last.name].result == [2, 1, ["ok", "ok"]]
    assert len(members) == 3


def test_steps_added_at_run_time_hold_back_the_steps_after_their_adder(app, tasks):
    wf = app.workflow("pages")
    crawl = wf.add(tasks["fan"], 3)
    wf.add(tasks["merge"], after=[crawl], name="merge")
    run = wf.enqueue()
    app.run_until_empty()

    steps = steps_of(app, run.id)
    added = [step for step in steps.values() if step.added_by == "fan"]
    assert sorted(step.result for step in added) == [100, 101, 102]
    assert set(steps["merge"].parents) == {"fan", *(step.name for step in added)}
    assert steps["merge"].result == sorted(["fan", *(step.name for step in added)])
    merge_started = app.get_job(steps["merge"].job_id).history[0].started_at
    assert all(merge_started >= app.get_job(step.job_id).finished_at for step in added)


def test_steps_added_at_run_time_are_named_after_their_adder_and_old_names_still_resolve(app, tasks):
    """Steps added at run time were named `add-1 of 15`, 15 being the adder's job id, and a cancel
    read `parent add-14 of 17 failed`: "the 14th of 17". Now `plan/add-1`. A step that an attempt
    on the earlier release added under the old name is the same step when the adder runs again on
    this one (durable replays look it up by name), not a second."""

    @app.task(name="broken", max_attempts=1)
    def broken():
        raise PermanentError("no")

    @app.task(name="plan", takes_context=True)
    def plan(context: TaskContext, n: int):
        ids = [context.workflow.add(tasks["add"], i) for i in range(n)]
        if n == 1:
            ids.append(context.workflow.add(broken))
            ids.append(context.workflow.add(tasks["add"], 9, after=[ids[-1]]))
        return ids

    wf = app.workflow("album")
    planned = wf.add(plan, 2)
    wf.add(tasks["merge"], after=[planned], name="publish")
    run = wf.enqueue()
    app.run_until_empty()
    steps = steps_of(app, run.id)
    assert sorted(steps) == ["plan", "plan/add-1", "plan/add-2", "publish"]
    assert steps["publish"].result == ["plan", "plan/add-1", "plan/add-2"]

    wf = app.workflow("album")
    wf.add(plan.using(queue_name="upgrade"), 1)
    old = wf.enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("w-old", ("plan",), ("upgrade",), 1))
    from leased.runs import NewStep

    # What the earlier release's attempt wrote, before its worker went away.
    legacy = f"add-1 of {claimed.id}"
    (legacy_id,) = app.backend.add_steps(claimed.lease,
                                         [NewStep(legacy, tasks["add"].using().new_job((0,), {}))]).values()
    app.backend.finish([AttemptEnd(claimed.lease, Outcome.SHUTDOWN, retry_in_seconds=0, workflow_id=old.id)])
    app.run_until_empty(queues=["default", "upgrade"])
    steps = steps_of(app, old.id)
    assert sorted(steps) == [legacy, "plan", "plan/add-2", "plan/broken-1"]
    assert steps["plan"].result == [legacy_id, steps["plan/broken-1"].job_id, steps["plan/add-2"].job_id]
    assert steps[legacy].status is JobStatus.DONE and steps["plan/broken-1"].status is JobStatus.FAILED
    assert steps["plan/add-2"].last_error == "parent plan/broken-1 failed"


def test_steps_an_attempt_added_before_it_raised_are_kept_and_run_once(app, tasks):
    """As docs/howto/workflows.md says: the adds are written at once, so an attempt that then raises leaves
    them in the run; its retry adds the same names and gets the same steps."""
    attempts = []

    @app.task(name="shaky_planner", takes_context=True, max_attempts=2, backoff=Backoff(base=0, jitter=0))
    def shaky_planner(context: TaskContext):
        added = context.workflow.add(tasks["add"], 1)
        attempts.append(added)
        if len(attempts) == 1:
            raise RuntimeError("after the add")
        return added

    wf = app.workflow("kept")
    wf.add(shaky_planner)
    run = wf.enqueue()
    app.run_until_empty()
    steps = steps_of(app, run.id)
    assert sorted(steps) == ["shaky_planner", "shaky_planner/add-1"] and attempts[0] == attempts[1]
    assert steps["shaky_planner/add-1"].status is JobStatus.DONE and steps["shaky_planner"].attempt == 2


def test_adding_the_same_steps_again_adds_nothing_and_a_lost_lease_adds_none(app, tasks):
    wf = app.workflow("retried-adder")
    adder = wf.add(tasks["add"], 1)
    wf.add(tasks["add"], 2, after=[adder], name="after")
    run = wf.enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("w1", tuple(app.tasks), None, 1))
    from leased.runs import NewStep

    new = [NewStep("page-1", tasks["add"].using().new_job((5,), {}))]
    first = app.backend.add_steps(claimed.lease, new)
    assert app.backend.add_steps(claimed.lease, new) == first
    assert steps_of(app, run.id)["after"].parents_left == 2
    app.cancel(claimed.id)
    with pytest.raises(Exception, match="no longer holds its lease"):
        app.backend.add_steps(claimed.lease, [NewStep("page-2", tasks["add"].using().new_job((6,), {}))])
    assert "page-2" not in steps_of(app, run.id)


def test_cancelling_a_workflow_cancels_its_steps_running_ones_through_their_leases(app, tasks):
    wf = app.workflow("to-cancel")
    first = wf.add(tasks["add"], 1)
    wf.add(tasks["add"], 2)
    wf.add(tasks["add"], 3, after=[first])
    run = wf.enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("w1", tuple(app.tasks), None, 1))
    assert app.cancel_workflow(run.id) == 3
    assert app.backend.finish([AttemptEnd(claimed.lease, Outcome.DONE, result_json="1",
                                          workflow_id=run.id)]) == [False]
    info = app.get_workflow(run.id)
    assert info.counts == {"cancelled": 3} and info.status is WorkflowStatus.CANCELLED
    assert app.get_job(claimed.id).history[-1].outcome is Outcome.CANCELLED
    with pytest.raises(WorkflowNotFound):
        app.cancel_workflow(run.id + 1000)


def test_a_step_whose_last_lease_expired_fails_and_cancels_its_dependents(app, tasks):
    wf = app.workflow("expiring")
    first = wf.add(tasks["add"].using(max_attempts=1, lease=5), 1)
    wf.add(tasks["add"], 2, after=[first], name="next")
    run = wf.enqueue()
    app.backend.claim(ClaimRequest("gone", tuple(app.tasks), None, 1))
    advance(app, timedelta(seconds=10))
    app.backend.claim(ClaimRequest("other", tuple(app.tasks), None, 1, reclaim_expired=True))
    steps = steps_of(app, run.id)
    assert steps["add"].status is JobStatus.FAILED
    assert steps["next"].status is JobStatus.CANCELLED and steps["next"].last_error == "parent add failed"


def test_an_idempotency_key_returns_the_unfinished_run_and_frees_itself_when_it_ends(app, tasks):
    def build():
        wf = app.workflow("nightly", idempotency_key="2026-12-03")
        wf.add(tasks["add"], 1)
        return wf.enqueue()

    first, again = build(), build()
    assert again.id == first.id and not again.created and again.job_ids == first.job_ids
    assert app.count_jobs() == 1
    app.run_until_empty()
    later = build()
    assert later.created and later.id != first.id


def test_enqueue_in_the_callers_transaction_writes_all_or_nothing(app, tasks):
    connection = callers_connection(app)  # sqlite3, psycopg or the MariaDB driver, in a transaction
    try:
        wf = app.workflow("in-my-transaction")
        first = wf.add(tasks["add"], 1)
        wf.add(tasks["add"], 2, after=[first])
        wf.enqueue(connection=connection)
        connection.rollback()
        assert app.count_jobs() == 0 and app.list_workflows() == []
        run = wf.enqueue(connection=connection)
        connection.commit()
    finally:
        connection.close()
    assert app.get_workflow(run.id).total == 2
    app.run_until_empty()
    assert app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED


def test_retention_never_prunes_a_step_of_an_unfinished_run(app, tasks):
    wf = app.workflow("long")
    first = wf.add(tasks["add"].using(queue_name="held"), 1)
    wf.add(tasks["add"], 2, after=[first], name="later")
    wf.add(tasks["add"], 3, name="independent")
    run = wf.enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("w1", tuple(app.tasks), ("held",), 1))
    app.run_until_empty(queues=["default"])  # "independent" is done; "later" waits for the running one
    advance(app, timedelta(days=30))
    app.prune(older_than=timedelta(days=1))
    assert app.get_workflow(run.id).total == 3  # unfinished: nothing went
    app.backend.finish([AttemptEnd(claimed.lease, Outcome.DONE, result_json="1", workflow_id=run.id)])
    app.run_until_empty()
    advance(app, timedelta(days=30))
    app.prune(older_than=timedelta(days=1))
    with pytest.raises(WorkflowNotFound):
        app.get_workflow(run.id)  # the run went with its last step


def test_two_parents_ending_at_once_release_their_child_exactly_once(database_url, app, tasks):
    runs = []
    for _ in range(15):
        wf = app.workflow("pair")
        left, right = wf.add(tasks["add"], 1, name="left"), wf.add(tasks["add"], 2, name="right")
        wf.add(tasks["add"], 3, after=[left, right], name="child")
        runs.append(wf.enqueue())
    apps = [Leased(database_url), Leased(database_url)]
    try:
        claimed = {worker: app_.backend.claim(ClaimRequest(worker, ("add",), None, 100))
                   for worker, app_ in zip(("a", "b"), apps, strict=True)}
        # Each worker holds one parent of every pair where it can: swap so that both sides race.
        barrier = threading.Barrier(2)

        def finish(worker, app_):
            barrier.wait()
            for job in claimed[worker]:
                app_.backend.finish([AttemptEnd(job.lease, Outcome.DONE, result_json="1", workflow_id=job.workflow_id)])

        threads = [threading.Thread(target=finish, args=(worker, app_))
                   for worker, app_ in zip(("a", "b"), apps, strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for app_ in apps:
            app_.close()
    for run in runs:
        steps = steps_of(app, run.id)
        if steps["left"].status is JobStatus.DONE and steps["right"].status is JobStatus.DONE:
            assert steps["child"].status is JobStatus.PENDING and steps["child"].parents_left == 0
    app.run_until_empty()
    assert all(app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED for run in runs)
    assert app.count_jobs(status="done") == 45


def test_a_fan_in_of_many_parents_goes_through_the_bulk_insert(app, tasks):
    wf = app.workflow("wide")
    parents = [wf.add(tasks["add"], i, name=f"part-{i}") for i in range(300)]
    wf.add(tasks["summary"], after=parents, when="finished")
    run = wf.enqueue()
    app.run_until_empty(concurrency=8)
    summary = steps_of(app, run.id)["summary"]
    assert summary.result[0] == 300 and summary.result[2] == list(range(300))


def test_bad_input_is_refused_before_anything_is_written(app, tasks):
    empty = app.workflow("empty")
    with pytest.raises(ConfigurationError, match="no steps"):
        empty.enqueue()
    one, other = app.workflow("one"), app.workflow("other")
    theirs = other.add(tasks["add"], 1)
    with pytest.raises(ConfigurationError, match="of another workflow"):
        one.add(tasks["add"], 2, after=[theirs])
    with pytest.raises(ConfigurationError, match="invalid when="):
        one.add(tasks["add"], 2, when="sometimes")
    one.add(tasks["add"], 2, name="two")
    with pytest.raises(ConfigurationError, match="named 'two' already"):
        one.add(tasks["add"], 3, name="two")
    with pytest.raises(ConfigurationError, match="idempotency_key"):
        one.add(tasks["add"].using(idempotency_key="k"), 3)
    with pytest.raises(PayloadError, match="missing a required argument"):
        one.add(tasks["add"])  # add(x) needs x: refused at add(), as enqueue() refuses it

    stranger = Leased(app.database_url)

    @stranger.task(name="unknown-here")
    def unknown():
        return None

    one.add(unknown)
    with pytest.raises(ConfigurationError, match="not registered with this app"):
        one.enqueue()
    stranger.close()
    assert app.count_jobs() == 0 and app.list_workflows() == []


def test_async_code_enqueues_a_workflow_without_blocking_its_loop(app, tasks):
    import asyncio

    wf = app.workflow("from-async")
    first = wf.add(tasks["add"], 1)
    wf.add(tasks["add"], 2, after=[first])
    run = asyncio.run(wf.aenqueue())
    app.run_until_empty()
    assert app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED


def test_a_step_added_after_a_done_step_does_not_wait_for_it_and_bad_parents_are_refused(app, tasks):
    wf = app.workflow("late-adds")
    first = wf.add(tasks["add"], 1, name="first")
    adder = wf.add(tasks["add"], 2, name="adder")
    failing = wf.add(tasks["flaky"], True, name="failing")
    run = wf.enqueue()
    app.run_until_empty(queues=["default"])  # all three end (the adder too: it is re-claimed below)
    # A new adder, claimed by hand, adds steps after the ones that ended.
    wf2 = app.workflow("adder-run")
    wf2.add(tasks["add"], 3, name="adding")
    run2 = wf2.enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("w1", tuple(app.tasks), None, 1))
    assert claimed.id == run2.job_ids["adding"]
    from leased.runs import NewStep

    def step(name, after):
        return NewStep(name, tasks["add"].using().new_job((9,), {}), tuple(-1 - job_id for job_id in after))

    with pytest.raises(ConfigurationError, match="not a step of workflow"):
        app.backend.add_steps(claimed.lease, [step("x", [run.job_ids["first"]])])  # another run's step
    # In its own run: a done parent is not waited for; a failed one is refused.
    wf3 = app.workflow("own")
    done = wf3.add(tasks["add"], 1, name="done")
    wf3.add(tasks["flaky"], True, name="broken")
    wf3.add(tasks["add"].using(queue_name="later"), 2, name="adder", after=[done])
    run3 = wf3.enqueue()
    app.run_until_empty(queues=["default"])
    (own,) = app.backend.claim(ClaimRequest("w2", tuple(app.tasks), ("later",), 1))
    with pytest.raises(Exception, match="ended without succeeding"):
        app.backend.add_steps(own.lease, [step("y", [run3.job_ids["broken"]])])
    added = app.backend.add_steps(own.lease, [step("z", [run3.job_ids["done"]])])
    assert app.get_job(added["z"]).status is JobStatus.PENDING
    assert adder.name == "adder" and failing.name == "failing" and first.name == "first"


def test_retrying_a_run_whose_failed_step_follows_another_failed_step_waits_for_it(app, tasks):
    wf = app.workflow("two-failures")
    first = wf.add(tasks["flaky"], True, name="first")
    wf.add(tasks["flaky"], True, name="second", after=[first], when="finished")
    run = wf.enqueue()
    app.run_until_empty()
    assert app.get_workflow(run.id).counts == {"failed": 2}
    assert app.retry_workflow(run.id) == 2
    steps = steps_of(app, run.id)
    assert steps["first"].status is JobStatus.PENDING and steps["second"].status is JobStatus.WAITING
    tasks["feed"]["down"] = False
    app.run_until_empty()
    steps = steps_of(app, run.id)
    second = app.get_job(steps["second"].job_id)
    assert second.history[-1].started_at >= app.get_job(steps["first"].job_id).finished_at
    assert app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED


def test_steps_of_a_cancelled_run_retried_one_by_one_wait_for_each_other_again(app, tasks):
    wf = app.workflow("cancelled-then-retried")
    first = wf.add(tasks["add"], 1, name="first")
    wf.add(tasks["add"], 2, name="second", after=[first])
    run = wf.enqueue()
    app.cancel_workflow(run.id)
    app.retry(run.job_ids["second"])  # its parent is still cancelled: it runs now, as asked
    assert app.get_job(run.job_ids["second"]).status is JobStatus.PENDING
    app.cancel(run.job_ids["second"])
    app.retry(run.job_ids["first"])
    app.retry(run.job_ids["second"])  # its parent runs again: it waits for it
    assert app.get_job(run.job_ids["second"]).status is JobStatus.WAITING
    app.run_until_empty()
    assert app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED
