"""The async verbs, on an event loop of their own: enqueue on a caller's async connection, and an
async transactional handler's steps and end, written in its transaction or not at all."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, AsyncIterator

from leased.backends.ports import Backend
from leased.errors import ConfigurationError
from leased.jobs import JobStatus, Lease
from leased.testing.conformance.helpers import claim, done, enqueue, job, new_job
from leased.testing.conformance.suite import MakeBackend, check
from leased.testing.conformance.transactional import RolledBack


def _async_transaction(backend: Backend) -> AbstractAsyncContextManager[Any] | None:
    """attempt_transaction_async(), or None where the backend has no async transactions, which it
    says by refusing with ConfigurationError (MariaDB: leased has no async driver for it)."""
    try:
        return backend.attempt_transaction_async()
    except ConfigurationError:
        return None


@asynccontextmanager
async def _callers_transaction(backend: Backend) -> AsyncIterator[Any]:
    """A connection in a transaction, as an async producer's: an async transaction's, or where
    the backend has none, its driver's (which its enqueue_async() then takes, on a thread)."""
    transaction = _async_transaction(backend)
    if transaction is None:
        with backend.attempt_transaction() as connection:
            yield connection
    else:
        async with transaction as connection:
            yield connection


@check
def an_async_transactional_end_commits_with_its_transaction(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(), new_job(), new_job())
    kept, undone, lost = claim(backend)

    async def refused_without_async_transactions() -> None:
        for call in (backend.finish_in_async(None, done(kept.lease)),
                     backend.record_step_async(kept.lease, "charge", "1", 0.1, None)):
            try:
                await call
            except ConfigurationError:
                continue
            raise AssertionError("a backend without async transactions refuses their verbs with ConfigurationError")

    async def handlers() -> bool:
        try:
            transaction = _async_transaction(backend)
            if transaction is None:
                await refused_without_async_transactions()
                return False
            async with transaction as connection:
                assert await backend.record_step_async(kept.lease, "charge", '"ch_1"', 0.1, connection) is True
                assert await backend.finish_in_async(connection, done(kept.lease, "7")) == (True, set())
            try:
                async with backend.attempt_transaction_async() as connection:
                    assert await backend.record_step_async(undone.lease, "charge", '"ch_2"', 0.1, connection)
                    assert (await backend.finish_in_async(connection, done(undone.lease)))[0]
                    raise RolledBack
            except RolledBack:
                pass
            async with backend.attempt_transaction_async() as connection:
                stranger = Lease(lost.id, lost.attempt, "intruder")
                assert await backend.finish_in_async(connection, done(stranger)) == (False, set())
                assert await backend.record_step_async(stranger, "charge", "1", 0.1, connection) is False
            return True
        finally:
            await backend.close_async()

    if not asyncio.run(handlers()):
        assert [job(backend, each.id).status for each in (kept, undone, lost)] == [JobStatus.RUNNING] * 3
        return
    ended = job(backend, kept.id)
    assert (ended.status, ended.result) == (JobStatus.DONE, 7)
    assert [(step.name, step.result) for step in backend.durable_steps(kept.id)] == [("charge", "ch_1")]
    for untouched in (undone, lost):
        assert job(backend, untouched.id).status is JobStatus.RUNNING and backend.durable_steps(untouched.id) == []


@check
def enqueue_async_writes_in_the_callers_transaction(make: MakeBackend) -> None:
    backend = make()

    async def producer() -> int:
        try:
            try:
                async with _callers_transaction(backend) as connection:
                    (lost, created), = await backend.enqueue_async([new_job("a")], connection)
                    assert created and lost.task_name == "a"
                    raise RolledBack
            except RolledBack:
                pass
            async with _callers_transaction(backend) as connection:
                (kept, created), (twin, twin_created) = await backend.enqueue_async(
                    [new_job("b", idempotency_key="k"), new_job("b", idempotency_key="k")], connection)
            assert created and not twin_created and twin.id == kept.id, "a key holds within one call"
            return kept.id
        finally:
            await backend.close_async()

    kept_id = asyncio.run(producer())
    assert backend.count_jobs(None, "a", None) == 0, "rolled back with the caller's transaction"
    assert job(backend, kept_id).status is JobStatus.PENDING and job(backend, kept_id).task_name == "b"
