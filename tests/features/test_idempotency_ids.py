"""What an idempotent duplicate costs in job ids, on every backend, as the tutorial says: no row,
but the refused insert advances the id counter (PostgreSQL's identity sequence, SQLite's
AUTOINCREMENT, MariaDB's AUTO_INCREMENT), so ids have gaps."""

from __future__ import annotations


def test_a_duplicate_writes_no_row_but_uses_up_a_job_id(app, backend_name):
    @app.task(name="once")
    def once(n: int) -> None: ...

    first = once.using(idempotency_key="k").enqueue(1)
    assert once.using(idempotency_key="k").enqueue(2).id == first.id
    after_single = once.enqueue(3)
    assert once.using(idempotency_key="k").enqueue_many([(4,)])[0].id == first.id
    after_batch = once.enqueue(5)
    assert len(app.list_jobs()) == 3  # the duplicates wrote no row
    gaps = [after_single.id - first.id - 1, after_batch.id - after_single.id - 1]
    # MariaDB's count depends on innodb_autoinc_lock_mode (at least one id either way).
    assert gaps == [1, 1] if backend_name != "mariadb" else min(gaps) >= 1, gaps
