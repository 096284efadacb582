"""JSON encoding of job arguments and results. Never pickle: any producer and the dashboard can read them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from leased.errors import PayloadError

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


# One encoder for every call: json.dumps() with options builds a new one each time, which costs
# as much as encoding a few small arguments.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _check_json(value: Any, where: str) -> None:
    try:
        _dumps(value)
    except (TypeError, ValueError) as error:
        raise PayloadError(
            f"{where} is not JSON-serializable ({error}); pass plain JSON values "
            "(str, int, float, bool, None, list, dict with str keys), e.g. an id instead of an object"
        ) from None


def _check_each(args: tuple | list, kwargs: dict[str, Any]) -> None:
    for position, value in enumerate(args):
        _check_json(value, f"argument {position} ({type(value).__name__})")
    for name, value in kwargs.items():
        if not isinstance(name, str):
            raise PayloadError(f"keyword argument names must be strings, got {name!r}")
        _check_json(value, f"keyword argument {name!r} ({type(value).__name__})")


def encode_arguments(args: tuple | list, kwargs: dict[str, Any], limit: int) -> tuple[str, str]:
    """Encode arguments as two JSON documents, naming the first argument that cannot be stored."""
    # Valid arguments, the common case, are encoded once; each value is looked at on its own only
    # to name the culprit, since a list or dict fails to encode only where one of its parts does.
    try:
        args_json, kwargs_json = _dumps(list(args)), _dumps(kwargs) if kwargs else "{}"
    except (TypeError, ValueError):
        _check_each(args, kwargs)
        raise
    if kwargs and not all(isinstance(name, str) for name in kwargs):  # json turns a name 1 into "1"
        _check_each(args, kwargs)
    size = len(args_json.encode()) + len(kwargs_json.encode())
    if size > limit:
        raise PayloadError(
            f"job arguments are {size} bytes encoded, over the limit of {limit} bytes; "
            "store large data elsewhere and pass a reference, or raise max_payload_bytes"
        )
    return args_json, kwargs_json


def encode_result(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    _check_json(value, f"the handler's return value ({type(value).__name__})")
    encoded = _dumps(value)
    if len(encoded.encode()) > limit:
        raise PayloadError(f"the handler's return value is {len(encoded.encode())} bytes, over the limit of {limit}")
    return encoded


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored value that is not JSON (a row edited by hand): shown as is, and a job with it fails."""

    text: str
    error: str


def decode(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as error:
        return Unreadable(str(text), str(error))


def clean_text(text: str | None, limit: int) -> str | None:
    """Make error text safe to store: no NUL bytes (PostgreSQL refuses them), at most `limit` characters."""
    if text is None:
        return None
    text = text.replace("\x00", "\\x00")
    if len(text) > limit:
        cut = len(text) - limit
        text = text[: limit // 2] + f"\n... [{cut} characters cut] ...\n" + text[-limit // 2 :]
    return text
