"""Handler threads (leased.engine.threads.HandlerThreads): idle threads are woken one at a time,
each woken thread waking the next, and every item still gets a thread of its own. The worker tests
run them under real jobs; these drive the pool directly."""

from __future__ import annotations

import threading

from leased.engine.threads import HandlerThreads

HANG_GUARD = 30.0  # seconds: only a hang waits this long


def test_items_given_at_once_to_idle_threads_all_run_together():
    count = 8
    all_running = threading.Barrier(count, timeout=HANG_GUARD)  # breaks unless the eight run at once
    threads_used: set[int] = set()
    failures: list[BaseException] = []

    def work(item: int) -> None:
        threads_used.add(threading.get_ident())
        all_running.wait()
        return None

    pool: HandlerThreads[int] = HandlerThreads(work, failures.append)
    pool.start_idle(count)
    for item in range(count):
        pool.run(item)
    pool.shutdown()
    for thread in [t for t in threading.enumerate() if t.name.startswith("leased-handler-")]:
        thread.join(HANG_GUARD)
    assert not failures
    assert len(threads_used) == count


def test_items_in_line_get_threads_of_their_own_when_none_is_idle():
    """One idle thread, five items given back to back: those given while it wakes wait in line,
    and with no other thread idle each gets a new one, so no item waits for another to finish."""
    count = 5
    all_running = threading.Barrier(count, timeout=HANG_GUARD)
    threads_used: set[int] = set()
    failures: list[BaseException] = []

    def work(item: int) -> None:
        threads_used.add(threading.get_ident())
        all_running.wait()
        return None

    pool: HandlerThreads[int] = HandlerThreads(work, failures.append, name="leased-handler-line")
    pool.start_idle(1)
    for item in range(count):
        pool.run(item)
    pool.shutdown()
    for thread in [t for t in threading.enumerate() if t.name.startswith("leased-handler-line")]:
        thread.join(HANG_GUARD)
    assert not failures
    assert len(threads_used) == count
