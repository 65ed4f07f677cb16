"""Read settings from the environment; a bad value stops start-up and names the variable."""

import os
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false)")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
    return value


def envrate(name: str, default: str) -> str:
    """A throttle rate such as 60/min (periods: s, sec, m, min, h, hour, d, day)."""
    raw = os.environ.get(name, default)
    count, _, period = raw.partition("/")
    if not (count.isascii() and count.isdigit() and period[:1] in ("s", "m", "h", "d")):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a rate like 60/min")
    return raw


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise ImproperlyConfigured(f"{name}={raw!r} must name at least one value")
    return items


ROLE_NAMES = ("operator", "admin", "auditor", "member")


def envroles(name: str, default: list[str]) -> list[str]:
    """Role names, comma separated; ``none`` (or empty) for none."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    items = [item.strip().lower() for item in raw.split(",") if item.strip()]
    if items == ["none"]:
        return []
    unknown = [item for item in items if item not in ROLE_NAMES]
    if unknown:
        raise ImproperlyConfigured(f"{name}={raw!r}: unknown role {unknown[0]!r} (use {', '.join(ROLE_NAMES)} or none)")
    return items


def database_from_url(name: str, url: str) -> dict:
    """Turn postgres://user:pass@host:port/db (or sqlite:///path) into a DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        if not parsed.path.strip("/"):
            raise ImproperlyConfigured(f"{name}={url!r} names no database")
        try:
            port = parsed.port
        except ValueError:
            raise ImproperlyConfigured(f"{name}={url!r} has a bad port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            # Django binds parameters on the client, and those queries are never
            # prepared; this lets the few statements run on a server-binding cursor with
            # ``prepare=True`` (the audited append) be prepared once per connection.
            "OPTIONS": {"prepare_threshold": 5},
        }
    if parsed.scheme == "sqlite":
        path = url[len("sqlite://") :].lstrip("/") if url.startswith("sqlite:///") else ""
        if not path:
            raise ImproperlyConfigured(f"{name}={url!r} names no file (use sqlite:////abs/path)")
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": "/" + path}
    raise ImproperlyConfigured(f"{name}={url!r} must start with postgres:// or sqlite:///")


def redis_url(name: str) -> str | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    if urlparse(raw).scheme not in ("redis", "rediss"):
        raise ImproperlyConfigured(f"{name}={raw!r} must start with redis:// or rediss://")
    return raw
