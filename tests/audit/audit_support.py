"""Helpers shared by the audit tests."""

import pytest
from django.conf import settings

from audit.models import AuditEvent

on_postgres = pytest.mark.skipif(
    "postgresql" not in settings.DATABASES["default"]["ENGINE"], reason="PostgreSQL only"
)


def head_seq() -> int:
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def events_after(seq: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=seq).order_by("seq"))


def last_event() -> AuditEvent:
    return AuditEvent.objects.order_by("-seq").first()
