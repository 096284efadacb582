"""A short run of bench/transactional.py (the long one: 5,000 jobs a round, three databases): the
transactional and the plain drain of 200 one-row handlers, and SQLite's other writer beside each.
Checks that the bench still runs and that every job wrote its row, not its figures."""

from __future__ import annotations

import pytest

from paths import BENCH

pytestmark = [pytest.mark.slow, pytest.mark.system]


def test_transactional_bench_short_run(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import transactional

    assert transactional.drain("sqlite", 200, True) > 0
    assert transactional.drain("sqlite", 200, False) > 0
    seen = transactional.sqlite_writer_latency(40, 2.0, True)
    assert seen["enqueues"] > 0 and seen["p99_ms"] >= seen["p50_ms"] > 0
