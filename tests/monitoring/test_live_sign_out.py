"""A logout, a role change or a removal closes the user's /ws/live/ sockets (4401),
whichever server process holds them."""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.test import Client

from console import services
from console.live import aend_user_sockets, end_user_sockets
from console.models import Membership
from monitoring.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = URLRouter(websocket_urlpatterns)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def open_socket(client: Client, team_id: int) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    ws = WebsocketCommunicator(APP, "/ws/live/", headers=[(b"origin", b"http://testserver"), (b"cookie", cookie)])
    assert (await ws.connect())[0]
    await ws.send_to(text_data=json.dumps({"subscribe": {"kind": "team", "id": team_id}}))
    assert json.loads(await ws.receive_from())["event"] == "subscribed"
    return ws


async def closed_with(ws) -> int | None:
    output = await ws.receive_output(timeout=2)
    return output.get("code") if output["type"] == "websocket.close" else None


async def still_open(ws, team_id) -> bool:
    await ws.send_to(text_data=json.dumps({"unsubscribe": {"kind": "team", "id": team_id}}))
    return json.loads(await ws.receive_from())["event"] == "unsubscribed"


async def test_it_closes_every_socket_of_the_user_and_no_other(bob, alice, acme):
    bob_a = await open_socket(await sync_to_async(logged_in)(bob), acme.pk)
    bob_b = await open_socket(await sync_to_async(logged_in)(bob), acme.pk)
    alice_ws = await open_socket(await sync_to_async(logged_in)(alice), acme.pk)
    await aend_user_sockets(bob.pk)
    assert (await closed_with(bob_a), await closed_with(bob_b)) == (4401, 4401)
    assert await still_open(alice_ws, acme.pk)
    for ws in (bob_a, bob_b, alice_ws):
        await ws.disconnect()


async def test_a_logout_closes_the_sockets_of_that_session_only(bob, acme):
    here, elsewhere = await sync_to_async(logged_in)(bob), await sync_to_async(logged_in)(bob)
    ws_here, ws_elsewhere = await open_socket(here, acme.pk), await open_socket(elsewhere, acme.pk)
    response = await sync_to_async(here.post)("/logout/")
    assert response.status_code == 302
    assert await closed_with(ws_here) == 4401
    assert await still_open(ws_elsewhere, acme.pk)
    await ws_here.disconnect()
    await ws_elsewhere.disconnect()


def _membership(user, team):
    return Membership.objects.select_related("user", "team").get(user=user, team=team)


async def test_removing_a_member_closes_their_live_sockets(alice, bob, acme):
    ws = await open_socket(await sync_to_async(logged_in)(bob), acme.pk)
    membership = await sync_to_async(_membership)(bob, acme)
    await sync_to_async(services.remove_member)(actor=alice, membership=membership)
    assert await closed_with(ws) == 4401
    await ws.disconnect()


async def test_changing_a_role_closes_their_live_sockets(alice, bob, acme):
    ws = await open_socket(await sync_to_async(logged_in)(bob), acme.pk)
    membership = await sync_to_async(_membership)(bob, acme)
    await sync_to_async(services.change_role)(actor=alice, membership=membership, role="auditor")
    assert await closed_with(ws) == 4401
    await ws.disconnect()


def _rolled_back_end(user_id):
    with pytest.raises(RuntimeError), transaction.atomic():
        end_user_sockets(user_id)
        raise RuntimeError("the change failed")


async def test_a_rolled_back_change_closes_nothing(bob, acme):
    ws = await open_socket(await sync_to_async(logged_in)(bob), acme.pk)
    await sync_to_async(_rolled_back_end)(bob.pk)
    assert await still_open(ws, acme.pk)
    await ws.disconnect()
