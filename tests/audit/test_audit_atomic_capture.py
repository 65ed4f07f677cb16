import pytest
from django.db import DatabaseError, transaction

from audit import recording as audit_recording
from audit.models import AuditEvent, ChainHead
from console import services as console_services
from console.models import Team


def test_a_failed_audit_write_rolls_the_change_back(ops, monkeypatch):
    def refuse(*args, **kwargs):
        raise DatabaseError("audit table unavailable")

    monkeypatch.setattr(audit_recording, "_append", refuse)  # PostgreSQL
    monkeypatch.setattr(audit_recording, "_append_python", refuse)  # elsewhere
    with pytest.raises(DatabaseError):
        console_services.create_team(actor=ops, name="Initech")
    assert not Team.objects.filter(name="Initech").exists()


def test_a_rolled_back_change_leaves_no_event_and_no_gap(ops):
    before = ChainHead.objects.get(id=1).seq
    with pytest.raises(RuntimeError), transaction.atomic():
        console_services.create_team(actor=ops, name="Initech")
        raise RuntimeError("the caller fails after the service")
    assert ChainHead.objects.get(id=1).seq == before
    console_services.create_team(actor=ops, name="Initech")
    assert AuditEvent.objects.get(action="team.create").seq == before + 1
