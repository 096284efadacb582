"""What a user's type checker sees of leased: checked by `mypy --strict` in tests/unit/test_types.py, never run.

Each `assert_type` pins a type a user relies on; each `# type: ignore[code]` is a mistake the checker
must catch (mypy runs with warn_unused_ignores, so one that stops being an error fails the check).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Awaitable, Callable, assert_type


from leased import Job, Leased, Run, Task, TaskContext, Workflow
from leased.tasks import ContextTask, TaskCall
from leased.workflows import Step

app = Leased("sqlite:///typing.db")


@app.task
def add(x: int, y: int = 0) -> int:
    return x + y


@app.task(name="charge", queue_name="billing", priority=5, max_attempts=8, lease=60, takes_context=True)
def charge(context: TaskContext, order_id: str) -> dict[str, str]:
    context.raise_if_cancelled()
    return {"charged": order_id}


@app.task(name="plain", takes_context=False)
def plain(order_id: str) -> None: ...


@app.task(name="untyped_context", takes_context=True)
def untyped_context(context, order_id: str) -> None: ...  # type: ignore[no-untyped-def]


@app.task(name="fetch")
async def fetch(url: str) -> bytes:
    return url.encode()


# A plain task: enqueue() and a direct call take the handler's parameters.
add_task: Task[[int, int], int] = add
not_add_task: Task[[str], int] = add  # type: ignore[assignment]
assert_type(add(1, 2), int)
assert_type(add.enqueue(1), Job)
assert_type(add.enqueue(1, y=2), Job)
add.enqueue("one")  # type: ignore[arg-type]
add.enqueue()  # type: ignore[call-arg]
add.enqueue(1, z=2)  # type: ignore[call-arg]
plain_task: Task[[str], None] = plain

# takes_context=True: enqueue() takes the parameters after the context (the README's own example).
charge_task: ContextTask[[str], dict[str, str]] = charge
context_first: Task[[TaskContext, str], dict[str, str]] = charge  # type: ignore[assignment]
assert_type(charge.enqueue("o-1"), Job)
assert_type(charge.enqueue(order_id="o-1"), Job)
charge.enqueue()  # type: ignore[call-arg]
charge.enqueue(1)  # type: ignore[arg-type]
charge.enqueue(None, "o-1")  # type: ignore[arg-type, call-arg]
assert_type(charge.aenqueue("o-1"), Awaitable[Job])
assert_type(charge.enqueue_many([("o-2",), ("o-3",), {"order_id": "o-4"}]), list[Job])
untyped_context.enqueue("o-1")
untyped_context.enqueue()  # type: ignore[call-arg]


def direct_call(context: TaskContext) -> None:
    # A direct call runs the handler in this process: then the caller passes the context.
    assert_type(charge(context, "o-1"), dict[str, str])
    charge("o-1")  # type: ignore[call-arg]
    # Run-time fan-out from a running step: a step's job id back.
    assert_type(context.workflow.add(add, 1, name="more"), int)
    context.workflow.add(add, 1, after=[orders])  # type: ignore[list-item]


@app.periodic("*/5 * * * *", name="tick")
def tick(scheduled_at: datetime) -> None: ...


tick_task: Task[..., None] = tick


# A handler whose first parameter is not a context cannot be declared with takes_context=True.
@app.task(takes_context=True)  # type: ignore[arg-type]
def wrong_first(order_id: str) -> None: ...


# using(): each option typed, and the call keeps the task's parameters.
call = charge.using(run_after=timedelta(minutes=5), idempotency_key="charge:o-1", priority=10)
charge_call: TaskCall[[str], dict[str, str]] = call
assert_type(call.enqueue("o-1"), Job)
call.enqueue(1)  # type: ignore[arg-type]
charge.using(priority="high")  # type: ignore[arg-type]
charge.using(isolation="fork")  # type: ignore[arg-type]
charge.using(queue="billing")  # type: ignore[call-arg]
add_call: TaskCall[[int, int], int] = add.using(queue_name="slow").using(priority=1)
add_timed: TaskCall[[int, int], int] = add.using(lease="5m", timeout=timedelta(seconds=30)).using(timeout=None)
assert_type(add.using(connection=object()).enqueue_many([(1,), {"x": 2}]), list[Job])

# Async handlers: the task returns what calling the coroutine function returns.
assert_type(fetch.enqueue("https://example.org"), Job)
fetch.enqueue(b"https://example.org")  # type: ignore[arg-type]


async def produce() -> None:
    assert_type(await charge.aenqueue("o-1"), Job)
    await charge.aenqueue(2)  # type: ignore[arg-type]


# Options of @app.task are checked by name and type.
app.task(name="timed", lease="5m", timeout=90, isolation="process")(plain)
app.task(retries=3)  # type: ignore[call-overload]
app.task(isolation="fork")  # type: ignore[call-overload]


def register_later(handler: Callable[..., None], with_context: bool) -> Task[..., None]:
    # takes_context known only at run time: the task takes any arguments.
    return app.task(takes_context=with_context)(handler)


# Workflows: the builder takes a task or a task with options; its arguments are checked at run time.
wf = app.workflow("nightly-report")
assert_type(wf, Workflow)
orders = wf.add(add, 1, name="orders")
refunds = wf.add(add.using(queue_name="slow"), 2, name="refunds")
wf.add(charge, "o-1", after=[orders, refunds], when="finished")
wf.add(print, "not a task")  # type: ignore[arg-type]
wf.add(add, 1, after=[1])  # type: ignore[list-item]
chained = wf.chain((fetch, "https://example.org"), add, charge.using(priority=1))
assert_type(orders, Step)
assert_type(chained, list[Step])
assert_type(wf.batch(add, [(1,), (2,)], then=charge), tuple[list[Step], Step])
assert_type(wf.enqueue(), Run)
