"""Agents authenticate with their host's token in a header; a token publishes only
for its own host's GPUs."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from telemetry_wire import Agent, gpu_entry

from audit.models import AuditEvent
from audit.refusals import flush_refusals
from instances.models import Gpu, Host
from monitoring import services
from monitoring.models import GpuEvent, HostToken

pytestmark = pytest.mark.django_db(transaction=True)


async def test_no_header_is_refused(fleet):
    async with Agent(None) as a:
        assert (await a.recv())["code"] == "bad_token"
        assert await a.closed() == 4401


async def test_a_wrong_token_is_refused_and_audited(fleet):
    async with Agent("gph_not-a-token") as a:
        assert (await a.recv())["code"] == "bad_token"
        assert await a.closed() == 4401
    await sync_to_async(flush_refusals)(now=timezone.now() + timedelta(minutes=1))
    event = await AuditEvent.objects.filter(action="agent.reject").alast()
    assert (event.outcome, event.details["count"]) == ("denied", 1)


async def test_a_rejected_agent_is_audited_with_its_address_and_user_agent(fleet):
    agent = Agent("gph_not-a-token", headers=[(b"user-agent", b"gpuconsole-agent/0.1.0")])
    agent.ws.scope["client"] = ["203.0.113.9", 51000]
    async with agent as a:
        assert await a.closed() == 4401
    await sync_to_async(flush_refusals)(now=timezone.now() + timedelta(minutes=1))
    event = await AuditEvent.objects.filter(action="agent.reject").alast()
    assert (event.source_ip, event.user_agent) == ("203.0.113.9", "gpuconsole-agent/0.1.0")


async def test_a_revoked_token_is_refused(tokens, ops):
    token = await HostToken.objects.select_related("host").aget(host__name="h100-a")
    await sync_to_async(services.revoke_host_token)(actor=ops, token=token)
    async with Agent(tokens["h100-a"]) as a:
        assert await a.closed() == 4401


async def test_a_token_in_the_query_string_is_refused(tokens):
    async with Agent(None, path=f"/ws/agent/?token={tokens['h100-a']}") as a:
        assert "URL" in (await a.recv())["message"]
        assert await a.closed() == 4401


async def test_a_token_cannot_speak_for_another_host(tokens):
    async with Agent(tokens["h100-a"]) as a:
        error = await a.hello(host="h100-b")
        assert error["code"] == "bad_token"
        assert "h100-b" in error["message"]
        assert await a.closed() == 4401


async def test_a_gpu_of_another_host_is_refused_and_flagged(tokens):
    gpus = [gpu_entry("GPU-h100-a-0", 0), gpu_entry("GPU-h100-b-3", 1)]
    async with Agent(tokens["h100-a"]) as a:
        error = await a.hello(gpus=gpus)
        assert error["code"] == "gpu_conflict"
        assert "h100-b" in error["message"]
        assert await a.closed() == 4403
    moved = await GpuEvent.objects.aget(kind="moved")
    assert (moved.uuid, moved.host_id) == ("GPU-h100-b-3", (await _host("h100-a")).pk)


async def test_a_new_gpu_is_registered_and_a_missing_one_flagged(tokens):
    gpus = [gpu_entry("GPU-h200-new", 0, name="NVIDIA H200", memory_total=150_754_820_096)]
    async with Agent(tokens["h200-a"]) as a:
        welcome = await a.hello(host="h200-a", gpus=gpus)
    assert welcome["registered"] == ["GPU-h200-new"]
    assert welcome["vanished"] == ["GPU-h200-a-0"]
    new = await Gpu.objects.select_related("model", "host").aget(uuid="GPU-h200-new")
    assert (new.host.name, new.model.name) == ("h200-a", "H200-141GB")
    assert await GpuEvent.objects.filter(kind="vanished", uuid="GPU-h200-a-0").aexists()


async def _host(name):
    return await Host.objects.aget(name=name)


async def test_a_gpu_replaced_in_its_slot_takes_the_index(tokens):
    gpus = [gpu_entry("GPU-h100-a-new", 0), *(gpu_entry(f"GPU-h100-a-{i}", i) for i in range(1, 8))]
    async with Agent(tokens["h100-a"]) as a:
        welcome = await a.hello(gpus=gpus)
    assert (welcome["registered"], welcome["vanished"]) == (["GPU-h100-a-new"], ["GPU-h100-a-0"])
    assert (await Gpu.objects.aget(uuid="GPU-h100-a-new")).index == 0
    assert (await Gpu.objects.aget(uuid="GPU-h100-a-0")).index >= 64
