"""Options and argument types the commands share."""

from __future__ import annotations

from typing import Any, Callable

import click

from leased.cli.supervisor import process_count
from leased.durations import parse_duration


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


def database_option(function: Callable) -> Callable:
    return click.option("--database", metavar="URL", envvar="LEASED_DATABASE_URL",
                        help="Database URL, instead of APP (default: $LEASED_DATABASE_URL).")(function)
