"""Browsers subscribe on /ws/live/ to what their role and team allow, and get
coalesced GPU updates."""

import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from telemetry_wire import Agent, record, samples

from agent.protocol import LiveInstance
from audit.models import AuditEvent
from monitoring.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = URLRouter(websocket_urlpatterns)


def cookie_for(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def browser():
    async def open_as(user=None, origin=b"http://testserver"):
        headers = [(b"origin", origin)]
        if user is not None:
            headers.append((b"cookie", await sync_to_async(cookie_for)(user)))
        ws = WebsocketCommunicator(APP, "/ws/live/", headers=headers)
        connected, code = await ws.connect()
        return ws, connected, code

    return open_as


async def subscribe(ws, kind, ident=None):
    await ws.send_to(text_data=json.dumps({"subscribe": {"kind": kind, "id": ident}}))
    return json.loads(await ws.receive_from())


async def test_a_member_subscribes_to_an_instance_of_the_team(browser, bob, acme_instance):
    ws, connected, _ = await browser(bob)
    assert connected
    assert await subscribe(ws, "instance", acme_instance.pk) == {
        "event": "subscribed", "data": {"kind": "instance", "id": acme_instance.pk}
    }
    await ws.disconnect()


async def test_globex_subscribing_to_acme_is_closed_and_audited(browser, charlie, acme_instance):
    ws, _, _ = await browser(charlie)
    await ws.send_to(text_data=json.dumps({"subscribe": {"kind": "instance", "id": acme_instance.pk}}))
    assert (await ws.receive_output())["code"] == 4403
    event = await AuditEvent.objects.aget(action="live.denied")
    assert (event.actor_name, event.outcome, event.details) == ("charlie", "denied", {"kind": "instance", "id": acme_instance.pk})
    await ws.disconnect()


@pytest.mark.parametrize("kind", ["fleet", "host"])
async def test_only_operators_watch_the_fleet(browser, bob, ops, fleet, kind):
    ident = None if kind == "fleet" else fleet["hosts"]["h100-a"].pk
    ws, _, _ = await browser(bob)
    await ws.send_to(text_data=json.dumps({"subscribe": {"kind": kind, "id": ident}}))
    assert (await ws.receive_output())["code"] == 4403
    await ws.disconnect()
    ws, _, _ = await browser(ops)
    assert (await subscribe(ws, kind, ident))["event"] == "subscribed"
    await ws.disconnect()


@pytest.mark.parametrize("kind", ["host", "team"])
async def test_an_operator_naming_no_such_host_or_team_is_told_and_the_socket_carries_on(browser, ops, acme, fleet,
                                                                                          kind):
    ws, _, _ = await browser(ops)
    assert await subscribe(ws, kind, 987654) == {"event": "error", "data": {"message": f"there is no {kind} 987654"}}
    assert (await subscribe(ws, "team", acme.pk))["event"] == "subscribed"
    await ws.disconnect()
    assert not await AuditEvent.objects.filter(action="live.denied").aexists()


@pytest.mark.parametrize("existing", [True, False])
async def test_a_member_is_denied_another_team_alike_whether_it_exists_or_not(browser, bob, globex, existing):
    ident = globex.pk if existing else 987654
    ws, _, _ = await browser(bob)
    await ws.send_to(text_data=json.dumps({"subscribe": {"kind": "team", "id": ident}}))
    assert (await ws.receive_output())["code"] == 4403
    await ws.disconnect()
    event = await AuditEvent.objects.aget(action="live.denied")
    assert event.details == {"kind": "team", "id": ident}


async def test_anonymous_is_closed(browser, fleet):
    ws, connected, _ = await browser(None)
    assert (await ws.receive_output())["code"] == 4401
    await ws.disconnect()


async def test_a_foreign_origin_is_refused(browser, bob):
    ws, connected, _ = await browser(bob, origin=b"http://evil.example")
    assert not connected
    # The denier waits for the disconnect; left waiting, closing the test's event loop
    # could hang on it.
    await ws.disconnect()


async def test_a_malformed_message_is_closed_with_4400(browser, bob):
    ws, _, _ = await browser(bob)
    await ws.send_to(text_data='{"subscribe": {"kind": "planet", "id": 1}}')
    assert json.loads(await ws.receive_from())["event"] == "error"
    assert (await ws.receive_output())["code"] == 4400
    await ws.disconnect()


async def test_gpu_samples_arrive_coalesced(browser, bob, acme, acme_instance, tokens, settings):
    settings.LIVE_COALESCE_S = 0.05
    held = [g.uuid async for g in acme_instance.gpus.order_by("index")]
    ws, _, _ = await browser(bob)
    await subscribe(ws, "team", acme.pk)
    now = time.time()
    async with Agent(tokens["h100-a"]) as a:
        await a.hello()
        records = [record(i * 8 + k + 1, gpu=f"GPU-h100-a-{k}", t=now + i, gpu_util=i) for i in range(3) for k in range(8)]
        await a.send(samples(records))
        await a.recv()
    message = json.loads(await ws.receive_from(timeout=2))
    assert message["event"] == "gpus"
    gpus = {g["uuid"]: g for g in message["data"]["gpus"]}
    assert set(gpus) == set(held)  # only Acme's GPUs, once each
    first = gpus[held[0]]
    assert (first["host"], first["instance"], first["team"], first["stale"]) == ("h100-a", acme_instance.pk, acme.pk, False)
    assert first["m"] == {"gpu_util": 2}
    assert await ws.receive_nothing(timeout=0.2)
    await ws.disconnect()


async def test_a_published_event_reaches_the_browser_verbatim(browser, ops):
    from channels.layers import get_channel_layer

    from console import live

    ws, _, _ = await browser(ops)
    await subscribe(ws, "fleet")
    await live.apublish([live.FLEET_GROUP], "instance", LiveInstance(id=7, name="a", state="running", team=1))
    assert await ws.receive_from(timeout=2) == '{"event":"instance","data":{"id":7,"name":"a","state":"running","team":1}}'
    # The older message shape, {"event", "data"} (a worker of an earlier release).
    await get_channel_layer().group_send(live.FLEET_GROUP, {"type": "live.event", "event": "alert", "data": {"id": 8}})
    assert json.loads(await ws.receive_from(timeout=2)) == {"event": "alert", "data": {"id": 8}}
    await ws.disconnect()
