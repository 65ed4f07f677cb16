"""Sessions and API tokens made while the second factor was not required are refused
once their user's role needs it: pages send them to the second step, the API answers
401, live sockets close; credentials made with a second factor go on working."""

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.test import APIClient
from twofactor_support import code, enrol

from audit.models import AuditEvent
from console import services
from monitoring.routing import websocket_urlpatterns


def password_session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def token_client(user, second_factor=False) -> APIClient:
    _, raw = services.create_api_token(actor=user, user=user, name="t", second_factor=second_factor)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


@pytest.fixture
def rule_later(settings):
    settings.REQUIRE_2FA_ROLES = []

    def apply():
        settings.REQUIRE_2FA_ROLES = ["operator", "admin", "auditor"]

    return apply


def test_an_operators_old_session_is_sent_to_enrol(ops, rule_later):
    client = password_session(ops)
    assert client.get("/hosts/").status_code == 200
    rule_later()
    response = client.get("/hosts/")
    assert response.status_code == 302 and response.url == "/login/enrol/"
    assert client.get("/account/").status_code == 302  # signed out meanwhile
    assert AuditEvent.objects.get(action="auth.2fa_required").outcome == "denied"


def test_an_enrolled_admins_old_session_must_enter_the_code(alice, rule_later):
    device, _ = enrol(alice)
    client = password_session(alice)
    rule_later()
    assert client.get("/team/").url == "/login/verify/"
    response = client.post("/login/verify/", {"code": code(device, steps_ahead=1)})
    assert response.url == "/team/"
    assert client.get("/team/").status_code == 200


def test_an_old_session_on_the_api_answers_401(audrey, rule_later):
    client = password_session(audrey)
    rule_later()
    response = client.get("/api/v1/audit/events/")
    assert response.status_code == 401 and response.json()["code"] == "second_factor_required"


def test_an_old_token_is_refused_by_name(alice, rule_later):
    client = token_client(alice)
    assert client.get("/api/v1/instances/").status_code == 200
    rule_later()
    response = client.get("/api/v1/instances/")
    assert response.status_code == 401 and "second factor" in response.json()["detail"]


def test_a_token_made_with_a_second_factor_keeps_working(alice, rule_later):
    client = token_client(alice, second_factor=True)
    rule_later()
    assert client.get("/api/v1/instances/").status_code == 200


def test_a_members_password_session_is_not_affected(bob, rule_later):
    client, tokens = password_session(bob), token_client(bob)
    rule_later()
    assert client.get("/").status_code == 200
    assert tokens.get("/api/v1/instances/").status_code == 200


def test_the_token_endpoint_records_the_code(alice, rule_later):
    device, _ = enrol(alice)
    rule_later()
    body = {"username": "alice", "password": "demo-password", "name": "ci", "otp": code(device, steps_ahead=1)}
    made = APIClient().post("/api/v1/auth/token/", body, format="json").json()
    assert made["second_factor"] is True
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {made['token']}")
    assert client.get("/api/v1/instances/").status_code == 200
    child = client.post("/api/v1/auth/tokens/", {"name": "child", "scopes": ["read"]}, format="json").json()
    assert child["second_factor"] is True


def test_a_password_session_makes_password_only_tokens(alice):
    client = password_session(alice)
    made = client.post("/api/v1/auth/tokens/", {"name": "x", "scopes": ["read"]}, content_type="application/json")
    assert made.json()["second_factor"] is False


@pytest.mark.django_db(transaction=True)
async def test_an_old_session_loses_its_live_socket(alice, settings):
    settings.REQUIRE_2FA_ROLES = []
    client = await sync_to_async(password_session)(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    settings.REQUIRE_2FA_ROLES = ["admin"]
    headers = [(b"origin", b"http://testserver"), (b"cookie", cookie)]
    ws = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/live/", headers=headers)
    await ws.connect()
    output = await ws.receive_output(timeout=3)
    assert output["type"] == "websocket.close" and output["code"] == 4401
    await ws.disconnect()
    refused = [event.details async for event in AuditEvent.objects.filter(action="auth.2fa_required")]
    assert refused == [{"via": "websocket"}]
