"""The announcer: keeps the worker's row fresh, so that inspection (and producers waking it) know
it is alive, and signs it off at the end. A handler getting stuck or coming back, and a child
process starting or ending, is announced at once (soon())."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace
from typing import Callable

from leased.admin import WORKER_BEAT_SECONDS, WORKER_SILENT_AFTER, ChildrenSummary
from leased.backends.ports import RuntimePort, WorkerRecord
from leased.engine.retrying import is_transient, one_line
from leased.task_signatures import signature_clashes

log = logging.getLogger("leased.worker")


class Announcer:
    def __init__(self, backend: RuntimePort, record: WorkerRecord, stuck_handlers: Callable[[], int],
                 children: Callable[[], ChildrenSummary | None] = lambda: None):
        self._backend = backend
        self._record = record
        self._stuck_handlers = stuck_handlers
        self._children = children
        self._soon = asyncio.Event()
        self._signed_off = False
        self._sign_off_lock = threading.Lock()

    def soon(self) -> None:
        self._soon.set()

    async def run(self, wake_port: int | None) -> None:
        record = replace(self._record, wake_port=wake_port)
        peers_checked = False
        while True:
            self._soon.clear()
            try:
                children = self._children()
                await asyncio.to_thread(self._register, replace(
                    record, stuck_handlers=self._stuck_handlers(),
                    children=None if children is None else children.to_json()))
                if not peers_checked:
                    await asyncio.to_thread(self._warn_of_signature_clashes)
                    peers_checked = True
            except Exception as error:
                if not is_transient(error):
                    raise  # an outage costs a beat: the next one announces again
            try:
                await asyncio.wait_for(self._soon.wait(), WORKER_BEAT_SECONDS)
            except TimeoutError:
                pass

    def _register(self, record: WorkerRecord) -> None:
        self._backend.register_worker(record)
        with self._sign_off_lock:
            # Cancelling run() does not stop a registration already in its thread: if sign_off()
            # deleted the row meanwhile, this one wrote it back, and it must go again.
            if self._signed_off:
                self._backend.unregister_worker(record.id)

    def _warn_of_signature_clashes(self) -> None:
        """Once, when the worker's row is first written: a live peer that registers one of its task
        names with another signature is most likely another app on the same database."""
        for clash in signature_clashes(self._backend.list_workers(WORKER_SILENT_AFTER), involving=self._record.id):
            log.warning("worker %s: %s", self._record.id, clash)

    def _unregister(self) -> None:
        with self._sign_off_lock:
            self._signed_off = True
        self._backend.unregister_worker(self._record.id)

    async def sign_off(self) -> None:
        try:
            await asyncio.to_thread(self._unregister)
        except Exception as error:
            log.warning("worker %s: could not sign off (%s)", self._record.id, one_line(error))
