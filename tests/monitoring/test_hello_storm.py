"""A fleet's agents reconnecting at once (a console restart): hellos wait their turn at
the database, and the server neither refuses a hello that arrived in time nor does the
work of one whose agent has stopped waiting."""

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext
from telemetry_wire import hello

from agent import protocol as p
from alerting.models import Alert
from audit.models import AuditEvent
from monitoring import consumers, frames, inventory, services
from monitoring.models import AgentState, HostToken


@pytest.fixture
def token(ops, fleet):
    return services.create_host_token(actor=ops, host=fleet["hosts"]["h100-a"], name="rack 4")[1]


def _hello(**kw) -> frames.Hello:
    return frames.read(json.dumps(hello(**kw)), hello_expected=True, now=time.time())


@pytest.mark.django_db(transaction=True)
async def test_a_hello_that_arrived_in_time_is_welcomed_however_long_its_turn(agent, token, monkeypatch):
    monkeypatch.setattr(consumers, "HELLO_TIMEOUT_S", 0.3)
    slow = inventory.accept_hello

    def accept_later(**kw):
        time.sleep(0.6)  # the hellos ahead of it at the database
        return slow(**kw)

    monkeypatch.setattr(inventory, "accept_hello", accept_later)
    async with agent(token) as a:
        assert (await a.hello())["type"] == "welcome"
    assert await AgentState.objects.filter(connected=True).acount() == 0  # disconnected at the end
    assert not await AuditEvent.objects.filter(action="agent.reject").aexists()


@pytest.mark.django_db(transaction=True)
async def test_a_hello_whose_turn_comes_after_the_agents_wait_is_skipped(agent, token, monkeypatch):
    monkeypatch.setattr(p, "WELCOME_TIMEOUT_S", 0.2)
    real = consumers._accept_hello

    def after_a_wait(*args):
        time.sleep(0.3)
        return real(*args)

    monkeypatch.setattr(consumers, "_accept_hello", after_a_wait)
    async with agent(token) as a:
        await a.send(hello())
        assert await a.closed() == 1013  # try again later
    assert not await AgentState.objects.aexists()
    assert not await AuditEvent.objects.filter(action__in=["agent.connect", "agent.reject"]).aexists()


def test_a_skipped_hello_changes_nothing(fleet):
    host = fleet["hosts"]["h100-a"]
    assert consumers._accept_hello(host, _hello(), "", time.monotonic() - p.WELCOME_TIMEOUT_S - 1) is None
    assert not AgentState.objects.exists()
    assert consumers._accept_hello(host, _hello(), "", time.monotonic()) is not None
    assert AgentState.objects.get(host=host).connected


def test_gpus_reported_again_resolve_their_alerts_in_one_lookup(fleet):
    host = fleet["hosts"]["h100-a"]
    inventory.accept_hello(host=host, hello=_hello(), conflict_code=p.CLOSE_GPU_CONFLICT)
    six = hello()["gpus"][:6]
    inventory.accept_hello(host=host, hello=_hello(gpus=six), conflict_code=p.CLOSE_GPU_CONFLICT)
    lost = Alert.objects.filter(key__startswith="gpu_lost:", state="open")
    assert sorted(a.key for a in lost) == ["gpu_lost:GPU-h100-a-6", "gpu_lost:GPU-h100-a-7"]
    with CaptureQueriesContext(connection) as queries:
        inventory.accept_hello(host=host, hello=_hello(), conflict_code=p.CLOSE_GPU_CONFLICT)
    lookups = [q["sql"] for q in queries
               if q["sql"].startswith("SELECT") and '"monitoring_alert"."key"' in q["sql"].partition("WHERE")[2]]
    assert len(lookups) == 1, lookups
    assert not lost.all().exists()
    assert Alert.objects.filter(key__startswith="gpu_lost:", state="resolved").count() == 2


@pytest.mark.django_db(transaction=True)
async def test_a_connection_closed_while_its_hello_waited_gets_no_welcome(agent, ops, fleet, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    token, raw = await sync_to_async(services.create_host_token)(actor=ops, host=fleet["hosts"]["h100-a"], name="x")
    await HostToken.objects.filter(pk=token.pk).aupdate(expires_at=timezone.now() + timedelta(seconds=0.3))
    slow = inventory.accept_hello

    def accept_later(**kw):
        time.sleep(0.8)  # the token expires meanwhile
        return slow(**kw)

    monkeypatch.setattr(inventory, "accept_hello", accept_later)
    async with agent(raw) as a:
        await a.send(hello())
        first = await a.recv()
        assert first["type"] == "error" and first["code"] == "token_expired", first
        assert await a.closed() == p.CLOSE_TOKEN_EXPIRED
        await asyncio.sleep(1.0)  # the hello's turn ends after the close
        assert await a.ws.receive_nothing(timeout=0.2)  # no welcome, no network rules
    state = await AgentState.objects.aget()
    assert not state.connected  # its connection recorded, then its end


def test_a_reconnecting_agents_record_is_one_update(fleet):
    """A worker's agents all come back after a restart: each known host's connection is
    recorded with one UPDATE, no savepoint and no locking read; the first one makes it."""
    host = fleet["hosts"]["h100-a"]
    assert not AgentState.objects.filter(host=host).exists()
    assert consumers._accept_hello(host, _hello(), "", time.monotonic()) is not None
    first = AgentState.objects.get(host=host)
    assert first.connected and first.boot_id == _hello().boot_id
    AgentState.objects.filter(host=host).update(connected=False)
    with CaptureQueriesContext(connection) as queries:
        assert consumers._accept_hello(host, _hello(), "", time.monotonic()) is not None
    touching = [q["sql"] for q in queries.captured_queries if "monitoring_agentstate" in q["sql"]]
    assert len(touching) == 1 and touching[0].startswith("UPDATE"), touching
    assert AgentState.objects.get(host=host).connected
    assert AgentState.objects.get(host=host).connected_at > first.connected_at
