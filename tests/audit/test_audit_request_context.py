import pytest
from asgiref.sync import sync_to_async
from audit_support import last_event
from django.db import connections

from audit import recording
from console import request_context as context


def test_the_source_ip_is_the_socket_peer(client, bob):
    client.post(
        "/login/", {"username": "bob", "password": "demo-password"}, REMOTE_ADDR="203.0.113.9"
    )
    assert last_event().source_ip == "203.0.113.9"


def test_a_forged_x_forwarded_for_changes_nothing(client, bob):
    client.post(
        "/login/",
        {"username": "bob", "password": "x"},
        REMOTE_ADDR="203.0.113.9",
        HTTP_X_FORWARDED_FOR="10.6.6.6",
    )
    assert last_event().source_ip == "203.0.113.9"


def test_behind_one_trusted_proxy_the_client_is_the_last_hop(client, bob, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    client.post(
        "/login/",
        {"username": "bob", "password": "x"},
        REMOTE_ADDR="10.0.0.2",
        HTTP_X_FORWARDED_FOR="198.51.100.7",
    )
    assert last_event().source_ip == "198.51.100.7"


def test_hops_a_client_prepends_are_ignored_behind_a_proxy(client, bob, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    forged = "6.6.6.6, 198.51.100.7"  # the client sent 6.6.6.6; the proxy appended the real peer
    client.post(
        "/login/",
        {"username": "bob", "password": "x"},
        REMOTE_ADDR="10.0.0.2",
        HTTP_X_FORWARDED_FOR=forged,
    )
    assert last_event().source_ip == "198.51.100.7"


def test_user_agent_and_request_id_come_from_the_request(client, bob):
    response = client.post(
        "/login/",
        {"username": "bob", "password": "x"},
        HTTP_USER_AGENT="curl/8.5",
        HTTP_X_REQUEST_ID="req-42",
    )
    event = last_event()
    assert (event.user_agent, event.request_id) == ("curl/8.5", "req-42")
    assert response["X-Request-ID"] == "req-42"


def test_a_malformed_request_id_is_replaced(client, bob):
    client.post("/login/", {"username": "bob", "password": "x"}, HTTP_X_REQUEST_ID="a b\r\nc")
    assert len(last_event().request_id) == 32


def test_control_characters_in_the_user_agent_are_escaped(client, bob):
    client.post("/login/", {"username": "bob", "password": "x"}, HTTP_USER_AGENT="evil\x1b[2J\x07")
    assert last_event().user_agent == "evil\\x1b[2J\\x07"


@pytest.mark.django_db(transaction=True)
async def test_websocket_events_get_the_sockets_address():
    scope = {
        "type": "websocket",
        "client": ("192.0.2.44", 5123),
        "headers": [(b"user-agent", b"gpuconsole-agent/1")],
    }
    with context.bind_scope(scope):
        event = await sync_to_async(recording.record_event)(actor="system", action="agent.connect")
    await sync_to_async(connections.close_all)()
    assert (event.source_ip, event.user_agent) == ("192.0.2.44", "gpuconsole-agent/1")
    assert event.request_id == scope["audit_context"].request_id
