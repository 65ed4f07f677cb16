"""Revoking (or rotating) a host token takes effect on the agent already connected with
it: revoked, the connection closes with 4401 at once; rotated, with 4440 when the grace
period that the rotation set ends, not at the token's original expiry."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from telemetry_wire import Agent, record, samples

from audit.models import AuditEvent
from monitoring import services
from monitoring.models import HostToken

pytestmark = pytest.mark.django_db(transaction=True)


async def token_of(host):
    return await HostToken.objects.select_related("host").aget(host__name=host)


async def test_revoking_closes_the_connected_agent_at_once(tokens, ops):
    async with Agent(tokens["h100-a"]) as a:
        assert (await a.hello())["type"] == "welcome"
        await a.send(samples([record(1)]))
        assert (await a.recv())["type"] == "ack"
        await sync_to_async(services.revoke_host_token)(actor=ops, token=await token_of("h100-a"))
        error = await a.recv(timeout=5)
        assert (error["code"], error["message"]) == ("bad_token", "the host token was revoked")
        assert await a.closed(timeout=5) == 4401
    rejects = [e.details async for e in AuditEvent.objects.filter(action="agent.reject")]
    assert {"reason": "the host token was revoked", "code": "bad_token"} in rejects


async def test_revoking_another_hosts_token_leaves_this_agent_streaming(tokens, ops):
    async with Agent(tokens["h100-a"]) as a:
        assert (await a.hello())["type"] == "welcome"
        await sync_to_async(services.revoke_host_token)(actor=ops, token=await token_of("h100-b"))
        await a.send(samples([record(1)]))
        assert (await a.recv())["type"] == "ack"


async def test_a_rotated_token_closes_its_agent_when_the_grace_ends(tokens, ops):
    async with Agent(tokens["h100-a"]) as a:
        assert (await a.hello())["type"] == "welcome"
        await sync_to_async(services.rotate_host_token)(actor=ops, token=await token_of("h100-a"), grace_s=1)
        await a.send(samples([record(1)]))
        assert (await a.recv())["type"] == "ack"  # still inside the grace
        await asyncio.sleep(1)
        assert (await a.recv(timeout=5))["code"] == "token_expired"
        assert await a.closed() == 4440  # token_expired: reconnect with the replacement token
