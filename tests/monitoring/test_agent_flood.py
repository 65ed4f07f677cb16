"""Agents send a frame and wait for its ack; one that keeps sending without waiting
is closed with 4429 once eight frames wait to be stored, and nothing of the flood is
queued past that."""

import pytest
from telemetry_wire import Agent, record, samples

from agent import protocol
from audit.models import AuditEvent
from monitoring import consumers, ingest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow_store(monkeypatch):
    real = ingest.write

    def write(*args, **kwargs):
        import time

        time.sleep(0.3)  # a busy database: the writer falls behind the flood
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "write", write)


async def test_a_flooding_agent_is_closed_with_4429(tokens, slow_store):
    async with Agent(tokens["h100-a"]) as a:
        assert (await a.hello())["type"] == "welcome"
        for seq in range(1, 41):
            await a.send(samples([record(seq)]))
        frames = []
        while (frame := await a.recv(timeout=10))["type"] == "ack":
            frames.append(frame)
        assert frame["code"] == "too_many_unacked"
        assert await a.closed(timeout=10) == protocol.CLOSE_FLOOD
    assert len(frames) <= consumers.QUEUE_FRAMES + consumers.MERGE_FRAMES
    assert "too_many_unacked" in [e.details.get("code") async for e in AuditEvent.objects.filter(action="agent.reject")]


async def test_an_agent_that_waits_for_acks_is_never_closed(tokens, slow_store):
    async with Agent(tokens["h100-a"]) as a:
        assert (await a.hello())["type"] == "welcome"
        for seq in range(1, 13):
            await a.send(samples([record(seq)]))
            assert (await a.recv(timeout=10))["seq"] == seq


def test_the_agent_retries_later_after_4429():
    assert protocol.close_action(protocol.CLOSE_FLOOD) == protocol.RETRY
