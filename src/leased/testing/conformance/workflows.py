"""Workflows: a run written in one transaction, steps that wait for their parents, steps added by
a running step, and what people do to a run (cancel it, retry its failures)."""

from __future__ import annotations

from leased.errors import InvalidTransition, WorkflowNotFound
from leased.jobs import JobStatus, Lease
from leased.runs import NewStep, NewWorkflow, ParentEnd, RunWhen, WorkflowStatus
from leased.testing.conformance.helpers import claim, done, error, ids, job, new_job
from leased.testing.conformance.suite import MakeBackend, check


def _chain(key: str | None = None) -> NewWorkflow:
    """fetch, then parse (on queue "mail"), then report; and "rescue", only if one of them fails."""
    return NewWorkflow("nightly", (
        NewStep("fetch", new_job(max_attempts=1)),
        NewStep("parse", new_job(queue_name="mail", max_attempts=1), parents=(0,)),
        NewStep("report", new_job(max_attempts=1), parents=(1,)),
        NewStep("rescue", new_job(), parents=(0, 1, 2), run_when=RunWhen.FAILED),
    ), idempotency_key=key)


@check
def a_workflow_runs_each_step_once_its_parents_ended(make: MakeBackend) -> None:
    backend = make()
    written = backend.enqueue_workflow(_chain("night-1"))
    steps = written.job_ids
    assert written.created and list(steps) == ["fetch", "parse", "report", "rescue"]
    assert backend.step_names(written.workflow_id) == steps
    again = backend.enqueue_workflow(_chain("night-1"))
    assert (again.workflow_id, again.job_ids, again.created) == (written.workflow_id, steps, False), \
        "an unfinished run holds its key: nothing is written"
    assert [job(backend, steps[name]).status for name in steps] == [
        JobStatus.PENDING, JobStatus.WAITING, JobStatus.WAITING, JobStatus.WAITING]
    (fetch,) = claim(backend)
    assert fetch.id == steps["fetch"] and claim(backend) == [], "a waiting step is not claimed"
    assert backend.finish([done(fetch.lease, '{"rows": 2}')]) == [True]
    assert backend.parents_of(steps["parse"]) == [ParentEnd("fetch", steps["fetch"], JobStatus.DONE, {"rows": 2})]
    assert backend.parents_of(steps["fetch"]) == []
    (parse,) = claim(backend, queues=("mail",))
    assert parse.id == steps["parse"]
    added = backend.add_steps(parse.lease, [NewStep("shard-1", new_job()), NewStep("shard-2", new_job(), parents=(0,))])
    assert set(added) == {"shard-1", "shard-2"} and backend.step_names(written.workflow_id) == steps | added
    assert backend.add_steps(parse.lease, [NewStep("shard-1", new_job())]) == {"shard-1": added["shard-1"]}, \
        "a name the run has is that step (a retried handler adds it again)"
    try:
        backend.add_steps(Lease(parse.id, parse.attempt, "intruder"), [NewStep("x", new_job())])
    except InvalidTransition:
        pass
    else:
        raise AssertionError("adding steps is fenced on the adding step's lease")
    with backend.attempt_transaction() as connection:
        assert backend.finish_in(connection, done(parse.lease)) == (True, set()), "report still waits for the shards"
    (shard_1,) = claim(backend)
    with backend.attempt_transaction() as connection:
        assert backend.finish_in(connection, done(shard_1.lease)) == (True, {"default"}), \
            "an end says which queues its children became due on"
    (shard_2,) = claim(backend)
    assert shard_2.id == added["shard-2"]
    assert backend.finish([done(shard_2.lease)]) == [True]
    (report,) = claim(backend)
    assert report.id == steps["report"] and backend.finish([done(report.lease)]) == [True]
    run = backend.get_workflow(written.workflow_id)
    assert run is not None and run.status is WorkflowStatus.SUCCEEDED
    by_name = {step.name: step for step in run.steps}
    assert by_name["rescue"].status is JobStatus.CANCELLED, "a compensation step is skipped when nothing failed"
    assert set(by_name["report"].parents) == {"parse", "shard-1", "shard-2"}, \
        "who waits for a step that adds steps waits for them too"
    assert by_name["shard-1"].added_by == "parse" and by_name["parse"].result is None
    assert backend.get_workflow(10**9) is None
    fresh = backend.enqueue_workflow(_chain("night-1"))
    assert fresh.created and fresh.workflow_id != written.workflow_id, "a finished run gives its key up"


@check
def a_failed_step_cancels_what_waits_for_it_until_it_is_retried(make: MakeBackend) -> None:
    backend = make()
    written = backend.enqueue_workflow(_chain())
    steps = written.job_ids
    (fetch,) = claim(backend)
    assert backend.finish([error(fetch.lease, retry_in_seconds=None)]) == [True]
    assert [job(backend, steps[name]).status for name in ("parse", "report", "rescue")] == [
        JobStatus.CANCELLED, JobStatus.CANCELLED, JobStatus.PENDING], "its children are settled in its end"
    (failed,) = backend.parents_of(steps["parse"])
    assert (failed.status, failed.error) == (JobStatus.FAILED, "ValueError: kaboom") and not failed.succeeded
    run = backend.get_workflow(written.workflow_id)
    assert run is not None and run.status is WorkflowStatus.RUNNING and run.counts.get("failed") == 1
    assert backend.retry_workflow(written.workflow_id) == 1, "the failed step is retried"
    assert [job(backend, steps[name]).status for name in ("fetch", "parse", "report")] == [
        JobStatus.PENDING, JobStatus.WAITING, JobStatus.WAITING], "what its failure cancelled waits again"
    (running,) = claim(backend, tasks=("a",), limit=1)
    assert backend.cancel_workflow(written.workflow_id) == 4, "every unfinished step: pending, running, waiting"
    assert backend.finish([done(running.lease)]) == [False], "a running step's lease is gone"
    assert backend.cancel_workflow(written.workflow_id) == 0
    for missing in (backend.cancel_workflow, backend.retry_workflow):
        try:
            missing(10**9)
        except WorkflowNotFound:
            continue
        raise AssertionError("no such workflow is WorkflowNotFound")


@check
def workflows_are_listed_newest_first_with_their_steps_counted(make: MakeBackend) -> None:
    backend = make()
    first = backend.enqueue_workflow(_chain())
    other = backend.enqueue_workflow(NewWorkflow("other", (NewStep("only", new_job()),)))
    last = backend.enqueue_workflow(_chain())
    listed = backend.list_workflows()
    assert [run.id for run in listed] == [last.workflow_id, other.workflow_id, first.workflow_id]
    assert listed[0].counts == {"pending": 1, "waiting": 3} and listed[0].steps == (), "counted, not listed"
    assert [run.id for run in backend.list_workflows(limit=1, before_id=last.workflow_id)] == [other.workflow_id]
    assert [run.id for run in backend.list_workflows(name="nightly")] == [last.workflow_id, first.workflow_id]
    written = backend.get_workflow(first.workflow_id)
    assert written is not None and [step.name for step in written.steps] == ["fetch", "parse", "report", "rescue"]
    assert ids(claim(backend)) == sorted([first.job_ids["fetch"], other.job_ids["only"], last.job_ids["fetch"]])
