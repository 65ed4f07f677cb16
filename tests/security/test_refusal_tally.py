"""A flood of anonymous refusals is audited as one row per source per minute, with the
count, and the chain still verifies."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from audit.models import AuditEvent, RefusalTally
from audit.refusals import flush_refusals, record_refusal
from audit.verification import run_verification
from console import request_context as context


def refuse_from(ip, n, **kw):
    with context.bound(context.RequestContext(source_ip=ip, user_agent="flood/1")):
        for _ in range(n):
            record_refusal(action="agent.reject", details={"reason": "bad token", "code": "bad_token"}, **kw)


@pytest.mark.django_db
def test_300_refusals_from_one_source_are_one_row(ops):
    before = AuditEvent.objects.count()
    now = timezone.now().replace(second=10)
    refuse_from("198.51.100.7", 300, now=now)
    assert AuditEvent.objects.count() == before  # nothing chained while the minute runs
    assert flush_refusals(now=now) == 0
    assert flush_refusals(now=now + timedelta(minutes=1)) == 1
    event = AuditEvent.objects.get(action="agent.reject")
    assert (event.source_ip, event.user_agent, event.outcome) == ("198.51.100.7", "flood/1", "denied")
    assert event.details["count"] == 300 and event.details["code"] == "bad_token"
    assert not RefusalTally.objects.exists()
    assert run_verification(actor="system").valid


@pytest.mark.django_db
def test_each_source_and_minute_gets_its_own_row(ops):
    now = timezone.now().replace(second=30)
    refuse_from("198.51.100.7", 3, now=now)
    refuse_from("198.51.100.8", 2, now=now)
    refuse_from("198.51.100.7", 4, now=now + timedelta(minutes=1))
    assert flush_refusals(now=now + timedelta(minutes=1)) == 2  # the running minute waits
    assert flush_refusals(now=now + timedelta(minutes=2)) == 1
    rows = AuditEvent.objects.filter(action="agent.reject").order_by("seq")
    assert [(e.source_ip, e.details["count"]) for e in rows] == [
        ("198.51.100.7", 3), ("198.51.100.8", 2), ("198.51.100.7", 4),
    ]


@pytest.mark.django_db(transaction=True)
async def test_bad_agent_connects_are_counted_not_chained(agent_socket, fleet):
    before = await AuditEvent.objects.acount()
    for _ in range(30):
        ws = agent_socket("gph_not-a-token")
        ws.ws.scope["client"] = ["203.0.113.9", 51000]
        assert (await ws.open())[0]
        assert (await ws.closed())[0] == 4401
        await ws.disconnect()
    assert await AuditEvent.objects.acount() == before
    await sync_to_async(flush_refusals)(now=timezone.now() + timedelta(minutes=1))
    rows = [e async for e in AuditEvent.objects.filter(action="agent.reject")]
    assert len(rows) <= 2  # one per minute; the connects may straddle a minute's end
    assert {e.source_ip for e in rows} == {"203.0.113.9"}
    assert sum(e.details["count"] for e in rows) == 30
