"""JSON encoding of job arguments and results. Never pickle: any producer and the dashboard can read them."""

from __future__ import annotations

import json
from dataclasses import dataclass
# The C encoder behind json.dumps, which typeshed leaves out of json.encoder's stub.
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from json.scanner import make_scanner
from typing import Any, Callable

from leased.errors import PayloadError

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


# One encoder for every call: json.dumps() with options builds a new one each time, which costs
# as much as encoding a few small arguments.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _encoder_without_markers() -> Callable[[Any], str]:
    """_dumps for arguments, without what each call of it costs besides the encoding.

    JSONEncoder.encode() builds json's C encoder anew for every value (so that each call has its own
    markers, the containers being encoded, which find circular references); that costs more than
    encoding a job's few arguments. This one is built once, with no markers: nothing is shared
    between threads, and a circular reference fails as RecursionError, which encode_arguments
    then names through _dumps. Where json has no C encoder, it is _dumps."""
    if c_make_encoder is None:
        return _dumps
    encode = c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", False, False, False)

    def encoded(value: Any) -> str:
        return "".join(encode(value, 0))

    return encoded


_dumps_arguments = _encoder_without_markers()


def _check_json(value: Any, where: str) -> None:
    try:
        _dumps(value)
    except RecursionError:
        raise PayloadError(f"{where} is nested too deeply to store as JSON; flatten it, or pass an id") from None
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


def _non_str_key(value: Any) -> tuple[list[Any], Any] | None:
    """(path, key) of the first dict key in `value` that is not a str, or None."""
    pending: list[tuple[list[Any], Any]] = [([], value)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return path, key
                pending.append(([*path, key], inner))
        elif isinstance(item, (list, tuple)):
            pending.extend(([*path, index], inner) for index, inner in enumerate(item))
    return None


def _check_keys(args: tuple | list, kwargs: dict[str, Any]) -> None:
    for where, value in [*((f"argument {position}", value) for position, value in enumerate(args)),
                         *((f"keyword argument {name!r}", value) for name, value in kwargs.items())]:
        found = _non_str_key(value)
        if found is not None:
            path, key = found
            inside = "".join(f"[{part!r}]" for part in path)
            arrives_as = next(iter(json.loads(_dumps({key: None}))))
            raise PayloadError(f"{where}{inside} has the key {key!r} ({type(key).__name__}), but JSON objects have "
                               f"str keys only: it would arrive as {arrives_as!r}; make the keys strings, or pass "
                               "a list of pairs")


def encode_arguments(args: tuple | list, kwargs: dict[str, Any], limit: int) -> tuple[str, str]:
    """Encode arguments as two JSON documents, naming the first argument that cannot be stored."""
    # Valid arguments, the common case, are encoded once; each value is looked at on its own only
    # to name the culprit, since a list or dict fails to encode only where one of its parts does.
    try:
        args_json, kwargs_json = _dumps_arguments(list(args)), _dumps_arguments(kwargs) if kwargs else "{}"
    except (TypeError, ValueError, RecursionError):
        _check_each(args, kwargs)
        raise
    if kwargs and not all(isinstance(name, str) for name in kwargs):  # json turns a name 1 into "1"
        _check_each(args, kwargs)
    # json also turns a key 1 into "1" inside a value, so {1: "a"} would arrive as {"1": "a"}. Only
    # payloads with an object in them are walked: the scan of the text is cheap, the walk is not.
    if "{" in args_json or kwargs_json.find("{", 1) != -1:
        _check_keys(args, kwargs)
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


# The C scanner behind json.loads, called directly: a worker decodes two values per job (its
# arguments), and json.loads's Python layers around the scan cost more than the scan of "[1]".
# typeshed types the scanner's argument as the scanner class itself; the C function takes a decoder.
_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def decode(text: str | None) -> Any:
    if text == "{}":  # the keyword arguments of most jobs
        return {}
    if text is None:
        return None
    try:
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError, TypeError, RecursionError):
        pass  # not plain JSON from end to end (or not JSON): json.loads decides, and explains
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as error:  # another program's row, nested past any depth
        return Unreadable(str(text), f"{type(error).__name__}: {error}")


def clean_text(text: str | None, limit: int) -> str | None:
    """Make error text safe to store: no NUL bytes (PostgreSQL refuses them), at most `limit` characters."""
    if text is None:
        return None
    text = text.replace("\x00", "\\x00")
    if len(text) > limit:
        cut = len(text) - limit
        text = text[: limit // 2] + f"\n... [{cut} characters cut] ...\n" + text[-limit // 2 :]
    return text
