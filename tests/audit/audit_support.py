"""Helpers shared by the audit tests."""

import pytest
from django.conf import settings

from audit import chain, hashing, signing
from audit.models import AuditEvent

# the log's signing key for the whole run (conftest installs it in settings)
SIGNING_PEM = signing.new_private_pem().decode()

on_postgres = pytest.mark.skipif(
    "postgresql" not in settings.DATABASES["default"]["ENGINE"], reason="PostgreSQL only"
)


def head_seq() -> int:
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def events_after(seq: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=seq).order_by("seq"))


def last_event() -> AuditEvent:
    return AuditEvent.objects.order_by("-seq").first()


def rewrite_tail(tamper, first: int, edit: str) -> None:
    """Edit records from #first on and recompute their hashes and the chain head, as
    someone with database superuser rights would: the chain itself verifies again."""
    tamper(edit)
    prev = AuditEvent.objects.get(seq=first - 1).hash if first > 1 else chain.GENESIS_HASH
    for event in AuditEvent.objects.filter(seq__gte=first).order_by("seq"):
        digest = hashing.chain_hash(event, prev)
        tamper("UPDATE audit_auditevent SET prev_hash = %s, hash = %s WHERE seq = %s", [prev, digest, event.seq])
        prev = digest
    tamper("UPDATE audit_chainhead SET hash = %s", [prev])
