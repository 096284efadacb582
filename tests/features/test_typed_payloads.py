"""Typed payloads: dataclass and pydantic parameters, validated at enqueue, decoded at run time,
and a stored payload that no longer fits fails at once with a reason `show`, `why` and the
dashboard give. On both backends."""

from __future__ import annotations

import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pydantic
import pytest

from conftest import raw_scalar
from leased import JobStatus, Leased, PayloadError


@dataclass
class Address:
    city: str
    zip_code: str = ""


@dataclass
class Order:
    order_id: int
    amount: float
    address: Address
    tags: list[str] = field(default_factory=list)


class Customer(pydantic.BaseModel):
    email: str
    vip: bool = False
    credit: int


class CustomerAfterDeploy(pydantic.BaseModel):  # a deploy made "plan" required
    email: str
    plan: str


def test_dataclass_arguments_arrive_as_dataclasses_and_are_stored_as_json(app):
    seen = []

    @app.task(name="ship")
    def ship(order: Order, note: str | None = None) -> str:
        seen.append(order)
        return order.address.city

    job = ship.enqueue(Order(7, 9.5, Address("Lyon")), note="fragile")
    ship.enqueue({"order_id": 8, "amount": 1, "address": {"city": "Oslo", "zip_code": "0150"}})  # a dict works too
    assert app.get_job(job.id).args == [{"order_id": 7, "amount": 9.5, "address": {"city": "Lyon", "zip_code": ""},
                                         "tags": []}]
    app.run_until_empty()
    assert seen == [Order(7, 9.5, Address("Lyon")), Order(8, 1, Address("Oslo", "0150"))]
    assert app.get_job(job.id).result == "Lyon"


def test_pydantic_arguments_are_validated_and_decoded(app):
    seen = []

    @app.task(name="welcome", takes_context=True)
    async def welcome(context, customer: Customer, others: list[Customer] | None = None) -> None:
        seen.append((customer, others))

    welcome.enqueue(Customer(email="a@example.com", credit=3), others=[{"email": "b@example.com", "credit": "4"}])
    app.run_until_empty()
    assert seen == [(Customer(email="a@example.com", credit=3), [Customer(email="b@example.com", credit=4)])]
    assert isinstance(seen[0][1][0], Customer)


@pytest.mark.parametrize("call, message", [
    (lambda task: task.enqueue({"email": "x@example.com", "credit": "lots"}),
     r"^welcome2: argument 'customer' \(Customer\), field 'credit': Input should be a valid integer"),
    (lambda task: task.enqueue({"email": "x@example.com"}),
     r"^welcome2: argument 'customer' \(Customer\), field 'credit': Field required"),
    (lambda task: task.enqueue(customer=["not", "a", "dict"]),
     r"^welcome2: argument 'customer' \(Customer\): Input should be a valid dictionary"),
])
def test_invalid_pydantic_arguments_are_refused_at_enqueue_naming_the_field(app, call, message):
    @app.task(name="welcome2")
    def welcome2(customer: Customer) -> None: ...

    with pytest.raises(PayloadError, match=message):
        call(welcome2)
    assert app.count_jobs() == 0


@pytest.mark.parametrize("argument, message", [
    ({"order_id": 1, "amount": 2, "address": {"town": "Lyon"}}, r"field 'address.town': Address has no field 'town'"),
    ({"order_id": 1, "amount": 2}, r"field 'address': field required"),
    ({"order_id": "1", "amount": 2, "address": {"city": "x"}}, r"field 'order_id': expects int, got '1'"),
    ({"order_id": 1, "amount": 2, "address": {"city": 5}}, r"field 'address.city': expects str, got 5"),
    ("order 1", r"argument 'order' \(Order\): expects Order or a dict of its fields, got str"),
])
def test_invalid_dataclass_arguments_are_refused_at_enqueue_naming_the_field(app, argument, message):
    @app.task(name="ship2")
    def ship2(order: Order) -> None: ...

    with pytest.raises(PayloadError, match=message):
        ship2.enqueue(argument)
    assert app.count_jobs() == 0


def test_a_stored_payload_that_no_longer_fits_fails_at_once_and_says_why(app, database_url):
    @app.task(name="charge", max_attempts=5)
    def charge(customer: Customer) -> None: ...

    job = charge.enqueue(Customer(email="a@example.com", credit=3))

    deployed = Leased(database_url)
    try:
        ran = []

        @deployed.task(name="charge", max_attempts=5)
        def charge_after(customer: CustomerAfterDeploy) -> None:
            ran.append(customer)

        stats = deployed.run_until_empty()
        assert ran == [] and (stats.failed, stats.retried) == (1, 0)  # no silent retries
        failed = deployed.get_job(job.id)
        assert failed.status == JobStatus.FAILED and failed.attempt == 1
        assert failed.last_error.startswith("ArgumentsMismatch: stored arguments no longer fit charge: argument "
                                            "'customer' (CustomerAfterDeploy), field 'plan': Field required")
        why = deployed.why(job.id)
        assert why.reasons[0].code == "arguments_mismatch" and "field 'plan'" in why.text
    finally:
        deployed.close()

    show = subprocess.run([sys.executable, "-m", "leased.cli.main", "show", "--database", database_url, str(job.id)],
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    assert "stored arguments no longer fit charge" in show.stdout and "field 'plan'" in show.stdout

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        from leased.web import dashboard
    page = TestClient(dashboard(app)).get(f"/jobs/{job.id}").text
    assert "stored arguments no longer fit charge" in page and "field &#39;plan&#39;" in page


def test_dataclasses_work_without_pydantic_installed(tmp_path):
    script = tmp_path / "no_pydantic.py"
    script.write_text(f"""
import sys
sys.modules["pydantic"] = None  # as if it were not installed: importing it raises ImportError
from dataclasses import dataclass
from leased import Leased, PayloadError

@dataclass
class Point:
    x: int
    y: int

app = Leased("sqlite:///{tmp_path / 'jobs.db'}")
got = []

@app.task(name="plot")
def plot(point: Point) -> None:
    got.append(point)

plot.enqueue(Point(1, 2))
try:
    plot.enqueue({{"x": 1}})
except PayloadError as error:
    print(error)
app.run_until_empty()
print(got)
""")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["plot: argument 'point' (Point), field 'y': field required",
                                       "[Point(x=1, y=2)]"]


def test_types_are_module_level_names_as_for_any_annotation(app):
    @dataclass
    class Local:  # with `from __future__ import annotations`, a local class cannot be resolved
        x: int

    @app.task(name="local")
    def local(value: Local, order: Order) -> None: ...

    assert list(local.argument_types.by_name) == ["order"]


def test_untyped_and_plain_annotated_parameters_are_left_alone(app):
    @app.task(name="plain")
    def plain(a: int, b: dict, *rest: Order, **extra: str) -> None: ...

    assert not plain.argument_types
    job = plain.enqueue(1, {"k": [1]}, {"not": "checked"}, x="y")
    assert raw_scalar(app, f"SELECT count(*) FROM leased_jobs WHERE id = {job.id}") == 1


def test_parameters_annotated_with_a_json_scalar_are_checked_at_enqueue(app):
    @app.task(name="send_order_email")
    def send_order_email(order_id: int, email: str, amount: float = 0.0, note: str | None = None,
                         urgent: bool = False) -> None: ...

    refused = [
        (lambda: send_order_email.enqueue("one", "ada@example.com"),  # '["one", ...]' from the command line
         "send_order_email: argument 'order_id' (int): got str 'one'"),
        (lambda: send_order_email.enqueue(True, "ada@example.com"), "argument 'order_id' (int): got bool True"),
        (lambda: send_order_email.enqueue(1, email=7), "argument 'email' (str): got int 7"),
        (lambda: send_order_email.enqueue(1, "a", "9.5"), "argument 'amount' (float): got str '9.5'"),
        (lambda: send_order_email.enqueue(1, "a", note=3), "argument 'note' (str | None): got int 3"),
        (lambda: send_order_email.enqueue_many([(1, "a"), ("2", "b")]), "argument 'order_id' (int): got str '2'"),
    ]
    for call, message in refused:
        with pytest.raises(PayloadError) as error:
            call()
        assert str(error.value).endswith(message), str(error.value)
    assert app.list_jobs() == []
    fitting = send_order_email.enqueue(1, "ada@example.com", 9, note=None, urgent=True)  # an int is a float
    assert (fitting.args, fitting.kwargs) == ([1, "ada@example.com", 9], {"note": None, "urgent": True})
