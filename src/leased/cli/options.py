"""Options and argument types the commands share."""

from __future__ import annotations

from typing import Any, Callable

import click

from leased.cli.supervisor import process_count
from leased.digits import whole_number
from leased.durations import parse_duration


class Id(click.ParamType):
    """A job's or a workflow's id: 1-18 digits (click's int took 20 digits to SQLite, a traceback)."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = value if isinstance(value, int) else whole_number(str(value))
        if number is None:
            self.fail(f"{str(value)[:40]!r} is not an id: use a whole number of at most 18 digits", param, ctx)
        return number


class Duration(click.ParamType):
    """250ms, 10s, 5m, 2h, 1d or a plain number of seconds, as float seconds."""

    name = "duration"

    def __init__(self, positive: bool = False):
        self.positive = positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(value)
            except ValueError as error:
                self.fail(str(error), param, ctx)
        if self.positive and seconds <= 0:
            self.fail(f"{value!r} must be more than zero", param, ctx)
        return seconds


class ProcessCount(click.ParamType):
    """--processes: a whole number from 1, or `auto` (one per core this process may run on)."""

    name = "processes"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return process_count(str(value))
        except ValueError as error:
            self.fail(f"{error}; e.g. --processes 4, or --processes auto for one per core", param, ctx)


class ByteSize(click.ParamType):
    """512MB, 2GB, 300KiB or a plain number of bytes, as int bytes (KB, MB, GB: powers of 1024, as RSS is shown)."""

    name = "size"
    UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024 ** 2, "MB": 1024 ** 2, "MIB": 1024 ** 2,
             "G": 1024 ** 3, "GB": 1024 ** 3, "GIB": 1024 ** 3}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper()
        number = text.rstrip("KMGIB")
        unit = text[len(number):]
        try:
            size = int(float(number) * self.UNITS[unit])
        except (ValueError, KeyError):
            self.fail(f"{value!r} is not a size; e.g. 512MB or 2GB", param, ctx)
        if size < 1:
            self.fail(f"{value!r} must be more than zero", param, ctx)
        return size


def database_option(function: Callable) -> Callable:
    return click.option("--database", metavar="URL", envvar="LEASED_DATABASE_URL",
                        help="Database URL, instead of APP (default: $LEASED_DATABASE_URL).")(function)
