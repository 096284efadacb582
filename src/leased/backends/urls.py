"""Database URLs as they may be shown: in repr(), in error messages, on the command line's output.

Terminals are recorded, logs shipped and error reports pasted into tickets, so a URL is never
shown with its password: `redacted` is the one way a URL reaches a message.
"""

from __future__ import annotations

import re

HIDDEN = "***"
# libpq also takes the password (and the TLS key's) as a query parameter.
_PASSWORD_PARAMETER = re.compile(r"(?<=[?&])((?:ssl)?password=)[^&#]*", re.IGNORECASE)


def redacted(url: str) -> str:
    """`url` with every password replaced by ***: postgresql://ada:***@db/shop.

    A malformed URL is hidden too, since that is the one an error shows: a password with an
    unescaped '/', '?' or '@' reaches up to the last '@'. A URL inside the query (PostgreSQL's
    listen_url=) gets the same treatment.
    """
    shown = "://".join(_without_password(piece) for piece in url.split("://"))
    return _PASSWORD_PARAMETER.sub(lambda match: match.group(1) + HIDDEN, shown)


def passwords(url: str) -> list[str]:
    """The passwords `redacted` hides, as written in the URL, for taking them out of a driver's
    message that quotes a piece of the URL."""
    found = []
    for piece in url.split("://"):
        user_info = _user_info(piece)
        if user_info is not None and ":" in user_info:
            found.append(user_info.partition(":")[2])
    found += [match.group(0).partition("=")[2] for match in _PASSWORD_PARAMETER.finditer(url)]
    return [password for password in found if password]


def scrubbed(text: str, url: str) -> str:
    """`text` (a message about `url`) with the URL shown redacted and its passwords taken out."""
    text = text.replace(url, redacted(url))
    for password in sorted(passwords(url), key=len, reverse=True):
        text = text.replace(password, HIDDEN)
    return text


def _user_info(piece: str) -> str | None:
    """What comes before the '@' of the host: within the authority when that holds an '@' (a
    well-formed URL), else up to the last '@' at all (a password with an unescaped '/' or '?')."""
    authority_end = len(piece)
    for delimiter in "/?#":
        found = piece.find(delimiter)
        if found != -1:
            authority_end = min(authority_end, found)
    at = piece.rfind("@", 0, authority_end)
    if at == -1:
        at = piece.rfind("@")
    return None if at == -1 else piece[:at]


def _without_password(piece: str) -> str:
    user_info = _user_info(piece)
    if user_info is None or ":" not in user_info:
        return piece
    user = user_info.partition(":")[0]
    return f"{user}:{HIDDEN}{piece[len(user_info):]}"
