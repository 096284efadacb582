"""Threads for sync handlers: reused between jobs, and daemons.

Starting a thread per job costs more than a no-op job itself. Daemon threads, because a sync
handler cannot be interrupted: one that ignores its cancellation must not hold up the process's
exit after a forced shutdown (concurrent.futures' workers are joined at exit).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable


def call_soon_threadsafe(loop: "asyncio.AbstractEventLoop | None", callback: Callable, *args: object) -> None:
    """Run `callback` on the worker's loop from another thread; nothing if the loop is gone or closed
    (the worker has stopped: nothing is left to cancel, free or wake)."""
    if loop is not None:
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass


class HandlerThreads:
    def __init__(self, name: str = "leased-handler"):
        self._name = name
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    def submit(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> Future:
        future: Future = Future()
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:  # every thread is busy (or stuck in a cancelled handler): add one
                self._started += 1
                threading.Thread(target=self._serve, name=f"{self._name}-{self._started}", daemon=True).start()
        self._work.put((future, function, args, kwargs))
        return future

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their handler returns."""
        with self._lock:
            for _ in range(self._started):
                self._work.put(None)

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, function, args, kwargs = item
            if future.set_running_or_notify_cancel():
                future.thread_id = threading.get_ident()  # where to look if it outlives its time limit
                try:
                    future.set_result(function(*args, **kwargs))
                except BaseException as error:
                    future.set_exception(error)
            del item, future  # drop references to the job's values while idle
            with self._lock:
                self._idle += 1
