"""The overview's throughput chart: bar geometry computed here, drawn as SVG by the template.

Server-rendered, so there is no script or build step. Counts come from Leased.throughput(), which
reads the per-minute counts kept as jobs finish, so the bars stay right after finished jobs are
deleted, and cost the same at ten jobs a minute or ten thousand.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from leased.backends.ports import Throughput

WIDTH, HEIGHT = 720, 120
GAP = 1.0  # between bars


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    label: str  # the bar's tooltip


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int  # jobs in the busiest minute: the top of the scale
    done: int
    failed: int
    minutes: int


def throughput_chart(rows: list[Throughput], minutes: int = 60, now: datetime | None = None) -> Chart:
    """One bar per minute for the last `minutes`, done below failed, on one scale."""
    last = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    first = last - timedelta(minutes=minutes - 1)
    done, failed = [0] * minutes, [0] * minutes
    for row in rows:
        index = int((row.minute - first).total_seconds() // 60)
        if 0 <= index < minutes:
            done[index] += row.done
            failed[index] += row.failed
    peak = max((d + f for d, f in zip(done, failed, strict=True)), default=0)
    scale = HEIGHT / peak if peak else 0.0
    step = WIDTH / minutes
    bars = []
    for index, (d, f) in enumerate(zip(done, failed, strict=True)):
        done_height, failed_height = d * scale, f * scale
        minute = (first + timedelta(minutes=index)).strftime("%H:%M UTC")
        bars.append(Bar(index * step, step - GAP, HEIGHT - done_height, done_height,
                        HEIGHT - done_height - failed_height, failed_height,
                        f"{minute}: {d:,} done, {f:,} failed"))
    return Chart(WIDTH, HEIGHT, bars, peak, sum(done), sum(failed), minutes)
