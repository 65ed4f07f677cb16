"""Repeated anonymous refusals counted per source address and minute, then written as one
event each: no chain row, no chain lock per refusal."""

from __future__ import annotations

import json
from datetime import datetime

from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from console import request_context as context

from .models import (
    Outcome,
    RefusalTally,
)
from .recording import record_event
from .redaction import clean_text, scrub


def record_refusal(*, action: str, details: dict | None = None, now: datetime | None = None) -> None:
    """Count an anonymous refusal against this request's source address and minute; no
    chain row, no chain lock. ``flush_refusals`` writes each finished minute as one
    event with the count (details of the minute's first refusal)."""
    now = now or timezone.now()
    minute = now.replace(second=0, microsecond=0)
    key = {"minute": minute, "action": clean_text(action, 64), "source_ip": context.current().source_ip or ""}
    if RefusalTally.objects.filter(**key).update(count=F("count") + 1):
        return
    try:
        with transaction.atomic():
            RefusalTally.objects.create(**key, count=1, user_agent=clean_text(context.current().user_agent, 400),
                                        details=json.loads(json.dumps(scrub(details or {}))))
    except IntegrityError:  # another worker counted this minute's first one meanwhile
        RefusalTally.objects.filter(**key).update(count=F("count") + 1)


def flush_refusals(*, now: datetime | None = None) -> int:
    """One ``outcome=denied`` event per counted (action, source, minute) that has ended;
    returns how many were written."""
    current = (now or timezone.now()).replace(second=0, microsecond=0)
    written = 0
    while True:
        with transaction.atomic():
            tally = (RefusalTally.objects.select_for_update(skip_locked=True)
                     .filter(minute__lt=current).order_by("minute", "id").first())
            if tally is None:
                return written
            source = context.RequestContext(source_ip=tally.source_ip or None, user_agent=tally.user_agent)
            with context.bound(source):
                record_event(
                    actor="agent" if tally.action.startswith("agent.") else AnonymousUser(),
                    action=tally.action, outcome=Outcome.DENIED,
                    details={**tally.details, "count": tally.count, "minute": tally.minute.isoformat()},
                )
            tally.delete()
            written += 1
