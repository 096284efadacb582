"""The dashboard in a real headless Chromium, against a real worker, on SQLite.

uvicorn serves the dashboard on a free loopback port in a thread; a worker runs in another thread
on the same database. Every wait is on page content or on an event the handler sets, never a sleep.

Chromium comes from Debian (`apt-get install chromium`), driven through Playwright's Python API
without Playwright's own browser download. Without /usr/bin/chromium the tests skip, unless
LEASED_REQUIRE_BROWSER=1 (CI sets it) makes that a failure.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import running_worker, wait_for

from leased import Leased, TaskContext

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 20_000


def _browser_problem() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    for module in ("playwright", "uvicorn", "starlette"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e . --group test)"
    return None


_PROBLEM = _browser_problem()
if _PROBLEM:
    if os.environ.get("LEASED_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"LEASED_REQUIRE_BROWSER=1 but {_PROBLEM}")
    pytest.skip(_PROBLEM, allow_module_level=True)

from playwright.sync_api import Page, expect, sync_playwright

from leased.web import dashboard
from leased.web.server import listen, url

pytestmark = pytest.mark.system


class Scenario:
    """An app whose handlers the test steers: `flaky` fails until allowed, `patient` waits to be cancelled."""

    def __init__(self, database_url: str):
        self.app = Leased(database_url)
        self.allow_success = threading.Event()
        self.patient_started = threading.Event()
        self.patient_stopped = threading.Event()

        @self.app.task(name="flaky", max_attempts=1)
        def flaky(order_id: str) -> str:
            if not self.allow_success.is_set():
                raise RuntimeError(f"payment service unavailable for {order_id}")
            return f"charged {order_id}"

        @self.app.task(name="patient", takes_context=True, lease=1.5)
        def patient(context: TaskContext) -> None:
            self.patient_started.set()
            if context.cancelled.wait(timeout=60):
                self.patient_stopped.set()  # the handler saw the cancellation and returns

        self.flaky, self.patient = flaky, patient


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def scenario(tmp_path) -> Iterator[Scenario]:
    scenario = Scenario(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield scenario
    scenario.allow_success.set()
    scenario.app.close()


@pytest.fixture
def server(scenario) -> Iterator[str]:
    """The dashboard on a free loopback port, refreshing every half second; yields its URL."""
    import uvicorn

    sock = listen("127.0.0.1", 0)
    config = uvicorn.Config(dashboard(scenario.app, refresh_seconds=0.5), log_level="warning", lifespan="off")
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, name="test-dashboard")
    thread.start()
    wait_for(lambda: uvicorn_server.started or not thread.is_alive(), message="dashboard start")
    assert thread.is_alive(), "the dashboard did not start"
    try:
        yield url(sock)
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def page(browser, server) -> Iterator[Page]:
    context = browser.new_context(base_url=server, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()


def test_find_a_failed_job_retry_it_and_watch_it_finish(scenario, page):
    failed = scenario.flaky.enqueue("o-17")
    for n in range(3):
        scenario.flaky.using(queue_name="mail").enqueue(f"m-{n}")
    with running_worker(scenario.app, concurrency=2, shutdown_grace=1.0):
        wait_for(lambda: scenario.app.counts().get("default", {}).get("failed") == 1, message="the failure")

        page.goto("/")
        expect(page.locator("h1")).to_have_text("Overview")
        expect(page.locator("table").first).to_contain_text("default")
        expect(page.locator("table").nth(1)).to_contain_text("alive")  # the worker checked in

        page.get_by_role("link", name="Jobs", exact=True).click()
        page.get_by_label("Queue").select_option("default")  # the filters apply themselves
        expect(page).to_have_url(re.compile(r"queue=default"))
        page.get_by_label("Status").select_option("failed")
        expect(page).to_have_url(re.compile(r"status=failed"))
        rows = page.locator("table.jobs tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("payment service unavailable for o-17")

        rows.first.get_by_role("link", name=str(failed.id)).click()
        expect(page.locator("h1")).to_contain_text(f"Job {failed.id}")
        expect(page.locator("h1 .badge")).to_have_text("failed")
        page.get_by_text("Traceback", exact=True).click()
        expect(page.locator("details.traceback pre")).to_contain_text("RuntimeError: payment service unavailable")
        expect(page.locator("#live-label")).to_have_text("Held: traceback open")
        page.get_by_text("Traceback", exact=True).click()

        scenario.allow_success.set()
        page.get_by_role("button", name="Retry").click()
        expect(page.locator(".flash-ok")).to_contain_text(f"Job {failed.id} (flaky) is pending again")
        # The page refreshes itself: no reload, the worker's result appears.
        expect(page.locator("h1 .badge")).to_have_text("done")
        expect(page.locator("pre.json").last).to_have_text('"charged o-17"')
        expect(page.locator("table.attempts tbody tr")).to_have_count(2)


def test_cancel_a_running_job_and_its_handler_stops(scenario, page):
    job = scenario.patient.enqueue()
    with running_worker(scenario.app, concurrency=1, shutdown_grace=1.0):
        assert scenario.patient_started.wait(timeout=30)
        page.goto(f"/jobs/{job.id}")
        expect(page.locator("h1 .badge")).to_have_text("running")
        page.once("dialog", lambda dialog: dialog.accept())  # "Cancel job N? Its handler will be stopped."
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator(".flash-ok")).to_contain_text(f"Job {job.id} (patient) is cancelled. Its worker")
        assert scenario.patient_stopped.wait(timeout=30), "the handler was not told to stop"
        expect(page.locator("h1 .badge")).to_have_text("cancelled")
        expect(page.locator("table.attempts tbody tr").first).to_contain_text("cancelled")
        expect(page.get_by_role("button", name="Retry")).to_be_visible()


def test_a_declined_confirmation_cancels_nothing(scenario, page):
    job = scenario.patient.enqueue()
    with running_worker(scenario.app, concurrency=1, shutdown_grace=1.0):
        assert scenario.patient_started.wait(timeout=30)
        page.goto(f"/jobs/{job.id}")
        clicked_at = page.evaluate("Date.now()")
        page.once("dialog", lambda dialog: dialog.dismiss())
        page.get_by_role("button", name="Cancel").click()
        # A live update after the click proves the page stayed: a submitted form would have navigated.
        page.wait_for_function("since => Number(document.body.dataset.refreshedAt || 0) > since", arg=clicked_at)
        expect(page.locator(".flash")).to_have_count(0)
        expect(page.locator("h1 .badge")).to_have_text("running")
        assert scenario.app.get_job(job.id).status == "running"
        scenario.app.cancel(job.id)  # let the worker stop promptly


def test_the_workers_page_shows_the_job_a_worker_holds_and_leads_to_its_jobs(scenario, page):
    job = scenario.patient.enqueue()
    with running_worker(scenario.app, concurrency=1, shutdown_grace=1.0) as worker:
        assert scenario.patient_started.wait(timeout=30)
        page.goto("/")
        page.get_by_role("link", name="Workers", exact=True).click()
        expect(page.locator("h1")).to_have_text("Workers")
        row = page.locator(f'tr[data-worker="{worker.id}"]')
        expect(row.locator(".badge.alive")).to_have_text("alive")
        expect(row.get_by_role("link", name=f"patient {job.id}")).to_be_visible()  # the job it holds now

        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the row is a card, nothing overflows
        expect(row.get_by_role("link", name="jobs this worker ran")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.set_viewport_size({"width": 1280, "height": 900})

        row.get_by_role("link", name="jobs this worker ran").click()
        expect(page).to_have_url(re.compile(r"/jobs\?worker="))
        expect(page.get_by_label("Worker")).to_have_value(worker.id)  # the filter form shows it
        rows = page.locator("table.jobs tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("patient")
        scenario.app.cancel(job.id)  # let the worker stop promptly


def test_pause_a_queue_see_the_badge_and_resume_it(scenario, page):
    scenario.flaky.using(queue_name="mail").enqueue("m-1")
    page.goto("/")
    row = page.locator("table.queues tbody tr", has_text="mail")
    page.once("dialog", lambda dialog: dialog.accept())  # "Pause queue mail? Workers stop claiming ..."
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash-ok")).to_contain_text("Queue mail is paused")
    expect(row.locator(".badge.status-paused")).to_have_text("paused")
    assert scenario.app.paused_queues() == ["mail"]

    page.set_viewport_size({"width": 390, "height": 844})  # a phone: the row is a card, nothing overflows
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    row.get_by_role("button", name="Resume").click()  # no confirmation: resuming loses nothing
    expect(page.locator(".flash-ok")).to_contain_text("Queue mail runs again")
    expect(row.locator(".badge.status-paused")).to_have_count(0)
    expect(row.get_by_role("button", name="Pause")).to_be_visible()
    assert scenario.app.paused_queues() == []


def test_the_workflow_page_draws_the_graph_in_status_colours_above_the_table(scenario, page, tmp_path):
    app = scenario.app

    @app.task(name="part", max_attempts=1)
    def part(n: int = 0) -> int:
        if n == 99:
            raise RuntimeError("bad part")
        return n

    @app.task(name="tally", takes_context=True)
    def tally(context: TaskContext) -> int:
        return context.batch.succeeded

    wf = app.workflow("album")
    first = wf.add(part, 0, name="first")
    _, then = wf.batch(part, [(n,) for n in [*range(1, 12), 99]], then=tally)
    wf.add(part, 5, after=[first, then], name="last")
    run = wf.enqueue()
    drain = threading.Thread(target=app.run_until_empty)  # Playwright's loop holds this thread's asyncio
    drain.start()
    drain.join()

    page.goto(f"/workflows/{run.id}")
    graph = page.locator("figure.graph svg")
    expect(graph).to_be_visible()
    expect(page.locator("figure.graph .graph-node")).to_have_count(4)
    assert graph.bounding_box()["y"] < page.locator("table.steps").bounding_box()["y"]
    fill = "node => getComputedStyle(node.querySelector('rect')).fill"
    done = page.locator('.graph-node[data-status="done"]').first.evaluate(fill)
    failed = page.locator(".graph-node.node-group").evaluate(fill)
    assert done != failed and "rgba(0, 0, 0, 0)" not in (done, failed)  # each drawn in its status colour
    expect(page.locator(".graph-node.node-group")).to_contain_text("part × 12")
    expect(page.locator("path.graph-edge")).to_have_count(3)
    page.screenshot(path=str(tmp_path / "workflow.png"), full_page=True)  # for a person to look at on failure
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: the graph scrolls in its frame, the page does not
    expect(graph).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1280, "height": 900})
    page.locator(".graph-node", has_text="last").locator("a").click()
    expect(page.locator("h1")).to_contain_text(f"Job {run.job_ids['last']}")
