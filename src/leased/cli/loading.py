"""Finding the Leased instance a command works on: an APP path to import, or a database URL."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from leased.app import Leased
from leased.backends import parse_database_url
from leased.cli import output


class Failure(click.ClickException):
    """A user-facing error: one line on stderr, exit status 1."""

    def show(self, file: Any = None) -> None:
        output.echo(f"error: {self.format_message()}", err=True)


def load_app(spec: str) -> Leased:
    """Import `module:attribute` and check that it is a Leased instance."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise Failure(f"invalid APP {spec!r}: name a Leased instance as module:attribute, e.g. myproject.jobs:app")
    # Like uvicorn: the current directory first, so that `leased worker tasks:app` finds ./tasks.py
    # also through the installed script, whose sys.path starts at the script's own directory.
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise Failure(f"cannot import {module_name!r} (from APP {spec!r}): no module named {error.name!r} "
                          f"in {os.getcwd()} or on the Python path") from None
        raise Failure(_import_failure(module_name, error)) from None
    except (Exception, SystemExit) as error:  # the module itself is broken: say where, briefly
        raise Failure(_import_failure(module_name, error)) from None
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise Failure(f"module {module_name!r} has no attribute {attribute!r} (APP is module:attribute)") from None
    if not isinstance(target, Leased):
        raise Failure(f"{spec} is {type(target).__name__} {target!r:.40}, not a leased.Leased instance")
    return target


def _import_failure(module_name: str, error: BaseException) -> str:
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{_shown_path(error.filename)}:{error.lineno}"
    else:
        frame = _users_frame(traceback.extract_tb(error.__traceback__))
        where = f"{_shown_path(frame.filename)}:{frame.lineno}" if frame else module_name
    return (f"importing {module_name!r} failed: {type(error).__name__}: {output.one_line(str(error))} (at {where}; "
            f"python -c 'import {module_name}' shows the traceback)")


# Code that is not the user's: the standard library, installed packages, leased itself.
_LIBRARY_PATHS = tuple({sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
                       | {str(Path(__file__).parent.parent)})


def _users_frame(frames: traceback.StackSummary) -> traceback.FrameSummary | None:
    """The innermost frame in the user's own code: where their module raised, or called what raised
    (json.loads, leased's own checks); a standard-library line would tell them nothing."""
    for frame in reversed(frames):
        if not frame.filename.startswith("<") and not frame.filename.startswith(_LIBRARY_PATHS):
            return frame
    return frames[-1] if frames else None


def _shown_path(filename: str) -> str:
    path = Path(filename)
    return str(path.relative_to(os.getcwd())) if path.is_relative_to(os.getcwd()) else filename


def open_app(ctx: click.Context, app_spec: str | None, database: str | None, *, migrating: bool = False) -> Leased:
    """The Leased for commands that need no handlers: from APP, or from --database / $LEASED_DATABASE_URL.

    `migrating`: for `leased migrate`, which must neither auto-migrate nor insist that the database exists.
    """
    explicit_database = ctx.get_parameter_source("database") is not ParameterSource.ENVIRONMENT
    if app_spec and database and explicit_database:
        raise Failure("give APP or --database, not both")
    if app_spec:
        app = load_app(app_spec) if migrating else load_existing_app(app_spec)
        if migrating:  # the app may auto-migrate on first use, which would leave migrate nothing to report
            app = Leased(app.database_url, migrate=False)
    elif database:
        if not migrating:
            _check_sqlite_exists(database, f"--database {database}")
        app = Leased(database, migrate=not migrating)
    else:
        raise Failure("which database? give APP (module:attribute) or --database URL, or set LEASED_DATABASE_URL")
    ctx.call_on_close(app.close)
    return app


def load_existing_app(spec: str) -> Leased:
    """load_app(), refusing an app on a SQLite file that does not exist: every command but
    `migrate` (which creates it) would otherwise create it empty, and a worker would idle there."""
    app = load_app(spec)
    _check_sqlite_exists(app.database_url, spec)
    return app


def _check_sqlite_exists(url: str, migrate_arguments: str) -> None:
    # Opening a SQLite URL creates the file, so a typo, or a relative path from another directory,
    # would show an empty, brand-new database.
    path = parse_database_url(url).sqlite_path
    if path is None or path == ":memory:" or Path(path).exists():
        return
    where = repr(path) if os.path.isabs(path) else f"{path!r} ({os.path.abspath(path)}: the path is relative)"
    raise Failure(f"no SQLite database at {where}; create it with: leased migrate {migrate_arguments}")
