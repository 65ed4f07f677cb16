"""What an audit record may hold: secrets in details redacted (by key and by the look
of the value), control characters escaped, text cut to its column."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from django.conf import settings

SECRET_WORDS = (
    "password", "passwd", "passphrase", "token", "secret", "key", "authorization", "cookie",
    "credential", "session", "signature", "private",
)  # fmt: skip


REDACTED = "[redacted]"


# Values that are secrets whatever their key: our API tokens, agent tokens, bearer headers.
_SECRET_VALUE = re.compile(r"(gpc_|gpa_|Bearer\s+|Token\s+)[A-Za-z0-9_\-.=]{8,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _secret_values() -> tuple[str, ...]:
    return tuple(v for v in (settings.SECRET_KEY, getattr(settings, "AUDIT_SIGNING_KEY", "")) if v)


def _plain(value: str) -> str:
    # PostgreSQL text holds neither NUL nor lone surrogates.
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "\ufffd")


def _scrub_text(value: str, secrets: tuple[str, ...]) -> str:
    value = _plain(value)
    if any(secret in value for secret in secrets):
        return REDACTED
    return _SECRET_VALUE.sub(lambda m: m.group(1) + REDACTED, value)


def scrub(details: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """Details as the database will keep them: secrets redacted by key name or by shape,
    at any depth; values turned into plain JSON that survives a jsonb round trip."""
    if secrets is None:
        secrets = _secret_values()  # once per call, not once per value
    if isinstance(details, dict):
        return {
            _scrub_text(str(k), secrets): (REDACTED if _is_secret_key(str(k)) else scrub(v, secrets))
            for k, v in details.items()
        }
    if isinstance(details, list | tuple | set | frozenset):
        return [scrub(v, secrets) for v in details]
    if isinstance(details, bool) or details is None or isinstance(details, int):
        return details
    if isinstance(details, float):
        if not math.isfinite(details):
            return str(details)
        # jsonb prints 1e+20 as 100000000000000000000, which reads back as an int.
        return int(details) if details.is_integer() and abs(details) >= 1e15 else details
    if isinstance(details, datetime):
        return details.isoformat()
    return _scrub_text(str(details), secrets)


def clean_text(value: str, limit: int) -> str:
    """One-line fields (names, ids, user agent): control characters become visible
    ``\\xNN`` escapes, so no CR/LF or NUL ever reaches a log line, page or CSV cell."""
    if type(value) is str and value.isascii() and value.isprintable():
        return value[:limit]  # the usual case: nothing to escape
    value = _plain(_CONTROL.sub(_escape_control, str(value)))
    return value[:limit]


def _escape_control(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"
