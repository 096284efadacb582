"""Re-take the dashboard screenshots in this folder, from the repository root:

    PYTHONPATH=$PWD/src /work/main/.venv/bin/python docs/screenshots/take.py [--all] [--keep DIR]

(any Python with `leased[web]` and playwright installed works; Chromium comes from Debian:
apt-get install chromium). It fills a temporary SQLite database with the last hour of a small
shop: jobs done and failed minute by minute (the clock seam backdates them, so the throughput
chart has bars), two periodic schedules that have ticked, a paused queue, a queue with a
concurrency limit, a job waiting on its key's limit, and a worker with a handler stuck past its
time limit. It then runs the dashboard (what `leased dashboard APP` serves) and photographs it at
laptop (1280x800) and phone (390x844) widths.

docs/howto/dashboard.md shows the overview; the others are taken for reviewers; `--all` also takes the pages only reviewers look at
(the Why panel of a job held by a limit, the Schedules page). `--keep DIR` keeps the database
there, to point `leased dashboard --database sqlite:///DIR/shop.db` at it by hand.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import uvicorn
from playwright.sync_api import Page, sync_playwright

from leased import Backoff, Leased, PermanentError, TaskContext
from leased.testing import advance, run_jobs
from leased.web import dashboard
from leased.web.server import listen, url

HERE = Path(__file__).parent
SIZES = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MINUTES = 60  # of history, one batch of orders per minute


def build_app(path: Path, release: threading.Event) -> Leased:
    app = Leased(f"sqlite:///{path}")
    rng = random.Random(7)

    @app.task(name="send_receipt", queue_name="mail", max_attempts=3, backoff=Backoff(base=0.01, cap=0.02),
              takes_context=True)
    def send_receipt(context: TaskContext, order_id: str, email: str) -> dict:
        number = int(order_id.split("-")[1])
        if number % 17 == 0 or (number % 11 == 0 and context.attempt == 1):
            connect_smtp("smtp.mailhost.internal", 587)
        return {"message_id": f"<{order_id}.{rng.randrange(10**6)}@shop.example>"}

    @app.task(name="charge_card", queue_name="billing", max_attempts=2, backoff=Backoff(base=0.01, cap=0.02))
    def charge_card(order_id: str, amount_cents: int, currency: str = "EUR") -> dict:
        if amount_cents > 90_000:
            raise PermanentError(f"card declined for order {order_id}: insufficient funds")
        return {"charge": f"ch_{rng.randrange(16**10):010x}", "amount": amount_cents}

    @app.task(name="resize_image", max_attempts=5, takes_context=True)
    def resize_image(context: TaskContext, image_id: int, sizes: list[int]) -> list[str]:
        if image_id >= 2000:  # long renders: the ones the screenshots show running
            release.wait()
        return [f"img/{image_id}/{size}.webp" for size in sizes]

    @app.task(name="sync_customer", queue_name="crm", concurrency=1, concurrency_key="customer:{customer_id}")
    def sync_customer(customer_id: int, full: bool = False) -> str:
        if full:  # a full sync takes a while, and holds its customer's key meanwhile
            release.wait()
        return f"customer {customer_id} synced"

    @app.task(name="export_ledger", queue_name="reports", max_attempts=1, timeout=1)
    def export_ledger(month: str) -> str:
        release.wait()  # ignores its time limit: the worker shows it as a stuck handler
        return f"ledger-{month}.csv"

    @app.periodic(every=timedelta(minutes=15), name="refresh_exchange_rates", queue_name="billing")
    def refresh_exchange_rates(scheduled_at: datetime) -> int:
        return 31

    @app.periodic("*/10 * * * *", name="send_digest", queue_name="mail", timezone="Europe/Berlin", overlap="skip")
    def send_digest(scheduled_at: datetime) -> str:
        return f"digest for {scheduled_at:%H:%M}"

    return app


def connect_smtp(host: str, port: int) -> None:
    raise ConnectionRefusedError(f"[Errno 111] connection refused by {host}:{port}")


def fill(app: Leased) -> None:
    """An hour of orders, minute by minute: the clock starts an hour back and catches up with now."""
    rng = random.Random(42)
    tasks = app.tasks
    app.backend.clock.offset = -MINUTES * 60.0  # the seam only moves forward; start it an hour ago
    order = 10400
    for minute in range(MINUTES):
        busy = 1 + (minute % 20 > 12) * 3  # a rush every twenty minutes
        for _ in range(rng.randrange(1, 4) * busy):
            tasks["send_receipt"].enqueue(f"o-{order}", f"customer{order}@example.com")
            tasks["charge_card"].using(idempotency_key=f"charge:o-{order}").enqueue(
                f"o-{order}", rng.choice([1999, 4500, 12900, 95000, 2350, 2350]))
            order += 1
        for _ in range(rng.randrange(0, 3)):
            tasks["resize_image"].enqueue(rng.randrange(1000, 1999), [320, 640, 1280])
        if minute % 7 == 0:
            tasks["sync_customer"].enqueue(rng.randrange(1, 90))
        run_jobs(app, concurrency=4)
        advance(app, 1)  # failed attempts come due again (their backoff is a few milliseconds)
        run_jobs(app, concurrency=4)
        advance(app, 1)
        run_jobs(app, concurrency=4)
        advance(app, 58)
    app.backend.clock.offset = 0.0
    forget_drained_workers(app)


def forget_drained_workers(app: Leased) -> None:
    """A stopped worker deletes its row, but a heartbeat still in flight in its thread can write it
    back afterwards (the announcer's thread outlives its cancelled task), so a few of the 180 short
    workers above would show as "gone". A real deployment has a handful; the picture needs none."""
    with sqlite3.connect(app.backend.path) as connection:
        connection.execute("DELETE FROM leased_workers")


def leave_work_waiting(app: Leased) -> None:
    """What a worker is busy with now, and what waits: on a paused queue, a limit, a later time."""
    tasks = app.tasks
    tasks["export_ledger"].enqueue("2026-10")  # overruns its time limit
    tasks["sync_customer"].enqueue(42, full=True)  # runs, and holds customer:42 ...
    for n in range(6):  # four run (and wait), two wait for a free slot
        tasks["resize_image"].enqueue(2000 + n, [320, 640])
    tasks["resize_image"].using(run_after=timedelta(minutes=30)).enqueue(3001, [1920])
    app.limit("billing", concurrency=2)


def pause_reports(app: Leased) -> None:
    app.pause("reports")  # once the first export runs: the next two wait for a resume
    for month in ("2026-11", "2026-12"):
        app.tasks["export_ledger"].enqueue(month)


def screenshot_all(base_url: str, app: Leased, everything: bool, held_id: int) -> None:
    failed = app.list_jobs(status="failed", task_name="send_receipt", limit=1)[0]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for size_name, viewport in SIZES.items():
            page = browser.new_page(base_url=base_url, viewport=viewport, device_scale_factor=2,
                                    color_scheme="light")

            def shoot(name: str, path: str, full_page: bool = True, before: object = None) -> None:
                page.goto(path)
                if callable(before):
                    before(page)
                page.screenshot(path=HERE / f"{name}-{size_name}.png", full_page=full_page)

            shoot("overview", "/", before=lambda page: page.locator("text=stuck").first.wait_for())
            shoot("jobs", "/jobs?status=failed", full_page=False)
            shoot("failed-job", f"/jobs/{failed.id}", before=open_traceback)
            if everything:
                shoot("held-job", f"/jobs/{held_id}")
                shoot("schedules", "/schedules")
            page.close()
        browser.close()


def open_traceback(page: Page) -> None:
    page.locator("details.traceback summary").first.click()
    page.evaluate("window.scrollTo(0, 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="also the held job's Why panel and the Schedules page")
    parser.add_argument("--keep", type=Path, help="copy the database into this folder afterwards")
    options = parser.parse_args()
    release = threading.Event()
    with tempfile.TemporaryDirectory() as folder:
        database = Path(folder) / "shop.db"
        app = build_app(database, release)
        fill(app)
        leave_work_waiting(app)
        held = app.tasks["sync_customer"].enqueue(42)  # ... so this one waits for it
        worker = app.worker(concurrency=6, poll_interval=0.2, prune=False)
        threading.Thread(target=worker.run, daemon=True).start()
        sock = listen("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(dashboard(app), log_level="warning", lifespan="off"))
        threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
        while not server.started or not any(w.stuck_handlers for w in app.workers()):
            time.sleep(0.1)
        pause_reports(app)
        screenshot_all(url(sock), app, options.all, held.id)
        if options.keep:  # SQLite's own backup: a file copy would miss what is still in the WAL
            options.keep.mkdir(parents=True, exist_ok=True)
            with sqlite3.connect(database) as source, sqlite3.connect(options.keep / database.name) as copy:
                source.backup(copy)
        release.set()
        worker.stop()
        server.should_exit = True


if __name__ == "__main__":
    main()
