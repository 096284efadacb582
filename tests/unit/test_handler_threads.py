"""Handler threads (leased.engine.threads.HandlerThreads): idle threads are woken one at a time,
each woken thread waking the next, and every item still gets a thread of its own. The worker tests
run them under real jobs; these drive the pool directly."""

from __future__ import annotations

import threading

from leased.engine.threads import HandlerThreads

HANG_GUARD = 30.0  # seconds: only a hang waits this long


def threads_running_together(idle: int, items: int, name: str) -> int:
    """Give `items` items back to back to a pool of `idle` idle threads, each item waiting until all
    of them run (a broken barrier fails the item); how many threads ran them."""
    all_running = threading.Barrier(items, timeout=HANG_GUARD)
    threads_used: set[int] = set()
    failures: list[BaseException] = []

    def work(item: int) -> None:
        threads_used.add(threading.get_ident())
        all_running.wait()
        return None

    pool: HandlerThreads[int] = HandlerThreads(work, failures.append, name=name)
    pool.start_idle(idle)
    for item in range(items):
        pool.run(item)
    pool.shutdown()
    for thread in [t for t in threading.enumerate() if t.name.startswith(f"{name}-")]:
        thread.join(HANG_GUARD)
    assert not failures
    return len(threads_used)


def test_items_given_at_once_to_idle_threads_all_run_together():
    assert threads_running_together(idle=8, items=8, name="leased-handler-idle") == 8


def test_items_in_line_get_threads_of_their_own_when_none_is_idle():
    """One idle thread, five items: those given while it wakes wait in line, and with no other
    thread idle each gets a new one, so no item waits for another to finish."""
    assert threads_running_together(idle=1, items=5, name="leased-handler-line") == 5
