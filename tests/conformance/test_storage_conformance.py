"""leased's storage conformance suite (leased.testing.conformance) on every backend: each check
drives the ports directly, on a fresh database of its own, and together they call every verb."""

from __future__ import annotations

import itertools
from typing import Callable, cast

import pytest

from leased.backends import connect
from leased.backends.ports import Backend
from leased.testing.conformance import CHECKS, Recorder, exercise

# How each variant of a backend opens on a fresh database's URL; the whole suite runs on each. A
# variant that does not apply to the database gives None for it, and its tests skip there.
# PostgreSQL's second form of its write verbs (the shared sequence, beside its one-statement verbs)
# runs the suite in test_postgres_fused.py, on PostgreSQL alone.
VARIANTS: dict[str, Callable[[str], Backend | None]] = {"connect": connect}


@pytest.fixture(params=list(VARIANTS))
def make_backend(request, database_url) -> Callable[[], Backend]:
    """The factory the suite takes: a backend of one variant on this test's database."""
    variant = VARIANTS[request.param]
    probe = variant(database_url)
    if probe is None:
        pytest.skip(f"the {request.param} variant does not apply to {database_url.split(':')[0]}")
    probe.close()
    return lambda: cast(Backend, variant(database_url))


@pytest.mark.parametrize("check", CHECKS)
def test_conformance(check, make_backend):
    exercise(make_backend, only=[check])


def test_the_suite_calls_every_verb_of_every_port(tmp_path):
    """Every verb the Protocols of leased.backends.ports declare is called by some check, through
    a recording proxy around the backend: a verb added to a port without a check fails here."""
    recorder = Recorder()
    databases = itertools.count()
    exercise(lambda: connect(f"sqlite:///{tmp_path / f'jobs-{next(databases)}.db'}"), recorder=recorder)
    uncalled = recorder.uncalled()
    assert not uncalled, "no conformance check calls " + ", ".join(
        f"{port}.{verb}" for verb, port in sorted(uncalled.items()))
    assert len(recorder.called) > 50, "the verbs were read from ports.py"
