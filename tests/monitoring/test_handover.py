"""A GPU handed from one team to another within a second: every reading, process list
and live update belongs to whoever held the GPU at the reading's own time, over one
agent connection that stays open across the handover, late frames included."""

import json
import time
from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from telemetry_wire import Agent, gpu_entry, samples

from instances import lifecycle as instance_lifecycle
from monitoring.models import Sample
from monitoring.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = URLRouter(websocket_urlpatterns)
GPU = "GPU-h200-a-0"
GIB = 2**30


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def cookie_for(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def watch(user, team):
    headers = [(b"origin", b"http://testserver"), (b"cookie", await sync_to_async(cookie_for)(user))]
    ws = WebsocketCommunicator(APP, "/ws/live/", headers=headers)
    assert (await ws.connect())[0]
    await ws.send_to(text_data=json.dumps({"subscribe": {"kind": "team", "id": team.pk}}))
    assert json.loads(await ws.receive_from())["event"] == "subscribed"
    return ws


def reading(seq, t, pid, util):
    return {"seq": seq, "t": t, "gpu": GPU, "m": {"gpu_util": util, "mem_used": 6 * GIB},
            "procs": [{"pid": pid, "used_memory": 6 * GIB, "sm_util": util}]}


async def gpus_seen(ws, wait=2.0) -> list[tuple[float, int]] | None:
    """The GPU readings of the next ``gpus`` event (lifecycle events are skipped), or
    None when none comes within ``wait`` seconds."""
    while True:
        if await ws.receive_nothing(timeout=wait):
            return None
        message = json.loads(await ws.receive_from())
        if message["event"] == "gpus":
            return [(g["m"]["gpu_util"], g["instance"]) for g in message["data"]["gpus"]]


@pytest.fixture
def handover(launch, charlie, globex, bob, acme):
    """Globex held the H200 until ``base + 0.4``; Acme holds it from ``base + 0.7``."""
    base = time.time() - 10

    def globex_then_acme():
        old = launch(charlie, globex, name="globex-old", model="H200-141GB", at=at(base - 60))
        instance_lifecycle.mark_running(instance=old, at=at(base - 59))
        instance_lifecycle.terminate_instance(actor=charlie, instance=old, at=at(base + 0.4))
        new = launch(bob, acme, name="acme-new", model="H200-141GB", at=at(base + 0.7))
        return old, new

    return base, globex_then_acme


async def test_each_team_sees_only_readings_from_its_own_hold(handover, tokens, settings, charlie, globex, bob, acme):
    settings.LIVE_COALESCE_S = 0.02
    base, globex_then_acme = handover
    globex_ws, acme_ws = await watch(charlie, globex), await watch(bob, acme)
    async with Agent(tokens["h200-a"]) as agent:
        await agent.hello(host="h200-a", gpus=[gpu_entry(GPU, 0, name="H200-141GB", memory_total=141 * GIB)])
        old, new = await sync_to_async(globex_then_acme)()
        # One connection, frames in arrival order; the last one is a late frame from
        # before the handover.
        for frame, globex_sees, acme_sees in [
            ([reading(1, base + 0.0, 31337, 11.0)], [(11.0, old.pk)], None),
            ([reading(2, base + 0.5, 31337, 22.0)], None, None),  # nobody holds it
            ([reading(3, base + 0.9, 4242, 33.0)], None, [(33.0, new.pk)]),
            ([reading(4, base + 0.3, 31337, 44.0)], [(44.0, old.pk)], None),
        ]:
            await agent.send(samples(frame))
            await agent.recv()
            for ws, expected in ((globex_ws, globex_sees), (acme_ws, acme_sees)):
                assert await gpus_seen(ws, wait=2.0 if expected else 0.3) == expected
    await globex_ws.disconnect()
    await acme_ws.disconnect()

    rows = [r async for r in Sample.objects.order_by("time").values_list("gpu_util", "instance_id", "team_id")]
    assert rows == [(11.0, old.pk, globex.pk), (44.0, old.pk, globex.pk), (22.0, None, None), (33.0, new.pk, acme.pk)]


async def test_the_new_holder_never_sees_the_old_holders_processes(handover, tokens, alice):
    base, globex_then_acme = handover
    async with Agent(tokens["h200-a"]) as agent:
        await agent.hello(host="h200-a", gpus=[gpu_entry(GPU, 0, name="H200-141GB", memory_total=141 * GIB)])
        old, new = await sync_to_async(globex_then_acme)()
        # Only readings from before Acme's hold list processes (the old tenant's 31337).
        await agent.send(samples([reading(1, base + 0.2, 31337, 70.0), reading(2, base + 0.5, 31337, 70.0)]))
        await agent.recv()

    def panel():
        client = Client()
        client.force_login(alice)
        return client.get(f"/monitoring/instances/{new.pk}/panel/").json()["procs"][GPU]

    assert await sync_to_async(panel)() == []
    async with Agent(tokens["h200-a"]) as agent:
        await agent.hello(host="h200-a", gpus=[gpu_entry(GPU, 0, name="H200-141GB", memory_total=141 * GIB)],
                          boot_id="ab" * 16)
        await agent.send(samples([reading(1, base + 1.0, 4242, 80.0)], boot_id="ab" * 16))
        await agent.recv()
    assert [p["pid"] for p in await sync_to_async(panel)()] == [4242]
