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
    run, or None when it has no more (its slot is free); the thread then takes an item waiting for
    a thread, or waits for run() to give it one.

    Idle threads are woken one at a time. run() wakes one, and the items given while it wakes wait
    in line: the woken thread wakes the next idle one for them (it holds the GIL by then), or
    starts a thread for each if none is idle, and a thread whose work is done takes one before it
    goes idle. Woken all at once, the hundreds of threads a claim of a wave of jobs starts would
    all wait for the GIL together, each waking every switch interval to ask for it again: several
    context switches per job on top of the handler's."""

    def __init__(self, work: Callable[[Item], Item | None], failed: Callable[[BaseException], None],
                 name: str = "leased-handler"):
        self._work = work
        self._failed = failed  # work() raised: a bug in the engine, which must stop the worker loudly
        self._name = name
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []  # the inboxes of threads waiting for an item
        self._in_line: collections.deque[Item] = collections.deque()  # items given while a thread wakes
        self._waking = False  # a thread was given an item and has not yet looked at the line
        self._started = 0
        self._closed = False

    def run(self, item: Item) -> None:
        """From any thread: run `item` on an idle thread, or on a new one if none is idle."""
        with self._lock:
            if self._waking:
                self._in_line.append(item)  # the thread waking wakes the next for it
                return
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._started += 1
                number = self._started
            else:
                self._waking = True
        if inbox is not None:
            inbox.put(item)
        else:
            threading.Thread(target=self._serve, args=(item,), name=f"{self._name}-{number}", daemon=True).start()

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their item is done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

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
            threading.Thread(target=self._serve, args=(None,), name=f"{self._name}-{number}", daemon=True).start()

    def _wake_next(self) -> None:
        """On a thread just woken: wake the next idle one for the first item in line, if any. With
        none idle, each item in line gets a new thread, as run() would have given it."""
        with self._lock:
            if self._in_line and self._idle:
                inbox, item = self._idle.pop(), self._in_line.popleft()
            else:
                self._waking = False
                inbox, unthreaded = None, list(self._in_line)
                self._in_line.clear()
                first = self._started + 1
                self._started += len(unthreaded)
        if inbox is not None:
            inbox.put(item)
            return
        for number, item in enumerate(unthreaded, first):
            threading.Thread(target=self._serve, args=(item,), name=f"{self._name}-{number}", daemon=True).start()

    def _serve(self, item: Item | None) -> None:
        mark_worker_thread()  # the handler's own calls are its own: see Executor
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        try:
            while True:
                while item is not None:
                    item = self._work(item)
                with self._lock:
                    if self._in_line:
                        item = self._in_line.popleft()
                        continue
                    if self._closed:
                        return
                    self._idle.append(inbox)
                item = inbox.get()
                if item is None:
                    return
                self._wake_next()
        except BaseException as error:
            self._failed(error)
