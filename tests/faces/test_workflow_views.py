"""Seeing a workflow: `leased workflow` and `leased workflows`, `why` on a step that waits for its
parents or that their failure cancelled, the dashboard's workflow pages and actions, and the
workflows gauge of /metrics; on every backend.

Steps run in-process (run_until_empty, on some queues only where a parent must stay pending); a
running parent is a claim made as a named worker would make it.
"""

from __future__ import annotations

import json
import re
import warnings
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from leased import JobStatus, Leased, PermanentError
from leased.backends.ports import ClaimRequest
from leased.cli.main import cli
from leased.explain import explain
from leased.jobs import ClaimedJob
from leased.run_views import step_tree
from leased.runs import RunWhen, StepInfo, WorkflowStatus
from conftest import raw_sql
from test_cli import APP, Cli

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def leased(*args: str, code: int = 0):
    """The `leased` command in this process (a subprocess costs half a second to start): for the
    commands that need no handlers, given --database."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def claim_as(app: Leased, worker_id: str, task_name: str) -> ClaimedJob:
    (job,) = app.backend.claim(ClaimRequest(worker_id, (task_name,), None, 1))
    return job


def failed_run(app: Leased):
    """orders and refunds succeed, check fails (after orders), so merge (after all three) is
    cancelled; notify runs anyway (when finished), undo too (when failed): the run failed."""

    @app.task(name="extract")
    def extract(what):
        return {"rows": len(what)}

    @app.task(name="check", max_attempts=1)
    def check():
        raise PermanentError("totals differ")

    @app.task(name="merge")
    def merge():
        return "merged"

    @app.task(name="notify")
    def notify(who):
        return who

    wf = app.workflow("nightly")
    orders = wf.add(extract, "orders", name="orders")
    refunds = wf.add(extract, "refunds", name="refunds")
    checked = wf.add(check, after=[orders])
    merged = wf.add(merge, after=[orders, refunds, checked])
    wf.add(notify, "ops", after=[merged], when="finished")
    wf.add(notify, "undo", after=[merged], when="failed", name="undo")
    run = wf.enqueue()
    app.run_until_empty()
    return run


def waiting_run(app: Leased):
    """merge waits for 8 parents: quick is done, crunch runs on worker vm:7, wait-1 to wait-6 are
    pending (queue slow, which nothing here runs); report waits for merge."""

    @app.task(name="part")
    def part(n):
        return n

    @app.task(name="crunch", queue_name="slow")
    def crunch():
        return None

    @app.task(name="gather")
    def gather():
        return None

    wf = app.workflow("fan-in")
    parents = [wf.add(part, 0, name="quick"), wf.add(crunch)]
    parents += [wf.add(part.using(queue_name="slow"), n, name=f"wait-{n}") for n in range(1, 7)]
    merged = wf.add(gather, after=parents, name="merge")
    wf.add(gather, after=[merged], name="report")
    run = wf.enqueue()
    app.run_until_empty(queues=["default"])  # quick; merge and report wait
    assert claim_as(app, "vm:7", "crunch").id == run.job_ids["crunch"]
    return run


# The command line.
def test_workflow_command_shows_the_run_as_a_tree_and_workflows_lists_it(app, tmp_path, database_url):
    run = failed_run(app)
    cli = Cli(tmp_path, database_url)
    shown = cli.run("workflow", APP, str(run.id)).stdout
    lines = shown.splitlines()
    assert lines[0] == f"workflow {run.id}  nightly"
    flat = " ".join(shown.split())
    assert "status failed" in flat and "progress 6 of 6 steps done: 4 done, 1 failed, 1 cancelled" in flat
    table = lines[lines.index("steps") + 1:]
    assert table[0].split() == ["STEP", "JOB", "STATUS", "ATTEMPT", "FINISHED", "AFTER", "RESULT", "/", "ERROR"]
    rows = {line.split()[0]: line for line in table[1:]}
    assert set(rows) == {"orders", "refunds", "check", "merge", "notify", "undo"}
    # Indented by dependency: check under orders, merge under check (its last parent), notify under merge.
    indent = {name: len(line) - len(line.lstrip()) for name, line in rows.items()}
    assert indent["orders"] == indent["refunds"] == 2
    assert indent["check"] == 4 and indent["merge"] == 6 and indent["notify"] == indent["undo"] == 8
    assert f" {run.job_ids['orders']} " in rows["orders"] and " done " in rows["orders"]
    assert '{"rows": 6}' in rows["orders"]
    assert " failed " in rows["check"] and "1/1" in rows["check"] and "PermanentError: totals differ" in rows["check"]
    assert " cancelled " in rows["merge"] and "after orders, refunds, check " in rows["merge"]
    assert "parent check failed" in rows["merge"]
    assert "when finished" in rows["notify"] and '"ops"' in rows["notify"] and "when failed" in rows["undo"]

    data = json.loads(leased("workflow", "--database", database_url, str(run.id), "--json").stdout)
    assert (data["status"], data["progress"], data["total"]) == ("failed", "6 of 6 steps done", 6)
    merge = next(step for step in data["steps"] if step["name"] == "merge")
    assert merge["cancelled_by_parents"] is True and merge["parents"] == ["orders", "refunds", "check"]

    listed = leased("workflows", "--database", database_url).stdout.splitlines()
    assert listed[0].split() == ["ID", "NAME", "STATUS", "PROGRESS", "STEPS", "CREATED"]
    assert listed[1].split()[:7] == [str(run.id), "nightly", "failed", "6", "of", "6", "steps"]
    assert "4 done, 1 failed, 1 cancelled" in listed[1]
    assert leased("workflows", "--database", database_url, "--name", "other").stdout.strip() == "no workflows match"
    paged = leased("workflows", "--database", database_url, "--limit", "1", "--json")
    assert [info["id"] for info in json.loads(paged.stdout)] == [run.id]
    paged = leased("workflows", "--database", database_url, "--limit", "1")
    assert paged.stderr.strip() == f"(first 1; next page: --before-id {run.id})"


def test_workflow_retry_cancel_and_an_unknown_id(app, tmp_path, database_url):
    run = failed_run(app)
    db = ("--database", database_url)
    retried = leased("workflow", *db, str(run.id), "--retry").stdout.splitlines()
    assert retried == [f"workflow {run.id} (nightly): 1 failed step retried; the steps their failure cancelled "
                       f"wait again", "now running: 4 of 6 steps done"]
    assert app.get_job(run.job_ids["check"]).status is JobStatus.PENDING
    assert app.get_job(run.job_ids["merge"]).status is JobStatus.WAITING
    cancelled = leased("workflow", *db, str(run.id), "--cancel").stdout.splitlines()
    assert cancelled == [f"workflow {run.id} (nightly): 2 steps cancelled", "now cancelled: 6 of 6 steps done"]
    assert leased("workflow", *db, str(run.id), "--cancel").stdout.startswith(
        f"workflow {run.id} (nightly): nothing to cancel: every step has ended")

    # As other not-found errors: one line on stderr, exit status 1.
    assert Cli(tmp_path, database_url).error("workflow", APP, "999999") == "error: no workflow with id 999999"
    assert leased("workflow", *db, "999999", "--retry", code=1).stderr == "error: no workflow with id 999999\n"
    assert leased("workflow", *db, "abc", code=1).stderr == "error: a workflow id is a whole number, got 'abc'\n"
    assert "give --retry or --cancel, not both" in leased("workflow", *db, str(run.id), "--retry", "--cancel",
                                                          code=2).stderr


def test_the_tree_puts_a_step_under_its_last_parent_in_dependency_order():
    """A step added at run time makes its adder's children wait for it: a parent with a higher job id."""
    def step(name: str, job_id: int, *parents: str) -> StepInfo:
        return StepInfo(name, job_id, "t", "default", JobStatus.WAITING, RunWhen.SUCCEEDED, parents, len(parents),
                        0, 3, datetime.now(UTC), None)

    steps = [step("fan", 1), step("sum", 2, "fan", "part-2"), step("part-1", 3, "fan"), step("part-2", 4, "fan")]
    rows = [(row.depth, row.step.name, row.others) for row in step_tree(steps)]
    assert rows == [(0, "fan", ()), (1, "part-1", ()), (1, "part-2", ()), (2, "sum", ("fan",))]


# Why.
def test_why_a_waiting_step_names_the_parents_it_waits_for(app):
    run = waiting_run(app)
    ids = run.job_ids
    crunch = app.get_job(ids["crunch"])
    why = app.why(ids["merge"])
    assert why.status is JobStatus.WAITING
    assert why.summary == f"Job {ids['merge']} (gather on queue default, a step of workflow {run.id}) is waiting."
    waiting, ended, ask = why.reasons
    assert waiting.code == "waiting_for_parents"
    assert waiting.message == (
        f"Waiting for 7 of its 8 parents: job {ids['crunch']} crunch (running attempt 1 of 3 on worker vm:7, lease "
        f"until {utc(crunch.lease_expires_at)}), job {ids['wait-1']} wait-1 (pending, due now), job {ids['wait-2']} "
        f"wait-2 (pending, due now), job {ids['wait-3']} wait-3 (pending, due now), job {ids['wait-4']} wait-4 "
        f"(pending, due now), and 2 more; no worker takes it before then.")
    assert (waiting.data["parents"], waiting.data["waiting_for"]) == (8, 7)
    assert waiting.data["parents_waited_for"][0] == {
        "job_id": ids["crunch"], "name": "crunch", "status": "running", "worker_id": "vm:7",
        "lease_expires_at": crunch.lease_expires_at, "run_after": crunch.run_after, "attempt": 1, "max_attempts": 3}
    assert ended.message == "1 parent has ended: 1 done."
    assert ask.message == (f"`leased why APP {ids['crunch']}` says why parent crunch has not ended; "
                           f"`leased workflow APP {run.id}` shows the whole run.")
    # Without the parents (a caller of explain() that read no step facts): the run is named.
    alone = explain(app.backend.why_facts(ids["merge"])).reasons
    assert [reason.message for reason in alone] == [
        f"It waits for its parent steps in workflow {run.id} to end; no worker takes it before then. "
        f"`leased workflow APP {run.id}` shows the whole run."]
    assert app.why(ids["report"]).reasons[0].message == (
        f"Waiting for its parent: job {ids['merge']} merge (waiting for its own parents); no worker takes it "
        f"before then.")


def test_why_reads_a_steps_stored_facts_not_its_error_text(app):
    """Whether its parents cancelled a step, and whether it was a skipped compensation, come from its
    step row (cancelled_by_parents, run_when): not from last_error, which a person may write."""
    run = failed_run(app)
    merge, check = run.job_ids["merge"], run.job_ids["check"]
    raw_sql(app, f"UPDATE leased_jobs SET last_error = 'edited by hand' WHERE id = {merge}")
    assert [reason.code for reason in app.why(merge).reasons] == ["parent_failed", "retry_parent"]
    assert app.why(merge).reasons[0].data["parent_job_id"] == check
    # A step a person cancelled, whose error reads like a parent's cancellation, is a person's cancel.
    wf = app.workflow("by hand")
    only = wf.add(app.get_task("extract"), "x")
    step = wf.enqueue().job_ids[only.name]
    app.cancel(step)
    raw_sql(app, f"UPDATE leased_jobs SET last_error = 'a parent failed' WHERE id = {step}")
    assert "parent_failed" not in [reason.code for reason in app.why(step).reasons]


def test_why_a_step_its_parents_cancelled_names_the_parent_that_failed(app):
    run = failed_run(app)
    ids = run.job_ids
    why = app.why(ids["merge"])
    assert why.status is JobStatus.CANCELLED
    failed, retry = why.reasons
    assert failed.code == "parent_failed"
    assert failed.message.startswith("It was cancelled ") and failed.message.endswith(
        f"without running, because its parent job {ids['check']} check failed (PermanentError: totals differ); it "
        f"runs only once all of its parents have succeeded.")
    assert (failed.data["parent"], failed.data["parent_job_id"], failed.data["parent_status"]) == (
        "check", ids["check"], "failed")
    assert retry.message == (f"`leased workflow APP {run.id} --retry` retries the run's failed steps; the steps "
                             f"their failure cancelled, this one among them, wait for them again.")
    # A compensation step whose parents all succeeded is skipped, and says so.
    wf = app.workflow("fine")
    first = wf.add(app.get_task("extract"), "x")
    undo = wf.add(app.get_task("notify"), "undo", after=[first], when="failed", name="undo")
    fine = wf.enqueue()
    app.run_until_empty()
    skipped = app.why(fine.job_ids[undo.name]).reasons[0]
    assert skipped.code == "skipped" and "it runs only if one of its parents fails or is cancelled" in skipped.message
    # A parent a user cancelled: retrying that parent is what revives the step.
    wf = app.workflow("stopped")
    first = wf.add(app.get_task("extract"), "x")
    then = wf.add(app.get_task("merge"), after=[first])
    stopped = wf.enqueue()
    app.cancel(stopped.job_ids[first.name])
    cancelled, retry = app.why(stopped.job_ids[then.name]).reasons
    assert f"because its parent job {stopped.job_ids[first.name]} extract was cancelled;" in cancelled.message
    assert retry.message == (f"`leased retry APP {stopped.job_ids[first.name]}` runs parent extract again, and this "
                             f"step waits for it again.")


# The dashboard.
@pytest.fixture
def client(app):
    pytest.importorskip("starlette", reason="the dashboard needs the web extra: pip install -e '.[web]'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from leased.web import dashboard

    return TestClient(dashboard(app))


def test_dashboard_workflow_pages_and_their_retry_and_cancel(app, client):
    run = failed_run(app)
    ids = run.job_ids
    listed = client.get("/workflows").text
    assert '<a href="/workflows" aria-current="page">Workflows</a>' in listed
    assert f'<a href="/workflows/{run.id}"><bdi>nightly</bdi></a>' in listed and "6 of 6 steps done" in listed
    assert 'class="badge run-failed">failed</span>' in listed
    assert "No runs of a workflow named" in client.get("/workflows?name=other").text
    assert client.get("/workflows?before_id=x").status_code == 400

    page = client.get(f"/workflows/{run.id}")
    assert page.status_code == 200
    html = page.text
    assert '<rect class="bar-done" x="0.0" y="0" width="66.667"' in html and "4 done, 1 failed, 1 cancelled" in html
    names = re.findall(r'<tr data-step="([^"]+)">\s*<td data-label="Step" class="step-name depth-(\d+)">', html)
    assert names == [("orders", "0"), ("check", "1"), ("merge", "2"), ("notify", "3"), ("undo", "3"),
                     ("refunds", "0")]
    for name, job_id in ids.items():
        assert f'<a href="/jobs/{job_id}"><bdi>{name}</bdi></a>' in html
    assert "parent check failed" in html and "after orders, refunds, check" in html
    assert f'action="/workflows/{run.id}/retry"' in html and f'action="/workflows/{run.id}/cancel"' not in html
    step_page = client.get(f"/jobs/{ids['merge']}").text
    assert f'<a class="workflow-link" href="/workflows/{run.id}">Workflow {run.id}</a>' in step_page
    assert 'data-code="parent_failed"' in step_page
    assert "/workflows/" not in client.get("/jobs").text.split("<main", 1)[1]  # a plain page names none
    assert client.get("/workflows/999999").status_code == 404

    token = CSRF.search(html).group(1)
    assert client.post(f"/workflows/{run.id}/retry", data={}).status_code == 403  # no CSRF token: nothing done
    assert app.get_workflow(run.id).status is WorkflowStatus.FAILED
    response = client.post(f"/workflows/{run.id}/retry", data={"csrf_token": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/workflows/{run.id}"
    page = client.get(response.headers["location"]).text
    assert (f"1 failed step is pending again in workflow {run.id}; the steps their failure cancelled wait for them "
            f"again.") in page
    assert app.get_workflow(run.id).status is WorkflowStatus.RUNNING
    assert 'class="badge status-waiting">waiting</span>' in page and f'action="/workflows/{run.id}/cancel"' in page
    assert "1 of 3 parents left" in page
    waiting_step = client.get(f"/jobs/{ids['merge']}").text
    assert 'data-code="waiting_for_parents"' in waiting_step and f'action="/jobs/{ids["merge"]}/cancel"' in waiting_step

    page = client.post(f"/workflows/{run.id}/cancel", data={"csrf_token": token}).text
    assert f"2 unfinished steps of workflow {run.id} cancelled" in page
    assert app.get_workflow(run.id).status is WorkflowStatus.CANCELLED
    page = client.post("/workflows/999999/retry", data={"csrf_token": token}).text
    assert "Not retried: no workflow with id 999999" in page


def test_read_only_dashboard_has_no_workflow_buttons_and_refuses_their_posts(app):
    pytest.importorskip("starlette")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from leased.web import dashboard

    run = failed_run(app)
    client = TestClient(dashboard(app, read_only=True))
    assert "/retry" not in client.get(f"/workflows/{run.id}").text
    assert client.post(f"/workflows/{run.id}/retry", data={"csrf_token": "x"}).status_code == 403
    assert app.get_workflow(run.id).status is WorkflowStatus.FAILED


# Metrics.
def test_metrics_count_waiting_steps_and_recent_workflows_by_status(app):
    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from leased.metrics import database_registry

    failed_run(app)
    waiting_run(app)
    text = prometheus_client.generate_latest(database_registry(app)).decode()
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(text) for sample in family.samples}
    assert samples[("leased_jobs", (("queue", "default"), ("status", "waiting")))] == 2  # merge and report
    recent = {status: samples[("leased_recent_workflows", (("status", status),))] for status in WorkflowStatus}
    assert recent == {"running": 1, "succeeded": 0, "failed": 1, "cancelled": 0}
    assert "latest 1,000 runs only" in text


def test_a_runs_status_follows_one_rule_for_every_shape_and_reads_alike_everywhere(app, client, database_url):
    """A batch whose then= step succeeded was shown failed, though tolerating its members'
    failures is a batch's point. One rule (leased.runs.workflow_status), judged by the run's ends,
    for each shape; the Python API, `leased workflows`, `leased workflow` and both dashboard pages
    show what it decides."""

    @app.task(name="ok")
    def ok(x=0):
        return x

    @app.task(name="broken", max_attempts=1)
    def broken(x=0):
        raise PermanentError("no")

    @app.task(name="tally", takes_context=True)
    def tally(context):
        return [context.batch.succeeded, context.batch.failed]

    @app.task(name="strict", takes_context=True, max_attempts=1)
    def strict(context):
        if context.batch.failed:
            raise PermanentError(f"{context.batch.failed} member(s) failed")

    expected = {}
    wf = app.workflow("plain")
    wf.add(ok, after=[wf.add(broken)])
    expected[wf.enqueue().id] = "failed"
    wf = app.workflow("chain")
    wf.chain(ok, broken, ok)
    expected[wf.enqueue().id] = "failed"
    wf = app.workflow("batch-tolerant")
    wf.batch(ok, [(1,), (2,)], then=tally)
    wf.batch(broken, [(3,)], then=tally, name="more")
    expected[wf.enqueue().id] = "succeeded"
    wf = app.workflow("batch-strict")
    wf.batch(broken, [(1,)], then=strict)
    expected[wf.enqueue().id] = "failed"
    wf = app.workflow("compensated")
    charge = wf.add(broken)
    wf.add(ok, after=[charge], when="failed", name="refund")
    expected[wf.enqueue().id] = "failed"
    wf = app.workflow("no-compensation")
    charge = wf.add(ok)
    wf.add(ok, after=[charge], when="failed", name="refund")
    expected[wf.enqueue().id] = "succeeded"
    app.run_until_empty()
    wf = app.workflow("stopped")
    wf.add(ok, after=[wf.add(ok)])
    stopped = wf.enqueue().id
    app.cancel_workflow(stopped)
    expected[stopped] = "cancelled"

    assert {run_id: app.get_workflow(run_id).status.value for run_id in expected} == expected
    assert {info.id: info.status.value for info in app.list_workflows()} == expected
    listed = leased("workflows", "--database", database_url).stdout.splitlines()[1:]
    assert {int(line.split()[0]): line.split()[2] for line in listed} == expected
    for run_id, status in expected.items():
        shown_json = json.loads(leased("workflow", "--database", database_url, str(run_id), "--json").stdout)
        assert shown_json["status"] == status
        assert f'class="badge run-{status}">{status}</span>' in client.get(f"/workflows/{run_id}").text
    rows = client.get("/workflows").text.split('<tr')[2:]
    shown = {int(re.search(r'href="/workflows/(\d+)"', row).group(1)):
             re.search(r'class="badge run-(\w+)"', row).group(1)
             for row in rows}
    assert shown == expected


def test_the_after_note_counts_every_parent_in_the_cli_and_on_the_dashboard(app, client, database_url):
    """"after plan, resize-1 +3 more" for six parents left out the one the tree indents the step
    under; "also after ..." still asked the reader to add it. The note says the count."""

    @app.task(name="part")
    def part(n=0):
        return n

    wf = app.workflow("fan-in")
    parts = [wf.add(part, n, name=f"part-{n}") for n in range(6)]
    wf.add(part, after=parts, name="join")
    wf.add(part, after=parts[:2], name="pair")
    run = wf.enqueue()
    app.run_until_empty()
    shown = leased("workflow", "--database", database_url, str(run.id)).stdout
    rows = {line.split()[0]: line for line in shown.splitlines() if line.strip().startswith(("join", "pair"))}
    assert "after 6 steps: part-0, part-1 +4 more" in rows["join"]
    assert "after part-0, part-1" in rows["pair"] and "more" not in rows["pair"]
    page = client.get(f"/workflows/{run.id}").text
    assert "after 6 steps: part-0, part-1 +4 more" in page and "also after" not in page


def test_the_workflow_page_draws_the_run_as_a_graph_above_the_table(app, client):
    """The workflow page was a flat table: a fan-out and fan-in showed no shape. It draws the steps
    as nodes coloured by status, edges from each step to those that wait for it, and a fan-out of
    more than graph.FAN_OUT_SHOWN alike steps as one node with their counts; the table stays below."""

    @app.task(name="part", max_attempts=1)
    def part(n=0):
        if n == 99:
            raise PermanentError("no")
        return n

    @app.task(name="tally", takes_context=True)
    def tally(context):
        return context.batch.succeeded

    wf = app.workflow("album")
    first = wf.add(part, 0, name="first")
    _, many = wf.batch(part, [(n,) for n in [*range(1, 12), 99]], then=tally)
    wf.add(part, 5, after=[first, many], name="last")
    wf.batch(part, [(1,), (2,), (3,)], then=tally, name="few")
    run = wf.enqueue()
    app.run_until_empty()

    html = client.get(f"/workflows/{run.id}").text
    assert html.index('<figure class="graph">') < html.index("<h2>Steps</h2>") < html.index('<tr data-step="first">')
    graph = html[html.index('<figure class="graph">'):html.index("</figure>", html.index('<figure class="graph">'))]
    nodes = re.findall(r'<g class="graph-node node-(\w+)[^"]*" data-status="\w+" data-count="(\d+)">'
                       r'\s*<title>([^<]*)</title>', graph)
    assert sorted((status, int(count)) for status, count, _ in nodes) == [
        ("done", 1), ("done", 1), ("done", 1), ("done", 1), ("done", 1), ("done", 1), ("done", 1), ("failed", 12)]
    group = next(title for status, count, title in nodes if count == "12")
    assert group == "12 steps, part-1 … part-12: 11 done, 1 failed"
    assert "part × 12" in graph and "11 done, 1 failed" in graph and "drawn as one node" in graph
    assert graph.count('class="graph-edge"') == 6  # the group to tally, first and tally to last, few-1..3 to tally-2
    steps = steps_of_run(app, run.id)
    assert f'href="/jobs/{steps["last"].job_id}"' in graph and f'href="/jobs/{steps["part-1"].job_id}"' not in graph
    assert app.get_workflow(run.id).status is WorkflowStatus.SUCCEEDED

    @app.task(name="plan", takes_context=True)
    def plan(context, n):
        return [context.workflow.add(part, i) for i in range(n)]

    wf = app.workflow("planned")
    wf.add(tally, after=[wf.add(plan, 7)], when="finished")
    run = wf.enqueue()
    app.run_until_empty()
    html = client.get(f"/workflows/{run.id}").text
    # The added steps are drawn after their adder, a dashed arrow from it, and hold back tally.
    xs = {name: int(x) for x, name in re.findall(r'<rect x="(\d+)".*?<text[^>]*class="graph-label">([^<]+)</text>',
                                                 html, flags=re.S)}
    assert xs["plan"] < xs["part × 7"] < xs["tally"]
    assert html.count('class="graph-edge graph-added"') == 1 and html.count('class="graph-edge"') == 2
    assert "A dashed arrow leads from a step to the steps it added while it ran." in html


def steps_of_run(app, run_id):
    return {step.name: step for step in app.get_workflow(run_id).steps}
