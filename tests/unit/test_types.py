"""The type checker over the library and over what a user's checker sees of it.

`mypy` checks src/leased as pyproject.toml's [tool.mypy] says (the public API's modules strictly);
tests/typing/ holds code written as a user would, checked with `mypy --strict`: its `assert_type`s and
its expected errors (`# type: ignore[code]`, with unused ones reported) pin the public signatures,
among them the README's `charge.enqueue("o-1")` for a handler declared with takes_context=True.
"""

from __future__ import annotations

import subprocess
import sys

from paths import ROOT


def mypy(*arguments: str) -> subprocess.CompletedProcess[str]:
    # In a subprocess: mypy's cache (.mypy_cache) makes a second run take seconds, and its state
    # stays out of the suite's process.
    return subprocess.run([sys.executable, "-m", "mypy", *arguments], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_the_library_passes_its_type_checker():
    checked = mypy()
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_users_strict_checker_sees_the_public_signatures():
    # The typing file imports leased as an installed package, so this also fails without py.typed.
    # A cache of its own: --strict changes the options of every module, which would void the
    # library check's cache each time one ran after the other.
    checked = mypy("--strict", "--no-warn-unused-configs", "--cache-dir", ".mypy_cache/strict", "tests/typing")
    assert checked.returncode == 0, checked.stdout + checked.stderr
