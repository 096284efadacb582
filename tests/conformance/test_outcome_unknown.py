"""A connection lost while MariaDB commits: the write may have been kept, and leased says so apart
from "nothing was written" (OutcomeUnknown), so that a producer retries with an idempotency key,
which makes the second try safe. Before, such enqueues raised the plain DatabaseUnavailable that the
docs promised meant nothing was written, and 5 of 63 had been kept.

Deterministic through a proxy (tests/mysql_proxy.py) that lets the server run the COMMIT, or the
INSERT that commits itself, and drops its answer.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from conftest import raw_scalar
from leased import DatabaseUnavailable, Leased, OutcomeUnknown
from mysql_proxy import losing_proxy


@pytest.fixture
def through_proxy(backend_name, database_url):
    if backend_name != "mariadb":
        pytest.skip("the proxy speaks MariaDB's protocol")
    parts = urlsplit(database_url)
    with losing_proxy(parts.hostname, parts.port or 3306) as proxy:
        Leased(database_url).migrate()
        proxied = urlunsplit(parts._replace(netloc=f"{parts.username or 'root'}@127.0.0.1:{proxy.port}"))
        yield proxy, Leased(proxied), Leased(database_url)


@pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
def test_an_enqueue_whose_answer_is_lost_says_its_outcome_is_unknown(through_proxy):
    proxy, app, direct = through_proxy
    task = app.task(name="t")(lambda n: None)
    task.enqueue(0)  # connected, the schema checked
    proxy.lose_after = b"INSERT"  # an enqueue is one INSERT that commits itself
    with pytest.raises(OutcomeUnknown, match="may or may not have kept: retry with an idempotency key") as raised:
        task.enqueue(1)
    assert isinstance(raised.value, DatabaseUnavailable) and "\n" not in str(raised.value)
    assert raw_scalar(direct, "SELECT count(*) FROM leased_jobs") == 2  # it was kept, here
    assert task.enqueue(2).id  # the next call reconnects
    app.close()
    direct.close()


@pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
def test_a_retry_with_the_idempotency_key_after_a_lost_commit_makes_no_second_job(through_proxy):
    """Lost twice: the INSERT of a keyed enqueue (which commits itself), and the COMMIT of a
    workflow's transaction. Each time the producer's second try with the same key finds the first."""
    proxy, app, direct = through_proxy
    task = app.task(name="t")(lambda n: None)
    task.enqueue(0)

    proxy.lose_after = b"INSERT"
    keyed = task.using(idempotency_key="order-1")
    with pytest.raises(OutcomeUnknown):
        keyed.enqueue(1)
    assert proxy.lost.is_set()
    first = keyed.enqueue(1)

    def nightly():
        workflow = app.workflow("nightly", idempotency_key="night-1")
        workflow.add(task, 2, name="a")
        workflow.add(task, 3, name="b")
        return workflow

    proxy.lost.clear()
    proxy.lose_after = b"COMMIT"
    with pytest.raises(OutcomeUnknown):
        nightly().enqueue()
    assert proxy.lost.is_set()
    run = nightly().enqueue()

    assert raw_scalar(direct, "SELECT count(*) FROM leased_jobs WHERE idempotency_key = 'order-1'") == 1
    assert direct.get_job(first.id).idempotency_key == "order-1"
    assert raw_scalar(direct, "SELECT count(*) FROM leased_workflows") == 1 and len(run.job_ids) == 2
    app.close()
    direct.close()
