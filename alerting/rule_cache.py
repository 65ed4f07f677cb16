"""The alert rules' version: what lets ingest keep its rules until one changes.

A token in Redis when REDIS_URL is set (every worker shares it; read with a short
timeout), else in Django's cache (the process's memory), that every change of an alert rule replaces once its
transaction commits: a reader that sees the new token reads the committed rules. Saves
and deletes of ``AlertRule`` (cascades included) change it through signals (apps.py);
writes that send no signals (``bulk_create``, ``QuerySet.update``) call ``changed()``.

A missing token (cache flushed or evicted) is answered with a fresh one, so readers
read again; a change whose token is lost (the cache unreachable at that moment) is
caught by the readers' safety re-read (``ALERT_RULES_MAX_AGE_S``).
"""

from __future__ import annotations

import logging
import time
import uuid

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

KEY = "monitoring:alert_rules:version"

log = logging.getLogger(__name__)


def shared() -> bool:
    """Whether every server process reads the same version: Redis. Without REDIS_URL it
    lives in each process's own cache, and a change made in another process reaches
    this one only through the readers' safety re-read."""
    return bool(settings.REDIS_URL)


# Ingest reads the version inside its write transaction, once per flush: with Redis it
# does so through a client of its own that gives up after READ_TIMEOUT_S (the shared
# clients wait REDIS_SOCKET_TIMEOUT_S, long enough to stall every writer), and after a
# failure it stops asking for RETRY_AFTER_S (reading the rules from the database meanwhile).
READ_TIMEOUT_S = 0.5
RETRY_AFTER_S = 5.0
_client = None  # (url, redis.Redis)
_down_until = 0.0


def _redis():
    """The version's Redis client (short timeouts), or None without REDIS_URL."""
    global _client
    url = settings.REDIS_URL
    if not url:
        return None
    if _client is None or _client[0] != url:
        import redis

        _client = (url, redis.Redis.from_url(url, socket_timeout=READ_TIMEOUT_S,
                                             socket_connect_timeout=READ_TIMEOUT_S))
    return _client[1]


def _get() -> str | None:
    client = _redis()
    if client is None:
        return cache.get(KEY)
    found = client.get(KEY)
    return None if found is None else found.decode()


def _add(value: str) -> bool:
    client = _redis()
    return cache.add(KEY, value, timeout=None) if client is None else bool(client.set(KEY, value, nx=True))


def _set(value: str) -> None:
    client = _redis()
    if client is None:
        cache.set(KEY, value, timeout=None)
    else:
        client.set(KEY, value)


def version() -> str:
    """The current token; a fresh one when none is stored (or it cannot be read:
    readers then read the rules again each time)."""
    global _down_until
    if time.monotonic() < _down_until:
        return uuid.uuid4().hex
    try:
        found = _get()
        if found is None:
            fresh = uuid.uuid4().hex
            found = fresh if _add(fresh) else (_get() or fresh)
        return found
    except Exception:  # unreachable: re-reading the rules is the safe answer
        _down_until = time.monotonic() + RETRY_AFTER_S
        log.warning("alert rules version unreadable; reading the rules from the database for %.0f s",
                    RETRY_AFTER_S, exc_info=True)
        return uuid.uuid4().hex


def bump() -> None:
    """A new token now (call it after the commit: see ``changed``)."""
    try:
        _set(uuid.uuid4().hex)
    except Exception:  # lost: readers re-read within ALERT_RULES_MAX_AGE_S anyway
        log.warning("alert rules version not bumped", exc_info=True)


def changed(using: str | None = None) -> None:
    """Alert rules changed in the current transaction: a new token once it commits
    (at once outside a transaction; never if it rolls back)."""
    transaction.on_commit(bump, using=using)


def rule_saved_or_deleted(sender, instance, using=None, **kwargs) -> None:
    """post_save / post_delete receiver for ``AlertRule``."""
    changed(using)


def precision_saved(sender, instance, using=None, update_fields=None, created=False, raw=False, **kwargs) -> None:
    """post_save receiver for ``Instance``: a new precision changes the TFLOP/s basis
    ingest keeps with the rules (``instances.lifecycle.set_precision`` names the field)."""
    if not created and not raw and (update_fields is None or "precision" in update_fields):
        changed(using)
