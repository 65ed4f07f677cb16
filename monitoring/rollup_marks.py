"""Rollup bookkeeping for samples that arrive late: the buckets they fall in, already
rolled up, are marked dirty so the next rollup run makes them again."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Q

from .models import RollupCursor


def note_late(oldest_t: float | None) -> None:
    """Samples older than what the rollups already cover make those buckets dirty.
    Rollups trail real time by ROLLUP_DELAY_S, so fresh samples need no check."""
    if oldest_t is None or time.time() - oldest_t < float(getattr(settings, "ROLLUP_DELAY_S", 30)):
        return
    oldest = datetime.fromtimestamp(oldest_t, tz=UTC)
    RollupCursor.objects.filter(done_until__gt=oldest).filter(
        Q(dirty_from__isnull=True) | Q(dirty_from__gt=oldest)
    ).update(dirty_from=oldest)
