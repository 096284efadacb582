"""The dashboard through its ASGI interface (Starlette's TestClient), on every backend.

Pages, filters, keyset pages and search; actions with their CSRF token and confirmation; what a
request without the token, in read-only mode or without the dashboard token must not be able to
do; escaping of what comes from the database; /metrics; and the `leased dashboard` command.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import warnings

import pytest
from conftest import wait_for
from two_workers import one_ran_jobs_another_holds_one

pytest.importorskip("starlette", reason="the dashboard needs the web extra: pip install -e '.[web]'")

with warnings.catch_warnings():
    # Starlette 1.x prefers the httpx2 package and warns about plain httpx; either serves these tests.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from leased import JobStatus, Leased
from leased.web import dashboard
from leased.web import server
from leased.web.server import is_loopback

MARKUP = "<script>alert('pwned')</script>"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def setup_jobs(app: Leased) -> dict[str, list[int]]:
    """25 done `add` jobs, 3 failed `boom` jobs (one on queue mail), 2 pending `later` ones, 1 cancelled."""

    @app.task(name="add")
    def add(a, b):
        return {"sum": a + b}

    @app.task(name="boom", max_attempts=1)
    def boom(note):
        raise ValueError(f"kaboom {MARKUP}")

    done = [add.enqueue(n, 1).id for n in range(25)]
    failed = [boom.enqueue(MARKUP).id, boom.enqueue("two").id, boom.using(queue_name="mail").enqueue("three").id]
    app.run_until_empty()
    # A job whose handler no worker here has stays pending: nothing runs it behind the test's back.
    later = app.task(name="later")(lambda: None)
    pending = [later.using(idempotency_key=f"later:{n}").enqueue().id for n in range(2)]
    cancelled = later.enqueue().id
    app.cancel(cancelled)
    return {"done": done, "failed": failed, "pending": pending, "cancelled": [cancelled]}


@pytest.fixture
def jobs(app) -> dict[str, list[int]]:
    return setup_jobs(app)


@pytest.fixture
def client(app, jobs) -> TestClient:
    return TestClient(dashboard(app))


def test_the_pages_name_the_app_in_the_commands_they_suggest(app, jobs):
    named = TestClient(dashboard(app, command_app="shop.jobs:app"))  # as `leased dashboard shop.jobs:app` serves it
    assert "<code>leased worker shop.jobs:app</code>" in named.get("/").text  # before: leased worker APP
    page = named.get(f"/jobs/{jobs['pending'][0]}").text
    assert "leased worker shop.jobs:app" in page and "leased worker APP" not in page
    assert "<code>leased worker APP</code>" in TestClient(dashboard(app)).get("/").text  # mounted: no APP known


def snapshot(app: Leased) -> list[tuple]:
    return [(job.id, job.status, job.attempt, job.run_after) for job in app.list_jobs(limit=1000)]


def csrf_token(client: TestClient, url: str = "/jobs?status=failed&task=boom") -> str:
    match = CSRF.search(client.get(url).text)
    assert match, f"no CSRF token on {url}"
    return match.group(1)


def listed_ids(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<td class="num" data-label="ID"><a href="/jobs/(\d+)"', html)]


def flat(pages: list[list[int]]) -> list[int]:
    return [job_id for page in pages for job_id in page]


# Pages.
def test_overview_shows_queues_counts_and_recent_activity(client, app):
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    assert "default" in html and "mail" in html
    assert '?queue=default&amp;status=done">25</a>' in html
    assert '?queue=default&amp;status=failed">2</a>' in html
    assert '?queue=mail&amp;status=failed">1</a>' in html
    assert "Done, last hour" in html
    assert "<th>Limit</th>" in html
    app.limit("mail", concurrency=2, rate_limit="10/s")
    assert "concurrency 2, rate 10/s" in client.get("/").text
    assert "no-store" in page.headers["cache-control"]
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_overview_groups_the_processes_of_a_supervisor_under_it_and_its_host(client, app):
    from leased.backends.ports import WorkerRecord

    for worker_id, pid in (("web-1:4200/4243:bbbbbbbb", 4243), ("web-1:4200/4242:aaaaaaaa", 4242),
                           ("web-1:5000:cccccccc", 5000), ("web-2:4200/4300:dddddddd", 4300)):
        app.backend.register_worker(WorkerRecord(worker_id, worker_id.split(":")[0], pid, 1, None, ("add",)))
    html = client.get("/").text
    headings = re.findall(r'<tr class="worker-group"><th colspan="7" scope="rowgroup">(.*?)</th></tr>', html, re.S)
    assert [" ".join(heading.split()) for heading in headings] == [
        "supervisor 4200 on web-1: 2 of 2 processes alive", "supervisor 4200 on web-2: 1 of 1 processes alive"]
    rows = re.findall(r'<code class="worker-id"><bdi>([^<]+)</bdi></code>', html)
    assert rows == ["web-1:4200/4242:aaaaaaaa", "web-1:4200/4243:bbbbbbbb", "web-1:5000:cccccccc",
                    "web-2:4200/4300:dddddddd"]


def test_workers_page_shows_the_jobs_each_worker_holds_and_links_the_jobs_it_ran(app):
    client = TestClient(dashboard(app))
    assert "No worker has checked in" in client.get("/workers").text
    with one_ran_jobs_another_holds_one(app, count=3) as workers:
        wait_for(lambda: [w for w in app.workers() if w.running == 1], message="the held job in the worker's row")
        html = client.get("/workers").text
    first, second, held = workers.first.id, workers.second.id, workers.held
    assert '<a href="/workers" aria-current="page">Workers</a>' in html
    rows = dict(re.findall(r'<tr class="[^"]*" data-worker="([^"]+)">(.*?)</tr>', html, re.S))
    assert set(rows) == {second}, "a worker that stopped signed off"
    assert f'<a href="/jobs/{held}"><bdi>block</bdi> {held}</a>' in rows[second]
    link = re.search(r'<a href="(/jobs\?worker=[^"]+)">jobs this worker ran</a>', rows[second]).group(1)
    assert listed_ids(client.get(link.replace("&amp;", "&")).text) == [held]
    jobs_page = client.get("/jobs", params={"worker": first}).text
    assert listed_ids(jobs_page) == workers.ran[::-1]
    assert f'name="worker" value="{first}"' in jobs_page  # shown in the filter form, with Clear
    assert 'class="button quiet" href="/jobs">Clear</a>' in jobs_page
    assert listed_ids(client.get("/jobs", params={"worker": first, "status": "running"}).text) == []


def test_workers_page_warns_of_one_task_name_with_two_signatures(app):
    from leased.backends.ports import WorkerRecord

    for worker_id, signature in (("shop:1:a", "(order_id: int)"), ("fastapi:2:b", "(user: str, amount: int)")):
        app.backend.register_worker(WorkerRecord(worker_id, "host-1", 1, 1, None, ("send_receipt",),
                                                 task_signatures=json.dumps({"send_receipt": signature})))
    html = TestClient(dashboard(app)).get("/workers").text
    (warning,) = re.findall(r'<p class="notice warn" role="alert" data-signature-clash="send_receipt">(.*?)</p>',
                            html, re.S)
    assert ("task send_receipt has two signatures among live workers: (order_id: int) on worker shop:1:a, "
            "(user: str, amount: int) on worker fastapi:2:b.") in warning
    assert "queues of its own" in warning and "a schema or database per app" in warning


def test_overview_draws_throughput_that_survives_pruning(client, app):
    html = client.get("/").text
    assert "<h2>Throughput</h2>" in html and "<svg" in html and 'class="bar-done"' in html
    assert '<span class="tone-done">25 done</span>' in html
    app.prune(older_than="1ms")
    assert app.counts()["default"]["done"] == 0
    html = client.get("/").text
    assert '<span class="tone-done">25 done</span>' in html and 'class="bar-failed"' in html


def test_pause_and_resume_buttons(app, client, jobs):
    html = client.get("/").text
    assert 'action="/queues/mail/pause"' in html and "badge status-paused" not in html
    response = client.post("/queues/mail/pause", data={"csrf_token": csrf_token(client)}, follow_redirects=True)
    assert "Queue mail is paused" in response.text and 'action="/queues/mail/resume"' in response.text
    assert "badge status-paused" in response.text
    assert app.paused_queues() == ["mail"]
    response = client.post("/queues/nowhere/pause", data={"csrf_token": csrf_token(client)}, follow_redirects=True)
    assert "Not paused: unknown queue &#39;nowhere&#39;" in response.text
    assert client.post("/queues/mail/resume", data={"csrf_token": "forged"}).status_code == 403
    assert app.paused_queues() == ["mail"]
    response = client.post("/queues/mail/resume", data={"csrf_token": csrf_token(client)}, follow_redirects=True)
    assert "Queue mail runs again" in response.text and app.paused_queues() == []


def test_job_page_shows_payload_result_and_every_attempt(client, app, jobs):
    done = client.get(f"/jobs/{jobs['done'][3]}").text
    assert "<pre class=\"json\"><bdi>[\n  3,\n  1\n]</bdi></pre>" in done
    assert "&#34;sum&#34;: 4" in done  # the result, pretty and escaped
    failed = client.get(f"/jobs/{jobs['failed'][1]}").text
    assert 'badge status-failed' in failed and 'outcome-error' in failed
    assert '<details class="traceback">' in failed and "Traceback (most recent call last)" in failed
    assert "Retry" in failed and f'action="/jobs/{jobs["failed"][1]}/retry"' in failed
    assert client.get("/jobs/999999").status_code == 404
    assert client.get(f"/jobs/{2**64}").status_code == 404


def test_job_page_says_why_the_job_is_where_it_is(client, jobs):
    failed = client.get(f"/jobs/{jobs['failed'][1]}").text
    assert '<section class="panel why">' in failed
    assert ('<li data-code="attempts_exhausted">It used its only attempt, which failed with '
            '<bdi>ValueError: kaboom') in failed
    assert f"<code>leased retry APP {jobs['failed'][1]}</code>" in failed
    pending = client.get(f"/jobs/{jobs['pending'][0]}").text
    assert '<li data-code="no_workers">No live worker: none has announced itself' in pending


def test_filters_and_search(client, jobs):
    assert sorted(listed_ids(client.get("/jobs?status=failed").text)) == jobs["failed"]
    assert listed_ids(client.get("/jobs?status=failed&queue=mail").text) == [jobs["failed"][2]]
    assert sorted(listed_ids(client.get("/jobs?task=later").text)) == jobs["pending"] + jobs["cancelled"]
    assert listed_ids(client.get(f"/jobs?q={jobs['done'][7]}").text) == [jobs["done"][7]]
    assert listed_ids(client.get("/jobs?q=later:1").text) == [jobs["pending"][1]]
    assert listed_ids(client.get("/jobs?q=nothing-like-this").text) == []
    assert client.get("/jobs?status=bogus").status_code == 400
    assert client.get("/jobs?before_id=abc").status_code == 400


def test_keyset_pages_walk_every_job_once_both_ways(app, client, jobs):
    more = app.get_task("add")
    for n in range(90):
        more.enqueue(n, n)
    every = sorted(job.id for job in app.list_jobs(limit=1000))
    assert len(every) > 100  # three pages of 50

    def walk(url: str, rel: str) -> list[list[int]]:
        pages = []
        while url:
            html = client.get(url).text
            pages.append(listed_ids(html))
            link = re.search(rf'href="(\?[^"]*)" rel="{rel}"', html)
            url = "/jobs" + link.group(1).replace("&amp;", "&") if link else None
        return pages

    newest = walk("/jobs", "next")
    assert [len(page) for page in newest] == [50, 50, len(every) - 100]
    assert flat(newest) == every[::-1]
    assert flat(walk("/jobs?order=oldest", "next")) == every
    # Back towards the newest from a deep page: each page still newest first, none skipped or repeated.
    back = walk(f"/jobs?before_id={every[10]}", "prev")
    assert back[0] == every[9::-1] and back[1] == every[59:9:-1]
    assert sorted(flat(back)) == every


# Actions.
def test_retry_shows_a_confirmation_and_the_job_is_pending(app, client, jobs):
    job_id = jobs["failed"][0]
    response = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": csrf_token(client)}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/{job_id}"
    assert app.get_job(job_id).status == JobStatus.PENDING
    page = client.get(response.headers["location"]).text
    assert f"Job {job_id} (boom) is pending again" in page
    assert "is pending again" not in client.get(f"/jobs/{job_id}").text  # shown once


def test_cancel_and_refused_transitions_are_confirmed(app, client, jobs):
    job_id = jobs["pending"][0]
    token = csrf_token(client)
    page = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token}).text
    assert f"Job {job_id} (later) is cancelled." in page
    assert app.get_job(job_id).status == JobStatus.CANCELLED
    page = client.post(f"/jobs/{jobs['done'][0]}/retry", data={"csrf_token": token}).text
    assert "flash-error" in page and "Not retried" in page
    assert app.get_job(jobs["done"][0]).status == JobStatus.DONE


def test_a_sleeping_job_page_sends_the_signal_it_waits_for(app):
    @app.task(name="approval", takes_context=True)
    def approval(context):
        return context.wait_for("approved")

    job = approval.enqueue()
    app.run_until_empty()
    client = TestClient(dashboard(app))
    page = client.get(f"/jobs/{job.id}").text
    assert 'value="approved"' in page and "Its mailbox is empty." in page  # the form names what it waits for
    token = csrf_token(client, f"/jobs/{job.id}")
    refused = client.post(f"/jobs/{job.id}/signal", data={"csrf_token": token, "name": "approved", "payload": "{by"})
    assert "Not sent: the payload is not JSON" in refused.text and app.job_signals(job.id) == []
    sent = client.post(f"/jobs/{job.id}/signal",
                       data={"csrf_token": token, "name": "approved", "payload": '{"by": "ann"}'}).text
    assert f"Signal &#39;approved&#39; is in job {job.id}&#39;s mailbox" in sent
    # Woken, not yet run: why says its wait is over (before, it raised KeyError on the 'waited' outcome).
    assert any("ended in a wait (not counted), which is over" in reason.message for reason in app.why(job.id).reasons)
    app.run_until_empty()
    assert app.get_job(job.id).result == {"by": "ann"}
    page = client.get(f"/jobs/{job.id}").text
    assert "by attempt 2" in page and "Send signal" not in page  # listed, taken; a job that ended takes none


def test_retry_all_failed_jobs_of_a_task(app, client, jobs):
    listing = client.get("/jobs?status=failed&task=boom").text
    assert "Retry all failed boom jobs" in listing
    page = client.post("/jobs/retry-failed", data={"csrf_token": csrf_token(client), "task": "boom"}).text
    assert "3 failed jobs of task boom sent back to pending." in page
    assert all(app.get_job(job_id).status == JobStatus.PENDING for job_id in jobs["failed"])


@pytest.mark.parametrize("token", [None, "", "forged", "other session"])
def test_posts_without_a_valid_csrf_token_are_refused_and_change_nothing(app, client, jobs, token):
    if token == "other session":
        token = csrf_token(TestClient(dashboard(app)))  # valid, but for another visitor's cookie
    csrf_token(client)  # this visitor has a session cookie
    before = snapshot(app)
    data = {} if token is None else {"csrf_token": token}
    for url in (f"/jobs/{jobs['failed'][0]}/retry", f"/jobs/{jobs['pending'][0]}/cancel", "/jobs/retry-failed"):
        response = client.post(url, data={**data, "task": "boom"})
        assert response.status_code == 403, url
    assert snapshot(app) == before


def test_get_never_changes_anything(app, client, jobs):
    before = snapshot(app)
    for url in ("/", "/jobs", "/jobs?status=failed&task=boom", f"/jobs/{jobs['failed'][0]}", "/metrics",
                f"/jobs/{jobs['failed'][0]}/retry", f"/jobs/{jobs['pending'][0]}/cancel",
                "/jobs/retry-failed?task=boom"):
        assert client.get(url).status_code in (200, 405), url
    assert client.get(f"/jobs/{jobs['failed'][0]}/retry").status_code == 405
    assert snapshot(app) == before


def test_markup_from_the_database_is_shown_as_text(client, jobs):
    escaped = "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;"
    for url in (f"/jobs/{jobs['failed'][0]}", "/jobs?status=failed"):
        html = client.get(url).text
        assert MARKUP not in html and "<script>alert" not in html
        assert escaped in html  # in the payload, the error message and the traceback
    assert client.get(f"/jobs?q={MARKUP}").text.count("<script>alert") == 0


BIDI_OVERRIDE = "\u202e"


def text_outside_bdi(html: str) -> str:
    """The page's text that is not inside a <bdi> element. Attribute values (tooltips) and a select's
    options are left out: each is shown on its own, where an override reverses nothing else."""
    from html.parser import HTMLParser

    class Outside(HTMLParser):
        def __init__(self):
            super().__init__()
            self.depth, self.text = 0, []

        def handle_starttag(self, tag, attrs):
            self.depth += tag in ("bdi", "option")

        def handle_endtag(self, tag):
            self.depth -= tag in ("bdi", "option")

        def handle_data(self, data):
            if not self.depth:
                self.text.append(data)

    parser = Outside()
    parser.feed(html)
    return "".join(parser.text)


def test_text_from_jobs_is_isolated_so_a_bidi_override_cannot_reverse_the_page(app):
    # U+202E shows everything after it right to left, up to the end of the paragraph: the page's own
    # words after an error message too, unless the message is isolated (<bdi>).
    sneaky_text = "\x1b[2J\x07\u202eevil"

    @app.task(name="sneaky", max_attempts=1)
    def sneaky(note):
        raise ValueError(sneaky_text)

    job = sneaky.enqueue(sneaky_text)
    app.run_until_empty()
    client = TestClient(dashboard(app))
    for url in (f"/jobs/{job.id}", "/jobs", "/jobs?status=failed", "/"):
        html = client.get(url).text
        assert BIDI_OVERRIDE in html or url == "/", url
        assert BIDI_OVERRIDE not in text_outside_bdi(html), url
    page = client.get(f"/jobs/{job.id}").text
    assert f"<bdi>ValueError: {sneaky_text}</bdi>" in page


def test_read_only_has_no_buttons_and_refuses_posts(app, jobs):
    client = TestClient(dashboard(app, read_only=True))
    page = client.get(f"/jobs/{jobs['failed'][0]}").text
    assert "read-only" in page and 'method="post"' not in page
    assert 'method="post"' not in client.get("/jobs?status=failed&task=boom").text
    token = CSRF.search(TestClient(dashboard(app)).get("/jobs?status=failed&task=boom").text)  # even a real one
    assert 'method="post"' not in client.get("/").text  # no pause buttons either
    before = snapshot(app)
    for url in (f"/jobs/{jobs['failed'][0]}/retry", f"/jobs/{jobs['pending'][0]}/cancel", "/jobs/retry-failed",
                "/queues/default/pause"):
        assert client.post(url, data={"csrf_token": token.group(1), "task": "boom"}).status_code == 403
    assert snapshot(app) == before


def test_token_is_required_on_every_route(app, jobs):
    client = TestClient(dashboard(app, token="s3cret-token"))
    for url in ("/", "/jobs", "/static/dashboard.css", "/metrics"):
        response = client.get(url)
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Basic"), url
    assert client.get("/", auth=("anyone", "wrong")).status_code == 401
    assert client.get("/", headers={"Authorization": "Basic !!!"}).status_code == 401
    assert client.get("/", auth=("anyone", "s3cret-token")).status_code == 200
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200


def test_metrics_match_the_database(app, client, jobs):
    from prometheus_client.parser import text_string_to_metric_families

    response = client.get("/metrics")
    assert response.status_code == 200
    families = {family.name: family for family in text_string_to_metric_families(response.text)}
    served = {(sample.labels["queue"], sample.labels["status"]): sample.value
              for sample in families["leased_jobs"].samples}
    expected = {(queue, status): count for queue, by_status in app.counts().items()
                for status, count in by_status.items()}
    assert served == expected
    assert served[("default", "done")] == 25 and served[("mail", "failed")] == 1


def test_mounted_under_a_prefix(app, jobs):
    from starlette.applications import Starlette
    from starlette.routing import Mount

    host = Starlette(routes=[Mount("/admin/jobs", app=dashboard(app))])
    client = TestClient(host)
    page = client.get("/admin/jobs/jobs?status=failed&task=boom").text
    assert f'href="/admin/jobs/jobs/{jobs["failed"][0]}"' in page
    assert 'href="/admin/jobs/static/dashboard.css' in page
    token = CSRF.search(page).group(1)
    response = client.post(f"/admin/jobs/jobs/{jobs['failed'][0]}/retry", data={"csrf_token": token},
                           follow_redirects=False)
    assert response.headers["location"] == f"/admin/jobs/jobs/{jobs['failed'][0]}"
    assert "Path=/admin/jobs/" in response.headers["set-cookie"]
    assert "is pending again" in client.get(response.headers["location"]).text


def test_a_post_from_another_origin_is_refused_even_with_a_valid_csrf_token(app, client, jobs):
    token = csrf_token(client)
    before = snapshot(app)
    retry = f"/jobs/{jobs['failed'][0]}/retry"
    for origin in ("http://evil.example", "http://testserver.evil.example", "http://testserver:8080", "null"):
        response = client.post(retry, data={"csrf_token": token}, headers={"Origin": origin}, follow_redirects=False)
        assert response.status_code == 403 and "Origin" in response.text, origin
    assert snapshot(app) == before
    # The scheme is not compared: behind a proxy that ends TLS, the page is https and the request http.
    for origin, job_id in (("http://testserver", jobs["failed"][0]), ("https://testserver", jobs["failed"][1])):
        response = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": token}, headers={"Origin": origin},
                               follow_redirects=False)
        assert response.status_code == 303, origin


# DNS rebinding: a page whose own name is made to resolve to 127.0.0.1 is same-origin with the dashboard,
# so neither the browser nor the CSRF token stops it; only the name it asks for (the Host header) differs.
def loopback_dashboard(app: Leased, *also: str) -> TestClient:
    """The dashboard as `leased dashboard` serves it on 127.0.0.1 without a token."""
    return TestClient(dashboard(app, allowed_hosts=server.loopback_hosts("127.0.0.1", also)),
                      base_url="http://localhost:8080")


def test_loopback_dashboard_without_a_token_answers_only_to_loopback_names(app, jobs):
    client = loopback_dashboard(app)
    job_page, cancel = f"/jobs/{jobs['failed'][0]}", f"/jobs/{jobs['pending'][0]}/cancel"
    token = csrf_token(client, job_page)
    before = snapshot(app)
    for host in ("evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", ""):
        refused = client.get(job_page, headers={"Host": host})
        assert refused.status_code == 421 and "kaboom" not in refused.text, host
        assert "LEASED_DASHBOARD_TOKEN" in refused.text and "--allow-host" in refused.text
        assert client.post(cancel, data={"csrf_token": token}, headers={"Host": host}).status_code == 421
    assert snapshot(app) == before
    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "jobs.localhost:8080", "LOCALHOST", "localhost."):
        assert client.get(job_page, headers={"Host": host}).status_code == 200, host


def test_loopback_dashboard_answers_to_a_host_named_on_the_command_line(app, jobs):
    client = loopback_dashboard(app, "jobs.internal")
    assert client.get("/", headers={"Host": "jobs.internal:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "localhost:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 421


def test_loopback_hosts_include_the_address_listened_on():
    assert "[::1]" in server.loopback_hosts("::1") and "127.0.0.2" in server.loopback_hosts("127.0.0.2")
    assert "myhost.localdomain" in server.loopback_hosts("myhost.localdomain")


# Serving.
def test_only_loopback_counts_as_local():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("10.1.2.3")
    assert not is_loopback("::")


def dashboard_command(*arguments: str, token: str | None = None, **options) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "LEASED_DASHBOARD_TOKEN"}
    if token is not None:
        env["LEASED_DASHBOARD_TOKEN"] = token
    return subprocess.Popen([sys.executable, "-m", "leased.cli.main", "dashboard", *arguments], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3"])
def test_command_refuses_a_public_address_without_a_token(tmp_path, host):
    process = dashboard_command("--database", f"sqlite:///{tmp_path / 'jobs.db'}", "--host", host, "--port", "0")
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: refusing to serve on") and "LEASED_DASHBOARD_TOKEN" in err


def test_command_serves_with_a_token(app, jobs):
    import httpx

    process = dashboard_command("--database", app.database_url, "--host", "0.0.0.0", "--port", "0",
                                "--read-only", token="s3cret-token")
    try:
        line = process.stdout.readline()
        assert "(read-only, token required)" in line, line + process.stderr.read()
        url = re.search(r"http://\S+/", line).group(0).replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(url).status_code == 401
        basic = base64.b64encode(b"me:s3cret-token").decode()
        page = httpx.get(url + "jobs?status=failed", headers={"Authorization": f"Basic {basic}"})
        assert page.status_code == 200 and "kaboom" in page.text
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_command_on_loopback_without_a_token_refuses_a_rebound_host_name(app, jobs):
    import httpx

    process = dashboard_command("--database", app.database_url, "--port", "0")
    try:
        line = process.stdout.readline()
        url = re.search(r"http://\S+/", line).group(0)
        page = url + f"jobs/{jobs['failed'][0]}"
        refused = httpx.get(page, headers={"Host": "evil.example:8080"})
        assert refused.status_code == 421 and "kaboom" not in refused.text
        assert httpx.get(page, headers={"Host": "localhost:8080"}).status_code == 200
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_import_leased_loads_no_web_dependencies():
    code = ("import sys, leased, leased.web; heavy = {'starlette', 'jinja2', 'uvicorn', 'prometheus_client'}; "
            "print(sorted(heavy & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_jobs_list_shows_the_last_error_only_where_it_explains_the_status(app, client, jobs):
    # A job that failed once and then succeeded keeps the error in its row; beside "done" it misleads.
    tries = []

    @app.task(name="flaky", max_attempts=1)
    def flaky():
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("first time unlucky")

    job = flaky.enqueue()
    app.run_until_empty()
    app.retry(job.id)
    app.run_until_empty()
    assert app.get_job(job.id).status == "done" and app.get_job(job.id).last_error
    page = client.get("/jobs", params={"task": "flaky"}).text
    assert "first time unlucky" not in page
    failed_page = client.get("/jobs", params={"status": "failed"}).text
    assert "ValueError: kaboom" in failed_page


def test_without_the_schema_every_page_says_to_migrate_not_a_500(database_url):
    app = Leased(database_url, migrate=False)
    client = TestClient(dashboard(app), raise_server_exceptions=False)
    for path in ("/", "/jobs", "/jobs/1", "/schedules", "/metrics"):
        page = client.get(path)
        assert page.status_code == 503 and "leased migrate" in page.text and "Traceback" not in page.text, path
    app.migrate()
    assert client.get("/").status_code == 200
    app.close()


@pytest.mark.parametrize("path, status", [
    ("/jobs?before_id=%C2%B2", 400),  # "²": str.isdigit() passed it, and int() raised
    ("/jobs?after_id=%D9%A3", 400),  # an Arabic-Indic digit: int() reads it, an id it is not
    ("/workflows?before_id=%C2%B2", 400),
    ("/jobs/" + "9" * 5000, 404),  # past Python's int() limit: a 500 before
    ("/jobs/" + "9" * 19, 404),  # past every database's 64-bit ids
    ("/workflows/" + "9" * 5000, 404),
])
def test_odd_ids_in_urls_are_a_4xx_never_a_500(client, path, status):
    assert client.get(path).status_code == status


def test_a_job_whose_arguments_nest_deeper_than_the_pretty_printer_is_shown(app, client):
    """1,200 deep: JSON's decoder reads it back, but indenting it recursed past Python's limit (a 500)."""
    from conftest import raw_sql

    job = app.task(name="deep")(lambda value: None).enqueue(1)
    raw_sql(app, f"UPDATE leased_jobs SET args = '{'[' * 1201 + ']' * 1201}' WHERE id = {job.id}")
    page = client.get(f"/jobs/{job.id}")
    assert page.status_code == 200 and "[[[[" in page.text
