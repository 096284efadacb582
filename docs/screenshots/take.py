"""Re-take the dashboard screenshots in this folder: python docs/screenshots/take.py

Fills a temporary SQLite database with a plausible day of jobs, runs a worker and the dashboard,
and photographs the overview, a filtered jobs list and a failed job, at laptop and phone widths,
with Debian's Chromium (apt-get install chromium) driven by Playwright.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from leased import Backoff, Leased, PermanentError, TaskContext
from leased.web import dashboard
from leased.web.server import listen, url

HERE = Path(__file__).parent
SIZES = {"laptop": {"width": 1280, "height": 860}, "phone": {"width": 390, "height": 844}}


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

    @app.task(name="sync_inventory", max_attempts=1)
    def sync_inventory(warehouse: str) -> int:
        return 1200

    return app


def connect_smtp(host: str, port: int) -> None:
    raise ConnectionRefusedError(f"[Errno 111] connection refused by {host}:{port}")


def fill(app: Leased) -> None:
    rng = random.Random(42)
    tasks = app.tasks
    for n in range(140):
        order = f"o-{10400 + n}"
        tasks["send_receipt"].enqueue(order, f"customer{n}@example.com")
        tasks["charge_card"].using(idempotency_key=f"charge:{order}").enqueue(order, rng.choice([1999, 4500, 12900,
                                                                                                  95000, 2350]))
    for n in range(60):
        tasks["resize_image"].enqueue(1000 + n, [320, 640, 1280])
    tasks["sync_inventory"].using(queue_name="default").enqueue("berlin-2")
    while any(queue["pending"] for queue in app.counts().values()):  # retries come due a moment later
        app.run_until_empty(concurrency=4)
        time.sleep(0.05)


def main() -> None:
    release = threading.Event()
    with tempfile.TemporaryDirectory() as folder:
        app = build_app(Path(folder) / "shop.db", release)
        fill(app)
        for n in range(6):  # four run (and wait), two wait for a free slot
            app.tasks["resize_image"].enqueue(2000 + n, [320, 640])
        app.tasks["sync_inventory"].using(run_after=timedelta(minutes=30)).enqueue("hamburg-1")
        worker = app.worker(concurrency=4, poll_interval=0.2)
        threading.Thread(target=worker.run, daemon=True).start()
        sock = listen("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(dashboard(app), log_level="warning",
                                               lifespan="off"))
        threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        failed = app.list_jobs(status="failed", task_name="send_receipt", limit=1)[0]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                 args=["--headless", "--no-sandbox", "--disable-gpu"])
            for size_name, viewport in SIZES.items():
                page = browser.new_page(base_url=url(sock), viewport=viewport, device_scale_factor=2,
                                        color_scheme="light")
                page.goto("/")
                page.locator("text=alive").first.wait_for()
                page.screenshot(path=HERE / f"overview-{size_name}.png", full_page=True)
                page.goto("/jobs?status=failed")
                page.screenshot(path=HERE / f"jobs-{size_name}.png")
                page.goto(f"/jobs/{failed.id}")
                page.locator("details.traceback summary").first.click()
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=HERE / f"failed-job-{size_name}.png", full_page=True)
                page.close()
            browser.close()
        release.set()
        worker.stop()
        server.should_exit = True


if __name__ == "__main__":
    main()
