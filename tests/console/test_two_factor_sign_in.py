import time

import pytest
from twofactor_support import code, enrol, password_step, signed_in

from audit.models import AuditEvent
from console import twofactor
from console.signin import PENDING


@pytest.fixture(autouse=True)
def _production_roles(settings):
    settings.REQUIRE_2FA_ROLES = ["operator", "admin", "auditor"]
    settings.OTP_TOTP_THROTTLE_FACTOR = settings.OTP_STATIC_THROTTLE_FACTOR = 0  # the throttle has its own test


def test_an_operator_cannot_sign_in_with_a_password_alone(client, ops):
    response = password_step(client, "ops")
    assert response.url == "/login/enrol/"
    assert not signed_in(client)
    assert not AuditEvent.objects.filter(action="auth.login").exists()


def test_an_operator_enrols_during_sign_in(client, ops):
    password_step(client, "ops")
    page = client.get("/login/enrol/").content.decode()
    assert "<svg" in page and "totp-secret" in page
    device = twofactor.pending_device(ops)
    response = client.post("/login/enrol/", {"code": code(device)})
    assert "recovery-codes" in response.content.decode()
    assert signed_in(client)
    assert AuditEvent.objects.filter(action="auth.2fa_enrol", target_id=str(ops.pk)).exists()


def test_a_wrong_enrolment_code_is_refused_and_audited(client, ops):
    password_step(client, "ops")
    client.get("/login/enrol/")
    response = client.post("/login/enrol/", {"code": "000000"})
    assert "does not match" in response.content.decode()
    assert not signed_in(client) and not twofactor.enrolled(ops)
    assert AuditEvent.objects.filter(action="auth.2fa_failed", outcome="failure").count() == 1


def test_an_enrolled_user_signs_in_with_the_current_code(client, alice):
    device, _ = enrol(alice)
    assert password_step(client, "alice").url == "/login/verify/"
    response = client.post("/login/verify/", {"code": code(device, steps_ahead=1)})
    assert response.status_code == 302 and response.url == "/"
    assert signed_in(client)
    assert AuditEvent.objects.get(action="auth.login").details["via"] == "page+2fa"


def test_a_wrong_code_is_refused_and_audited(client, alice):
    enrol(alice)
    password_step(client, "alice")
    response = client.post("/login/verify/", {"code": "123456"})
    assert "Wrong or already used code" in response.content.decode()
    assert not signed_in(client)
    event = AuditEvent.objects.get(action="auth.2fa_failed")
    assert (event.actor_name, event.outcome) == ("alice", "failure")


def test_a_replayed_code_is_refused(client, alice, django_user_model):
    from django.test import Client

    device, _ = enrol(alice)
    used = code(device, steps_ahead=1)
    password_step(client, "alice")
    client.post("/login/verify/", {"code": used})
    assert signed_in(client)
    other = Client()
    password_step(other, "alice")
    response = other.post("/login/verify/", {"code": used})
    assert "already used" in response.content.decode()
    assert not signed_in(other)


def test_a_recovery_code_works_once(client, alice):
    from django.test import Client

    _, codes = enrol(alice)
    password_step(client, "alice")
    response = client.post("/login/verify/", {"code": codes[0]}, follow=True)
    assert "recovery code; 9 left" in response.content.decode()
    other = Client()
    password_step(other, "alice")
    other.post("/login/verify/", {"code": codes[0]})
    assert not signed_in(other)
    assert AuditEvent.objects.filter(action="auth.2fa_recovery_code_used").count() == 1


def test_five_wrong_codes_send_you_back_to_the_password(client, alice):
    enrol(alice)
    password_step(client, "alice")
    for _ in range(4):
        client.post("/login/verify/", {"code": "111111"})
    response = client.post("/login/verify/", {"code": "111111"})
    assert response.url == "/login/"
    assert client.get("/login/verify/").url == "/login/"


def test_the_second_step_expires(client, alice):
    device, _ = enrol(alice)
    password_step(client, "alice")
    session = client.session
    session[PENDING] = session[PENDING] | {"at": time.time() - 301}
    session.save()
    response = client.post("/login/verify/", {"code": code(device, steps_ahead=1)})
    assert response.url == "/login/"
    assert not signed_in(client)


def test_the_verify_step_without_a_password_goes_to_the_login(client):
    assert client.get("/login/verify/").url == "/login/"
    assert client.post("/login/enrol/", {"code": "123456"}).url == "/login/"


def test_members_sign_in_with_a_password_where_not_required(client, bob):
    response = password_step(client, "bob")
    assert response.url == "/"
    assert signed_in(client)


def test_the_demo_keeps_two_factor_off(client, ops, settings):
    settings.REQUIRE_2FA_ROLES = []
    assert password_step(client, "ops").url == "/"


def test_failed_codes_are_throttled(client, alice, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = 10
    device, _ = enrol(alice)
    password_step(client, "alice")
    client.post("/login/verify/", {"code": "111111"})
    client.post("/login/verify/", {"code": code(device, steps_ahead=1)})  # right, but within the back-off
    assert not signed_in(client)


def test_the_api_wants_a_code_from_an_enrolled_user(api, alice):
    device, _ = enrol(alice)
    body = {"username": "alice", "password": "demo-password"}
    assert "otp" in api().post("/api/v1/auth/token/", body).json()
    assert api().post("/api/v1/auth/token/", body | {"otp": "000000"}).status_code == 400
    ok = api().post("/api/v1/auth/token/", body | {"otp": code(device, steps_ahead=1)})
    assert ok.status_code == 201


def test_the_api_refuses_a_required_role_without_a_device(api, ops):
    response = api().post("/api/v1/auth/token/", {"username": "ops", "password": "demo-password"})
    assert response.status_code == 403
    assert "enrol" in response.json()["detail"]


@pytest.mark.parametrize("target, location", [("foo", "foo"), ("/alerts/?state=all", "/alerts/?state=all"),
                                              ("https://evil.example/", "/")])
def test_the_second_step_goes_where_the_first_was_sent_as_a_url(client, alice, target, location):
    """``next`` is a URL once the login page has checked it: a bare word is a relative
    path, never taken for the name of a view."""
    device, _ = enrol(alice)
    client.post(f"/login/?next={target}", {"username": "alice", "password": "demo-password"})
    response = client.post("/login/verify/", {"code": code(device, 1)})
    assert response.status_code == 302 and response.url == location
