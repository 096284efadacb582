"""A short run of bench/isolation.py (the long one: 200 CPU-bound and 2,000 no-op jobs a round,
beside Celery's prefork pool): a real `leased worker` drains CPU-bound and no-op jobs on threads and
isolated, and `--processes 2` drains the CPU-bound ones. Checks that the bench still runs and every
job ended, not its figures."""

from __future__ import annotations

import pytest

from paths import BENCH

pytestmark = [pytest.mark.slow, pytest.mark.system]


def test_isolation_bench_short_run(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import isolation

    loops = isolation.calibrate(0.002)
    for kind, jobs in (("cpu", 20), ("noop", 100)):
        for where in ("thread", "process"):
            assert isolation.leased_drain(kind, jobs, where, loops) > 0
    assert isolation.leased_drain("cpu", 20, "thread", loops, processes=2) > 0, "--processes 2, side by side"
