"""A websocket handshake carries no NUL into the database either: the user agent an
agent or a browser sends is stored (in its audit record) without it."""

import sys
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from audit.models import AuditEvent
from audit.refusals import flush_refusals

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitoring"))
from telemetry_wire import Agent  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_nul_in_an_agents_user_agent_is_not_stored(fleet):
    async with Agent("gph_not-a-token", headers=[(b"user-agent", b"gpuconsole-\x00agent/0.1")]) as a:
        assert await a.closed() == 4401
    await sync_to_async(flush_refusals)(now=timezone.now() + timedelta(minutes=1))
    event = await AuditEvent.objects.filter(action="agent.reject").alast()
    assert event.user_agent == "gpuconsole-agent/0.1"


@pytest.mark.parametrize(("path", "headers"), [
    ("/ws/live/%00", []),
    ("/ws/live/?x=%00", []),
    ("/ws/live/", [(b"cookie", b'sessionid="abcdefghij\\000"')]),
    ("/ws/live/", [(b"user-agent", b"a\x00b")]),
    ("/ws/agent/", [(b"authorization", b"Bearer gph_\x00")]),
    ("/ws/agent/?token=%00", []),
])
async def test_a_nul_in_a_handshake_is_refused_before_any_lookup(path, headers):
    from channels.testing import WebsocketCommunicator

    from gpuconsole.asgi import application

    socket = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://testserver"), *headers])
    connected, _ = await socket.connect()
    assert not connected
    await socket.disconnect()
