"""The listener service: on a thread of its own, turns the database's wake-ups (a job became due
on a queue this worker serves) into an immediate claim.

Through an outage the worker polls while the listener reconnects (the one retry policy of
engine/retrying.py). Any other error is a bug: it is reported to the worker, which stops loudly,
as it does for every service.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from leased.backends.ports import Listener
from leased.backends.worker_calls import mark_worker_thread
from leased.engine.retrying import Outage, is_transient, one_line
from leased.events import Event, ListenerLost, ListenerReconnected

log = logging.getLogger("leased.worker")

LISTEN_TIMEOUT = 1.0  # also how soon the listener notices that the worker stopped


class ListenerService:
    def __init__(self, listener: Listener, queues: tuple[str, ...] | None, *, wake_claimer: Callable[[], None],
                 emit: Callable[[Event], None], failed: Callable[[BaseException], None],
                 stopping: Callable[[], bool], worker_id: str):
        self._listener = listener
        self._queues = queues  # None: every queue
        self._wake_claimer = wake_claimer  # from any thread
        self._emit = emit  # from any thread
        self._failed = failed  # from any thread: the listener died of this
        self._stopping = stopping
        self._worker_id = worker_id

    def start(self) -> None:
        threading.Thread(target=self._run, name="leased-listener", daemon=True).start()

    def _run(self) -> None:
        mark_worker_thread()
        try:
            self._listen()
        except BaseException as error:  # a dead listener stops the worker loudly, not silently
            self._failed(error)
        finally:
            self._listener.close()

    def _listen(self) -> None:
        outage = Outage()
        while not self._stopping():
            try:
                queues = self._listener.wait(LISTEN_TIMEOUT)
            except Exception as error:
                if not is_transient(error):
                    raise
                delay = outage.failed()
                if outage.failures == 1:
                    self._emit(ListenerLost(self._worker_id, one_line(error)))
                log.warning("worker %s: %s; polling meanwhile, reconnecting in %.1fs", self._worker_id,
                            one_line(error), delay)
                time.sleep(delay)
                continue
            if outage.ended():
                log.info("worker %s: wake-up listener reconnected", self._worker_id)
                self._emit(ListenerReconnected(self._worker_id))
            if queues and (self._queues is None or any(queue in self._queues for queue in queues)):
                self._wake_claimer()
