"""`leased demo`: a worker working through a burst of sample jobs, some failing, live in the terminal.

The sample tasks are ordinary leased tasks, so this module is also an APP: after the demo,
`leased retry --database sqlite:///leased-demo.db ID` and `leased worker leased.cli.demo:app`
run a failed job again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from leased import Backoff, Job, Leased, PermanentError, TaskContext
from leased.backends.urls import redacted
from leased.cli import output
from leased.engine.worker import Worker

DEFAULT_URL = "sqlite:///leased-demo.db"
DEFAULT_FILE = "leased-demo.db"
QUEUE = "demo"
DECLINED_CARD = "4000 0000 0000 0002"  # the usual payment-provider test number for "declined"
GOOD_CARD = "4242 4242 4242 4242"
EMAIL_FAILURE_RATE = 0.3
EMAIL_ATTEMPTS = 3  # the relay "recovers" after these: a manual retry of a failed email then succeeds
MAX_FAILED_SHOWN = 10
DEADLINE_SECONDS = 60.0  # a safety net only: the default burst finishes in a few seconds

# Decides which attempts fail. Set by run_demo(); failures derive from (seed, job id, attempt),
# not from a shared generator, so that worker threads racing each other cannot change them.
_seed = random.randrange(1_000_000)


def make_app(url: str) -> Leased:
    app = Leased(url)

    @app.task(name="demo.resize_image", queue_name=QUEUE)
    def resize_image(path: str, width: int) -> dict:
        time.sleep(random.uniform(0.05, 0.3))  # stands in for the CPU work
        return {"path": path.replace(".jpg", f"_{width}w.jpg"), "width": width}

    # takes_context: the handler sees its job id and attempt number, which decide its (seeded) luck.
    @app.task(name="demo.send_email", queue_name=QUEUE, takes_context=True, backoff=Backoff(base=0.2, cap=2),
              max_attempts=EMAIL_ATTEMPTS)
    def send_email(context: TaskContext, to: str, subject: str) -> str:
        time.sleep(random.uniform(0.02, 0.1))
        if email_relay_times_out(_seed, context.job_id, context.attempt):
            raise ConnectionError("SMTP relay smtp.example.com:587 timed out")  # retried, with backoff
        return f"sent {subject!r} to {to}"

    @app.task(name="demo.charge_card", queue_name=QUEUE)
    def charge_card(order_id: str, amount_cents: int, card: str) -> dict:
        time.sleep(random.uniform(0.05, 0.15))
        if card == DECLINED_CARD:
            # Retrying cannot help a declined card: fail the job now instead of using up attempts.
            raise PermanentError(f"card ending {card[-4:]} declined for order {order_id}")
        return {"order_id": order_id, "charged_cents": amount_cents}

    @app.task(name="demo.fetch_feed", queue_name=QUEUE)
    async def fetch_feed(url: str) -> dict:
        await asyncio.sleep(random.uniform(0.1, 0.4))  # async handlers run on the worker's event loop
        return {"url": url, "new_items": random.randrange(0, 12)}

    return app


def email_relay_times_out(seed: int, job_id: int, attempt: int) -> bool:
    """Seeded bad luck on the email's own attempts; past them (a retry from the CLI or the
    dashboard) the relay is back, so that retrying a failed email shows it succeed."""
    return attempt <= EMAIL_ATTEMPTS and random.Random(f"{seed}:{job_id}:{attempt}").random() < EMAIL_FAILURE_RATE


# An APP for `leased worker leased.cli.demo:app` after the demo.
app = make_app(os.environ.get("LEASED_DATABASE_URL") or DEFAULT_URL)

PEOPLE = ["ada", "grace", "alan", "edsger", "barbara", "donald", "margaret", "ken"]
SUBJECTS = ["Your receipt", "Welcome aboard", "Password reset", "Weekly digest"]
FEEDS = ["https://example.com/blog.atom", "https://example.org/news.rss", "https://example.net/changelog.xml"]


def enqueue_burst(app: Leased, count: int, rng: random.Random) -> list[int]:
    ids = []
    for number in range(1, count + 1):
        kind = rng.choices(["resize", "email", "charge", "feed"], weights=[35, 30, 20, 15])[0]
        if kind == "resize":
            job = app.get_task("demo.resize_image").enqueue(f"photos/IMG_{1000 + number}.jpg",
                                                             rng.choice([320, 640, 1280]))
        elif kind == "email":
            job = app.get_task("demo.send_email").enqueue(f"{rng.choice(PEOPLE)}@example.com", rng.choice(SUBJECTS))
        elif kind == "charge":
            card = DECLINED_CARD if rng.random() < 0.2 else GOOD_CARD
            job = app.get_task("demo.charge_card").enqueue(f"ord_{number:04d}", rng.randrange(500, 20_000), card)
        else:
            job = app.get_task("demo.fetch_feed").enqueue(rng.choice(FEEDS))
        ids.append(job.id)
    return ids


class Progress:
    """One status line: redrawn in place on a terminal; elsewhere (CI logs, pipes) printed on change
    at most every half second, so a log gets a handful of lines rather than hundreds."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.tty = stream.isatty()
        self.last_text = ""
        self.last_printed = 0.0
        self.width = 0

    def update(self, text: str, elapsed: float, *, final: bool = False) -> None:
        line = f"{output.format_duration(elapsed):>6}  {text}"
        if self.tty:
            # Cut to the terminal: a line that wraps can no longer be redrawn in place.
            line = output.truncate(line, (output.terminal_width() or 120) - 1)
            self.stream.write("\r" + line.ljust(self.width) + ("\n" if final else ""))
            self.width = len(line)
        elif final or (text != self.last_text and time.monotonic() - self.last_printed >= 0.5):
            self.stream.write(line + "\n")
            self.last_text, self.last_printed = text, time.monotonic()
        self.stream.flush()


def progress_text(counts: dict[str, int], retries: int, total: int, concurrency: int) -> str:
    """The demo's progress line. The database's `running` includes the jobs the one worker claimed
    ahead of its free slots (while jobs are short), so at most `concurrency` of them are shown as
    running and the rest as claimed."""
    finished = counts.get("done", 0) + counts.get("failed", 0) + counts.get("cancelled", 0)
    filled = round(10 * finished / total) if total else 10
    running = min(counts.get("running", 0), concurrency)
    claimed = counts.get("running", 0) - running
    return (f"[{'#' * filled}{'.' * (10 - filled)}] {finished}/{total}  pending {counts.get('pending', 0)}"
            f"  running {running}{f' (+{claimed} claimed ahead)' if claimed else ''}  done {counts.get('done', 0)}"
            f"  failed {counts.get('failed', 0)}  retries {retries}")


def remove_database_files(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(path + suffix).unlink(missing_ok=True)


def run_demo(database: str | None, *, job_count: int = 40, concurrency: int = 4, seed: int | None = None,
             dashboard_port: int | None = None) -> int:
    """Run the demo; returns the exit status. With a port, serve the dashboard afterwards."""
    global _seed
    _seed = seed if seed is not None else random.randrange(1_000_000)
    if database is None:
        # Only the demo's own file is recreated: a --database is the user's, and is never deleted.
        remove_database_files(DEFAULT_FILE)
    url = database or DEFAULT_URL
    out = sys.stdout
    # The worker logs every retry and failure; here the progress line and summary tell that story.
    leased_logger = logging.getLogger("leased")
    previous_level = leased_logger.level
    leased_logger.setLevel(logging.CRITICAL)
    demo_app = make_app(url)
    try:
        print(f"leased demo: {job_count} sample jobs on {redacted(url)}, one worker running {concurrency} at a time "
              f"(--seed {_seed} replays this run)\n", file=out, flush=True)
        job_ids = enqueue_burst(demo_app, job_count, random.Random(_seed))
        worker = demo_app.worker(concurrency=concurrency, queues=[QUEUE], poll_interval=0.1, shutdown_grace=5)
        status, elapsed = watch(demo_app, worker, len(job_ids), out)
        if status != 0:
            return status
        summarize(demo_app, url, job_ids, worker.stats.retried, elapsed, out, dashboard_port is None)
        if dashboard_port is not None:
            serve_dashboard(demo_app, dashboard_port, concurrency, out)
        return 0
    finally:
        demo_app.close()
        leased_logger.setLevel(previous_level)


def watch(app: Leased, worker: Worker, total: int, out: TextIO) -> tuple[int, float]:
    """Run the worker on a thread and draw progress until no demo job is pending or running."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:  # reported by the main thread, which owns the terminal
            failure.append(error)

    # A background thread: the worker installs no signal handlers there, so Ctrl-C reaches us.
    thread = threading.Thread(target=run, name="leased-demo-worker", daemon=True)
    started = time.monotonic()
    thread.start()
    progress = Progress(out)
    status = 0
    try:
        while True:
            counts = app.counts().get(QUEUE, {})
            elapsed = time.monotonic() - started
            finished = counts.get("pending", 0) + counts.get("running", 0) == 0
            progress.update(progress_text(counts, worker.stats.retried, total, worker.concurrency), elapsed,
                            final=finished)
            if finished:
                break
            if not thread.is_alive():
                progress.update("the worker stopped unexpectedly", elapsed, final=True)
                print(f"error: {failure[0] if failure else 'worker exited'}", file=sys.stderr)
                return 1, elapsed
            if elapsed > DEADLINE_SECONDS:
                progress.update("giving up", elapsed, final=True)
                print(f"error: jobs still unfinished after {DEADLINE_SECONDS:.0f}s", file=sys.stderr)
                return 1, elapsed
            time.sleep(0.1)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the worker (jobs that do not finish go back to pending)", file=out)
        status = 130
    finally:
        worker.stop()
        thread.join(timeout=15)
    return status, time.monotonic() - started


def serve_dashboard(app: Leased, port: int, concurrency: int, out: TextIO) -> None:
    """The dashboard on this machine, with a worker behind it so that a retry there runs again."""
    from leased.web import dashboard, server

    # Raises the one-line "needs leased[web]" error before anything starts.
    asgi_app = dashboard(app, allowed_hosts=server.loopback_hosts("127.0.0.1"))
    sock = server.listen("127.0.0.1", port)
    worker = app.worker(concurrency=concurrency, queues=[QUEUE], poll_interval=0.5, shutdown_grace=5)
    thread = threading.Thread(target=worker.run, name="leased-demo-worker", daemon=True)
    thread.start()
    print(f"\ndashboard on {server.url(sock)} with a worker behind it: open it, "
          f"{what_to_retry(app.list_jobs(status='failed', queue_name=QUEUE, limit=1000))}; Ctrl-C stops",
          file=out, flush=True)
    try:
        with sock:
            server.run(asgi_app, sock)
    finally:
        worker.stop()
        thread.join(timeout=15)


def what_to_retry(failed: list[Job]) -> str:
    """The closing hint names what did fail: a failed email succeeds when retried (the relay is
    back), a declined card fails again."""
    tasks = {job.task_name for job in failed}
    if "demo.send_email" in tasks:
        return "retry a failed email (the relay is back) and watch it run"
    if "demo.charge_card" in tasks:
        return "retry the failed card charge and watch it fail again (a declined card stays declined)"
    if failed:
        return f"retry the failed {failed[0].task_name} job and watch it run"
    return "watch the jobs (none failed this time)"


def summarize(app: Leased, url: str, job_ids: list[int], retries: int, elapsed: float, out: TextIO,
              hints: bool = True) -> None:
    first_id = min(job_ids)
    failed = [job for job in app.list_jobs(status="failed", queue_name=QUEUE, limit=1000) if job.id >= first_id]
    done = len(job_ids) - len(failed)
    print(f"\nfinished in {output.format_duration(elapsed)}: {done} done, {len(failed)} failed, "
          f"{retries} retried along the way\n", file=out)
    print(output.counts_table(app.counts(), indent="  "), file=out)
    if failed:
        print("\nfailed jobs", file=out)
        rows = [(job.id, job.task_name, f"{job.attempt}/{job.max_attempts}", output.one_line(job.last_error))
                for job in failed[:MAX_FAILED_SHOWN]]
        print(output.table(["ID", "TASK", "ATTEMPT", "LAST ERROR"], rows, right=[0], shrink=3,
                           width=output.terminal_width(), indent="  "), file=out)
        if len(failed) > MAX_FAILED_SHOWN:
            print(f"  ... and {len(failed) - MAX_FAILED_SHOWN} more", file=out)
    if not hints:
        return
    # A password is never printed: with one, the commands take the URL from LEASED_DATABASE_URL,
    # which keeps it out of `ps` as well.
    has_password = redacted(url) != url
    database = "" if has_password else f" --database {shlex.quote(url)}"
    # A failed email succeeds when retried (the relay is back); a declined card fails again.
    emails = [job.id for job in failed if job.task_name == "demo.send_email"]
    declined = {job.id for job in failed if job.task_name == "demo.charge_card"}
    example = emails[0] if emails else failed[0].id if failed else job_ids[0]
    print("\ntry next" + (f" (with LEASED_DATABASE_URL set to {redacted(url)})" if has_password else ""), file=out)
    commands = ["leased demo --dashboard   # the same, then the web dashboard (pip install 'leased[web]')",
                f"leased jobs{database} --status failed",
                f"leased show{database} {example}"]
    if failed:
        worker = "leased worker leased.cli.demo:app"
        if url != DEFAULT_URL and not has_password:
            worker = f"LEASED_DATABASE_URL={shlex.quote(url)} {worker}"
        again = "runs it again" if emails or example not in declined else "runs it again: the card is declined again"
        commands += [f"leased retry{database} {example}", f"{worker}   # {again}; Ctrl-C stops"]
    print("\n".join("  " + command for command in commands), file=out, flush=True)
