"""A FastAPI shop: an order and its receipt job commit together in the request's transaction, a
leased worker runs in the app's lifespan, and the dashboard is mounted under /jobs behind a token.

    LEASED_DATABASE_URL=sqlite:///shop.db LEASED_DASHBOARD_TOKEN=s3cret uvicorn shop:api
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

import pydantic
from fastapi import FastAPI, HTTPException
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from leased import Leased
from leased.web import dashboard

DATABASE_URL = os.environ.get("LEASED_DATABASE_URL", "sqlite:///shop.db")
# One database, two drivers: SQLAlchemy's async one for the app, leased's own for its worker.
engine = create_async_engine(DATABASE_URL.replace("sqlite://", "sqlite+aiosqlite://", 1)
                             .replace("postgresql://", "postgresql+psycopg://", 1))
jobs = Leased(DATABASE_URL)


class OrderPlaced(pydantic.BaseModel):
    order_id: int
    email: str


@jobs.task(name="send_receipt", max_attempts=5)
async def send_receipt(order: OrderPlaced) -> str:
    # Idempotent: at-least-once may run it twice, and the second run changes nothing.
    async with engine.begin() as connection:
        await connection.execute(text("INSERT INTO receipts (order_id, email) VALUES (:id, :email) "
                                      "ON CONFLICT (order_id) DO NOTHING"),
                                 {"id": order.order_id, "email": order.email})
    return f"receipt for order {order.order_id} sent to {order.email}"


@asynccontextmanager
async def lifespan(api: FastAPI):
    jobs.migrate()  # leased's tables, before the first request enqueues inside a transaction
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE IF NOT EXISTS orders "
                                      "(id INTEGER PRIMARY KEY, email TEXT NOT NULL)"))
        await connection.execute(text("CREATE TABLE IF NOT EXISTS receipts (order_id INTEGER PRIMARY KEY, "
                                      "email TEXT NOT NULL)"))
    async with jobs.worker(concurrency=4):  # started with the app, stopped gracefully with it
        yield
    await engine.dispose()
    jobs.close()


api = FastAPI(lifespan=lifespan)
api.mount("/jobs", dashboard(jobs, token=os.environ["LEASED_DASHBOARD_TOKEN"]))


class OrderIn(pydantic.BaseModel):
    order_id: int
    email: str
    in_stock: bool = True


@api.post("/orders", status_code=201)
async def place_order(order: OrderIn) -> dict:
    async with AsyncSession(engine) as session, session.begin():
        try:
            await session.execute(text("INSERT INTO orders (id, email) VALUES (:id, :email)"),
                                  {"id": order.order_id, "email": order.email})
        except IntegrityError:  # the order's id is the primary key: this order was placed before
            raise HTTPException(409, f"order {order.order_id} was placed already") from None
        job = await send_receipt.using(connection=session).aenqueue(OrderPlaced(order_id=order.order_id,
                                                                                email=order.email))
        if not order.in_stock:  # the transaction rolls back: no order, and no receipt job
            raise HTTPException(409, "out of stock")
    return {"order_id": order.order_id, "job_id": job.id}
