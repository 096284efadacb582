"""examples/fastapi, run for real: its lifespan starts the worker and stops it, an order and its job
commit or roll back together, the dashboard answers only with the token. httpx against the ASGI
app, on both backends."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import httpx
import pytest

from conftest import raw_scalar
from paths import EXAMPLES

EXAMPLE = EXAMPLES / "fastapi" / "shop.py"


@pytest.fixture
def shop(database_url, monkeypatch):
    # The example's engine is async (aiosqlite, psycopg): it runs where an async driver is claimed.
    monkeypatch.setenv("LEASED_DATABASE_URL", database_url)
    monkeypatch.setenv("LEASED_DASHBOARD_TOKEN", "s3cret-token")
    spec = importlib.util.spec_from_file_location("fastapi_shop_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    module.jobs.close()
    sys.modules.pop("fastapi_shop_example", None)


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"], indirect=True)
def test_orders_and_their_jobs_commit_together_and_the_lifespan_worker_runs_them(shop):
    async def scenario() -> dict:
        async with shop.api.router.lifespan_context(shop.api):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=shop.api), base_url="http://shop") as client:
                placed = await client.post("/orders", json={"order_id": 1, "email": "ada@example.com"})
                assert placed.status_code == 201, placed.text
                refused = await client.post("/orders", json={"order_id": 2, "email": "bob@example.com",
                                                             "in_stock": False})
                assert refused.status_code == 409
                again = await client.post("/orders", json={"order_id": 1, "email": "eve@example.com"})
                assert (again.status_code, again.json()) == (409, {"detail": "order 1 was placed already"})
                job = await shop.jobs.wait_async(placed.json()["job_id"], timeout=60)  # run by the lifespan's worker
                assert job.result == "receipt for order 1 sent to ada@example.com"
                assert (await client.get("/jobs/")).status_code == 401
                page = await client.get(f"/jobs/jobs/{job.id}", headers={"Authorization": "Bearer s3cret-token"})
                assert page.status_code == 200 and "send_receipt" in page.text
                assert [worker.alive for worker in shop.jobs.workers()] == [True]
        return placed.json()

    placed = asyncio.run(scenario())
    app = shop.jobs
    assert raw_scalar(app, "SELECT count(*) FROM orders") == 1  # the refused orders rolled back ...
    assert app.count_jobs() == 1  # ... and so did their jobs
    assert raw_scalar(app, "SELECT email FROM receipts WHERE order_id = 1") == "ada@example.com"
    assert app.workers() == []  # the lifespan's end stopped the worker, which signed off
    assert app.get_job(placed["job_id"]).status == "done"
