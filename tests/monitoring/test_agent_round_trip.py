"""An agent says hello, sends samples, and gets each frame acknowledged after commit."""

import time

import pytest
from telemetry_wire import BOOT, record, samples

from audit.models import AuditEvent
from monitoring.models import AgentSession, AgentState, GpuLatest, Sample

pytestmark = pytest.mark.django_db(transaction=True)


async def test_hello_gets_a_welcome(agent, tokens, fleet):
    async with agent(tokens["h100-a"]) as a:
        welcome = await a.hello()
    assert welcome["type"] == "welcome"
    assert welcome["v"] == 1
    assert welcome["host"] == "h100-a"
    assert welcome["registered"] == [] and welcome["vanished"] == []


async def test_samples_are_stored_then_acked(agent, tokens, fleet):
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        await a.send(samples([record(1, gpu_util=10), record(2, gpu="GPU-h100-a-1", gpu_util=20, power_mw=300_000)]))
        ack = await a.recv()
    assert ack == {"type": "ack", "boot_id": BOOT, "seq": 2}
    rows = {s.gpu.uuid: s async for s in Sample.objects.select_related("gpu")}
    assert rows["GPU-h100-a-0"].gpu_util == 10
    assert rows["GPU-h100-a-1"].power_mw == 300_000
    assert rows["GPU-h100-a-0"].power_mw is None  # absent stays absent, never 0


async def test_each_sample_is_attributed_to_the_holder(agent, tokens, acme_instance):
    held = await acme_instance.gpus.afirst()
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        await a.send(samples([record(1, gpu=held.uuid), record(2, gpu="GPU-h100-a-7")]))
        await a.recv()
    mine = await Sample.objects.aget(gpu__uuid=held.uuid)
    free = await Sample.objects.aget(gpu__uuid="GPU-h100-a-7")
    assert (mine.instance_id, mine.team_id) == (acme_instance.pk, acme_instance.team_id)
    assert (free.instance_id, free.team_id) == (None, None)


async def test_latest_state_follows_the_newest_sample(agent, tokens, fleet):
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        await a.send(samples([record(1, t=time.time() - 10, gpu_util=90), record(2, t=time.time() - 20, gpu_util=5)]))
        await a.recv()
    latest = await GpuLatest.objects.aget(uuid="GPU-h100-a-0")
    assert latest.metrics == {"gpu_util": 90}


async def test_connect_is_audited_and_the_session_remembered(agent, tokens, fleet):
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        await a.send(samples([record(1), record(5)]))
        await a.recv()
        state = await AgentState.objects.aget(host__name="h100-a")
        assert state.connected and state.samples == 2
    assert (await AgentSession.objects.aget(boot_id=BOOT)).last_seq == 5
    event = await AuditEvent.objects.filter(action="agent.connect").alast()
    assert event.actor_name == "h100-a" and event.details["boot_id"] == BOOT
    assert not (await AgentState.objects.aget(host__name="h100-a")).connected


async def test_xid_event_is_stored_as_an_event(agent, tokens, fleet):
    from monitoring.models import GpuEvent

    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        xid = {"seq": 1, "t": time.time(), "gpu": "GPU-h100-a-3", "event": {"kind": "xid", "code": 79, "message": "fell off the bus"}}
        await a.send(samples([xid]))
        await a.recv()
    event = await GpuEvent.objects.aget(kind="xid")
    assert (event.uuid, event.code) == ("GPU-h100-a-3", 79)
    assert await Sample.objects.acount() == 0


async def test_a_burst_of_frames_leaves_the_newest_reading(agent, tokens, fleet):
    now = time.time()
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        for seq in range(1, 6):
            await a.send(samples([record(seq, t=now - 10 + seq, gpu_util=seq * 10)]))
            await a.recv()
    latest = await GpuLatest.objects.aget(uuid="GPU-h100-a-0")
    assert latest.metrics == {"gpu_util": 50}
    assert (await AgentState.objects.aget(host__name="h100-a")).frames == 5
