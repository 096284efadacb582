"""Threads for sync handlers, and the one way other threads reach the worker's loop.

A handler thread holds one slot while it has work: it runs a job, hands its end on, and takes the
next waiting job itself, without a round trip through the event loop per job (a hop to the loop
and back costs more than a no-op job). Threads are reused between jobs (starting one per job costs
more still) and are daemons, because a sync handler cannot be interrupted: one that ignores its
cancellation must not hold up the process's exit after a forced shutdown.

What a thread must tell the loop goes through a LoopInbox: one wake-up of the loop per batch of
items, however many arrive meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from typing import Callable, Generic, TypeVar

from leased.backends.worker_calls import mark_worker_thread

Item = TypeVar("Item")


def call_soon_threadsafe(loop: "asyncio.AbstractEventLoop | None", callback: Callable, *args: object) -> None:
    """Run `callback` on the worker's loop from another thread; nothing if the loop is gone or closed
    (the worker has stopped: nothing is left to cancel, free or wake)."""
    if loop is not None:
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass


class LoopInbox(Generic[Item]):
    """Items put from any thread (the loop's too), handed to `deliver(items)` on the loop in
    batches: the first item of a batch schedules the delivery, the others join it."""

    def __init__(self, deliver: Callable[[list[Item]], None]):
        self._deliver = deliver
        self._items: list[Item] = []
        self._lock = threading.Lock()
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Call on the loop."""
        with self._lock:
            self._loop, self._loop_thread = loop, threading.get_ident()
            self._scheduled = bool(self._items)
        if self._scheduled:
            loop.call_soon(self._flush)

    def put(self, item: Item) -> None:
        with self._lock:
            self._items.append(item)
            if self._scheduled or self._loop is None:  # not started: start() delivers them
                return
            self._scheduled = True
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(self._flush)  # no need to wake a loop that is running this
        else:
            call_soon_threadsafe(self._loop, self._flush)

    def _flush(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        self._deliver(items)


class HandlerThreads(Generic[Item]):
    """Runs items on reused threads: `work(item)` runs one and returns the next this thread should
    run, or None when it has no more (its slot is free); the thread then takes the first item in
    line, or waits for run() to put one there.

    Items wait in one line, in the order given, and whichever thread comes first takes the first:
    a thread just woken, or one whose work is done. A thread is not handed an item as it is woken,
    because waking takes it a GIL switch or more, and meanwhile busy threads took later jobs and
    ran hundreds of them first (a no-op drain at concurrency 10 started jobs up to 500 places
    late). Idle threads are woken one at a time: run() wakes one, and the woken thread wakes the
    next while items remain in line (it holds the GIL by then), or starts a thread for each if none
    is idle. Woken all at once, the hundreds of threads a claim of a wave of jobs starts would all
    wait for the GIL together, each waking every switch interval to ask for it again: several
    context switches per job on top of the handler's."""

    def __init__(self, work: Callable[[Item], Item | None], failed: Callable[[BaseException], None],
                 name: str = "leased-handler"):
        self._work = work
        self._failed = failed  # work() raised: a bug in the engine, which must stop the worker loudly
        self._name = name
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []  # the inboxes of threads waiting to be woken
        self._line: collections.deque[Item] = collections.deque()  # items given that no thread has taken yet
        self._waking = False  # a thread was woken and has not yet looked at the line
        self._started = 0
        self._closed = False

    @property
    def behind(self) -> bool:
        """Whether items given wait in line for a thread (read without the lock: a caller that sees
        one just taken only looks at the line once more)."""
        return bool(self._line)

    def run(self, item: Item) -> None:
        """From any thread: put `item` in line, and wake an idle thread for it, or start a new one
        if none is idle."""
        with self._lock:
            self._line.append(item)
            if self._waking:
                return  # the thread waking wakes the next for it
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._started += 1
                number = self._started
            else:
                self._waking = True
        if inbox is not None:
            inbox.put(True)
        else:
            threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their item is done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(False)

    def start_idle(self, count: int) -> None:
        """Start threads up to `count`, idle, and return when each has started. The worker calls it
        off its loop before its first claim: a thread started for a job just claimed costs that job
        (and, in a wave of hundreds, the last of them) a thread start, and holds up the loop."""
        while True:
            with self._lock:
                if self._closed or self._started >= count:
                    return
                self._started += 1
                number = self._started
            threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()

    def _wake_next(self) -> None:
        """On a thread just woken: wake the next idle one while items wait in line beyond the first
        (which this thread takes). With none idle, each of them gets a new thread, as run() would
        have given it."""
        with self._lock:
            if len(self._line) > 1 and self._idle:
                inbox = self._idle.pop()
            else:
                self._waking = False
                inbox, unthreaded = None, max(0, len(self._line) - 1)
                first = self._started + 1
                self._started += unthreaded
        if inbox is not None:
            inbox.put(True)
            return
        for number in range(first, first + unthreaded):
            threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()

    def _serve(self) -> None:
        mark_worker_thread()  # the handler's own calls are its own: see Executor
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        item: Item | None = None
        try:
            while True:
                while item is not None:
                    item = self._work(item)
                with self._lock:
                    if self._line:
                        item = self._line.popleft()
                        continue
                    if self._closed:
                        return
                    self._idle.append(inbox)
                if not inbox.get():
                    return
                self._wake_next()
        except BaseException as error:
            self._failed(error)
