"""Where things are, for the tests and the programs they start. The test files sit one folder down,
in their layer (tests/unit, tests/features, ...), and may move between layers: they take their paths
from here rather than from their own place. Imports nothing of leased, so bench/ can use it too."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SRC = ROOT / "src"
PROGRAMS = TESTS / "programs"  # what the tests start as processes: python FILE, or `leased worker MODULE:app`
BENCH = ROOT / "bench"
EXAMPLES = ROOT / "examples"

# The folders test files live in, and what goes where: CONTRIBUTING.md, "The test layers".
LAYERS = ("unit", "conformance", "features", "faces", "system")


def pythonpath(*first: str | Path) -> str:
    """A PYTHONPATH for a program a test starts: what it is given first, then the test programs,
    the support modules they import (tests/), and this checkout's leased (not an installed one)."""
    return os.pathsep.join(str(folder) for folder in (*first, PROGRAMS, TESTS, SRC))
