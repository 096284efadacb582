"""The test tree's layers hold what CONTRIBUTING.md ("The test layers") says they hold: every test file
is in a layer's folder (or in django/ or typing/, which run as they are), what starts real processes
and servers is in system/ and marked so (the fast loop, -m "not system", leaves exactly that folder
out), and programs/ holds the programs tests start, no tests."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from paths import LAYERS, PROGRAMS, TESTS

OWN_FOLDERS = ("django", "typing")  # suites of their own, in their own shape
SYSTEM_MARK = re.compile(r"^(pytestmark\s*=.*|\s*@)pytest\.mark\.system\b", re.MULTILINE)


def every_test_file() -> list[Path]:
    return sorted(path for path in TESTS.rglob("test_*.py") if "__pycache__" not in path.parts)


def test_every_test_file_is_in_a_layer():
    homes = {*LAYERS, *OWN_FOLDERS}
    astray = [str(path.relative_to(TESTS)) for path in every_test_file()
              if path.relative_to(TESTS).parts[0] not in homes]
    assert not astray, \
        f"test files outside the layers {', '.join(LAYERS)} (CONTRIBUTING.md, 'The test layers'): {astray}"


def test_system_holds_the_files_marked_system_and_only_those():
    layered = [path for path in every_test_file() if path.relative_to(TESTS).parts[0] in LAYERS]
    marked = {path.relative_to(TESTS).as_posix() for path in layered if SYSTEM_MARK.search(path.read_text())}
    in_system = {path.relative_to(TESTS).as_posix() for path in layered if path.parent.name == "system"}
    assert sorted(in_system - marked) == [], "in system/ without pytestmark = pytest.mark.system"
    assert sorted(marked - in_system) == [], "marked system outside system/: move the file there"


def test_programs_holds_no_tests_and_nothing_else_holds_programs():
    assert sorted(path.name for path in PROGRAMS.glob("test_*.py")) == []
    started_by_path = [path.name for pattern in ("*_app.py", "*_handlers.py") for path in TESTS.glob(pattern)]
    assert started_by_path == [], "a program the tests start belongs in tests/programs"


def test_no_two_test_modules_share_a_name():
    # Outside a package, pytest imports a file by its name alone (its folder put first on sys.path),
    # and refuses a second file of the same name; `from test_x import ...` reaches across layers by it.
    loose = [path for path in TESTS.rglob("*.py") if not (path.parent / "__init__.py").exists()]
    assert [name for name, count in Counter(path.name for path in loose).items() if count > 1] == []
