"""Retry delays: exponential backoff with jitter, a pure function of the attempt number."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from leased.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before the next attempt: base * factor ** (attempt - 1), capped, then spread by jitter.

    `jitter` is the fraction by which the delay may be moved either way, so that many jobs that
    failed together (a relay briefly down) do not all come back in the same second.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 3600.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0:
            raise ConfigurationError("Backoff base and cap must be >= 0 seconds")
        if self.factor < 1:
            raise ConfigurationError("Backoff factor must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError("Backoff jitter must be between 0 and 1")

    def delay(self, attempt: int, uniform: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt number `attempt` (1 for the first attempt)."""
        exponent = max(attempt - 1, 0)
        # factor ** exponent overflows a float for absurd attempt numbers; the cap applies anyway.
        try:
            raw = self.base * self.factor**exponent
        except OverflowError:
            raw = self.cap
        bounded = min(self.cap, raw)
        return bounded * (1 - self.jitter + 2 * self.jitter * uniform())
