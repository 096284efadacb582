"""Two apps on one database sharing a task name: live workers that register one name with different
signatures are named, by a starting worker's log, `app.workers()` and `leased workers` (test_cli) and
the dashboard's Workers page (test_web), on every backend."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from leased import TaskContext
from leased.backends.ports import WorkerRecord
from leased.task_signatures import signature_clashes, signature_text
from leased.testing import advance

from conftest import running_worker, wait_for

SHOP = "(order_id: int)"
FASTAPI = "(user: str, amount: int)"


def register(app, worker_id: str, signatures: dict[str, str] | None) -> None:
    """A worker's row as that worker writes it (None: as code from before the signatures writes it)."""
    app.backend.register_worker(WorkerRecord(
        worker_id, "host-1", 4242, 4, None, tuple(signatures or ("send_receipt",)),
        task_signatures=None if signatures is None else json.dumps(signatures)))


def test_two_live_workers_with_two_signatures_of_one_task_are_named(app):
    register(app, "shop:1:a", {"send_receipt": SHOP, "ship": "()"})
    register(app, "fastapi:2:b", {"send_receipt": FASTAPI, "ship": "()"})
    register(app, "shop:3:c", {"send_receipt": SHOP})
    register(app, "old:4:d", None)  # nothing stored to compare
    assert {worker.id: worker.task_signatures.get("send_receipt") for worker in app.workers()} == {
        "shop:1:a": SHOP, "fastapi:2:b": FASTAPI, "shop:3:c": SHOP, "old:4:d": None}
    (clash,) = signature_clashes(app.workers())
    assert (clash.task_name, clash.worker_id, clash.signature, clash.other_worker_id, clash.other_signature) == (
        "send_receipt", "shop:1:a", SHOP, "fastapi:2:b", FASTAPI)
    assert str(clash).startswith("task send_receipt has two signatures among live workers: (order_id: int) on "
                                 "worker shop:1:a, (user: str, amount: int) on worker fastapi:2:b. ")
    assert "queues of its own" in str(clash) and "a schema or database per app" in str(clash)
    (mine,) = signature_clashes(app.workers(), involving="fastapi:2:b")
    assert (mine.worker_id, mine.other_worker_id) == ("fastapi:2:b", "shop:1:a")
    assert signature_clashes(app.workers(), involving="old:4:d") == []


def test_workers_gone_silent_clash_with_no_one(app):
    register(app, "shop:1:a", {"send_receipt": SHOP})
    register(app, "fastapi:2:b", {"send_receipt": FASTAPI})
    advance(app, 60)  # both silent past WORKER_SILENT_AFTER: shown as gone
    assert [worker.alive for worker in app.workers()] == [False, False]
    assert signature_clashes(app.workers()) == []


def test_a_starting_worker_warns_of_a_live_peer_with_another_signature(app, caplog):
    caplog.set_level(logging.WARNING, logger="leased.worker")

    @app.task(name="send_receipt")
    def send_receipt(order_id: int) -> None: ...

    @app.task(name="ship")
    def ship() -> None: ...

    register(app, "fastapi:2:b", {"send_receipt": FASTAPI, "ship": "()"})
    register(app, "shop:3:c", {"send_receipt": SHOP, "ship": "(carrier: str)"})

    def warnings() -> list[str]:
        return [record.getMessage() for record in caplog.records if "two signatures" in record.getMessage()]

    # A worker that lives until it has looked at its peers (a run_until_empty() with nothing to do
    # may end before its first beat does).
    with running_worker(app):
        wait_for(lambda: len(warnings()) == 2, message="the starting worker's two warnings")
    receipt, shipping = sorted(warnings(), key=lambda line: "task ship " in line)
    assert "task send_receipt has two signatures among live workers: (order_id: int) on worker " in receipt
    assert "(user: str, amount: int) on worker fastapi:2:b" in receipt and "queues of its own" in receipt
    assert "shop:3:c" not in receipt  # a peer with the same signature is not named
    assert "task ship has two signatures" in shipping and "(carrier: str) on worker shop:3:c" in shipping
    assert "fastapi:2:b" not in shipping


@dataclass
class Order:
    order_id: int


def test_a_signature_reads_as_the_caller_passes_its_arguments():
    def plain(order_id, email=None, *, urgent: bool = False, **options): ...

    def with_context(context: TaskContext, order: Order, note: str = "x", sink: object = object()): ...

    def positional(first, /, *rest: int): ...

    assert signature_text(plain, takes_context=False) == "(order_id, email=None, *, urgent: bool = False, **options)"
    # The annotation as written (a string here, under `from __future__ import annotations`); a default
    # whose repr holds an address would differ per process, so it is not shown.
    assert signature_text(with_context, takes_context=True) == "(order: Order, note: str = 'x', sink: object = ...)"
    assert signature_text(positional, takes_context=False) == "(first, /, *rest: int)"
