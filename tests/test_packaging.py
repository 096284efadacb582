"""The wheel users install: it carries py.typed (so their checker reads our annotations), and its
version is leased.__version__, the one place the version is written (pyproject reads it)."""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import leased

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_is_typed_and_versioned_from_the_package(tmp_path):
    # pip builds it as a user's pip would, in an isolated environment with hatchling (from pip's cache).
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("leased-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        version = email.message_from_bytes(archive.read(metadata))["Version"]
    assert "leased/py.typed" in names
    assert version == leased.__version__
    assert wheel.name.startswith(f"leased-{leased.__version__}-")
