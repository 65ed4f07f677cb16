"""The alert rules' version: what lets ingest keep its rules until one changes.

A token in Django's cache (Redis when REDIS_URL is set, so every worker shares it; the
process's memory otherwise) that every change of an alert rule replaces once its
transaction commits: a reader that sees the new token reads the committed rules. Saves
and deletes of ``AlertRule`` (cascades included) change it through signals (apps.py);
writes that send no signals (``bulk_create``, ``QuerySet.update``) call ``changed()``.

A missing token (cache flushed or evicted) is answered with a fresh one, so readers
read again; a change whose token is lost (the cache unreachable at that moment) is
caught by the readers' safety re-read (``ALERT_RULES_MAX_AGE_S``).
"""

from __future__ import annotations

import logging
import uuid

from django.core.cache import cache
from django.db import transaction

KEY = "monitoring:alert_rules:version"

log = logging.getLogger(__name__)


def shared() -> bool:
    """Whether every server process reads the same cache. The in-process default
    (LocMemCache, no REDIS_URL) is each process's own: a change made in another
    process reaches this one only through the readers' safety re-read."""
    from django.core.cache import caches
    from django.core.cache.backends.dummy import DummyCache
    from django.core.cache.backends.locmem import LocMemCache

    return not isinstance(caches["default"], LocMemCache | DummyCache)


def version() -> str:
    """The current token; a fresh one when the cache holds none (or cannot be read:
    readers then read the rules again each time)."""
    try:
        found = cache.get(KEY)
        if found is None:
            fresh = uuid.uuid4().hex
            found = fresh if cache.add(KEY, fresh, timeout=None) else (cache.get(KEY) or fresh)
        return found
    except Exception:  # the cache is down: re-reading the rules is the safe answer
        log.warning("alert rules version unreadable; reading the rules again", exc_info=True)
        return uuid.uuid4().hex


def bump() -> None:
    """A new token now (call it after the commit: see ``changed``)."""
    try:
        cache.set(KEY, uuid.uuid4().hex, timeout=None)
    except Exception:  # lost: readers re-read within ALERT_RULES_MAX_AGE_S anyway
        log.warning("alert rules version not bumped", exc_info=True)


def changed(using: str | None = None) -> None:
    """Alert rules changed in the current transaction: a new token once it commits
    (at once outside a transaction; never if it rolls back)."""
    transaction.on_commit(bump, using=using)


def rule_saved_or_deleted(sender, instance, using=None, **kwargs) -> None:
    """post_save / post_delete receiver for ``AlertRule``."""
    changed(using)
