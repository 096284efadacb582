"""leased's storage conformance suite (leased.testing.conformance) on every backend: each check
drives the ports directly, on a fresh database of its own."""

from __future__ import annotations

import pytest

from leased.backends import connect
from leased.testing.conformance import CHECKS, exercise


@pytest.mark.parametrize("check", CHECKS)
def test_conformance(check, database_url):
    exercise(lambda: connect(database_url), only=[check])
