"""'did you mean ...?' for a name that is not known: a typo should be named, with its fix."""

from __future__ import annotations

import difflib
from typing import Iterable


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to `name`, if one is close enough to be the one meant."""
    matches = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' (did you mean 'email'?)', or '' when nothing known is close."""
    match = nearest(name, known)
    return f" (did you mean {match!r}?)" if match else ""
