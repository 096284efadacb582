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
