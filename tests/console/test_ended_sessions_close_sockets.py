"""Ending a user's sessions (sign-out everywhere, a changed password, a removed
membership) closes their live sockets with 4401; other users' sockets stay open."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client

from console import services
from console.models import Membership
from monitoring.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = URLRouter(websocket_urlpatterns)


def cookie_for(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def live_socket(user, cookie=None):
    cookie = cookie or await sync_to_async(cookie_for)(user)
    headers = [(b"origin", b"http://testserver"), (b"cookie", cookie)]
    ws = WebsocketCommunicator(APP, "/ws/live/", headers=headers)
    connected, _ = await ws.connect()
    assert connected
    return ws


async def closed_with(ws) -> int:
    output = await ws.receive_output(timeout=10)  # generous: a loaded machine is slow, not wrong
    assert output["type"] == "websocket.close", output
    return output["code"]


async def test_sign_out_everywhere_closes_the_users_sockets(bob, alice):
    bobs, alices = await live_socket(bob), await live_socket(alice)
    await sync_to_async(services.sign_out_everywhere)(actor=bob, user=bob)
    assert await closed_with(bobs) == 4401
    assert await alices.receive_nothing(timeout=0.3)
    await alices.disconnect()


async def test_a_sign_out_right_after_the_socket_opens_closes_it(bob, monkeypatch):
    """The socket joins its user's group before it is accepted: however long the
    sign-in check takes, a session ended once the browser sees the socket open reaches it."""
    from monitoring.consumers import LiveConsumer

    may = LiveConsumer.may

    async def slow_may(self, *args, **kwargs):
        await asyncio.sleep(0.3)
        return await may(self, *args, **kwargs)

    monkeypatch.setattr(LiveConsumer, "may", slow_may)
    ws = await live_socket(bob)
    await sync_to_async(services.sign_out_everywhere)(actor=bob, user=bob)
    assert await closed_with(ws) == 4401


async def test_a_changed_password_closes_the_users_sockets(bob):
    ws = await live_socket(bob)
    await sync_to_async(services.change_password)(actor=bob, user=bob, password="a-Long-pass-phrase-9")
    assert await closed_with(ws) == 4401


async def test_a_removed_member_loses_the_live_view_at_once(alice, bob):
    ws = await live_socket(bob)
    membership = await Membership.objects.aget(user=bob)
    await sync_to_async(services.remove_member)(actor=alice, membership=membership)
    assert await closed_with(ws) == 4401


async def test_the_session_that_stays_keeps_its_socket(bob):
    from console.sessions import end_sessions

    kept = await sync_to_async(cookie_for)(bob)
    mine, other = await live_socket(bob, kept), await live_socket(bob)
    key = kept.decode().split("=", 1)[1]
    assert await sync_to_async(end_sessions)(bob, keep=key) == 1
    assert await closed_with(other) == 4401
    assert await mine.receive_nothing(timeout=0.3)
    await mine.disconnect()
