"""A benchmark's own virtualenv: created on first use, reinstalled when its inputs change, then the
script re-runs itself there. The peers never touch leased's own environment or test dependencies."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def inside(venv: Path) -> bool:
    return Path(sys.prefix).resolve() == venv.resolve()


def bootstrap(venv: Path, requirements: Path, extras: str, script: Path) -> None:
    """Create `venv`, install `requirements` and leased from this checkout (with `extras`), re-exec there."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv.relative_to(BENCH.parent)} with Python {sys.version.split()[0]}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    inputs = requirements.read_bytes() + (BENCH.parent / "pyproject.toml").read_bytes() + extras.encode()
    stamp, wanted = venv / ".installed", hashlib.sha256(inputs).hexdigest()
    if not stamp.exists() or stamp.read_text() != wanted:
        print(f"installing {requirements.name} and leased into {venv.name}", flush=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run(pip + ["-r", str(requirements)], check=True)
        subprocess.run(pip + ["-e", f"{BENCH.parent}[{extras}]"], check=True)
        stamp.write_text(wanted)
    os.execv(str(python), [str(python), str(script), *sys.argv[1:]])


# The venv of bench/run.py and bench/scale.py: the peers, and leased with what the worker, the
# MariaDB peer and the dashboard need. Python 3.12+: oban-py and Django 6.1 (django-ox) need it.
VENV = BENCH / ".venv"
EXTRAS = "postgres,mariadb,web"


def bootstrap_bench(script: Path) -> None:
    """Re-run `script` in bench/.venv, creating or updating it first; refuse a Python below 3.12."""
    if sys.version_info < (3, 12):
        sys.exit(f"{script.name} needs Python 3.12+ (oban-py, Django 6.1), this is {sys.version.split()[0]}: "
                 "run it with python3.12 (where pyenv manages Pythons: PYENV_VERSION=3.12.1 python3.12)")
    bootstrap(VENV, BENCH / "requirements.txt", EXTRAS, script)
