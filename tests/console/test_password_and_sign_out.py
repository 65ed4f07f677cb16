from django.test import Client

from audit.models import AuditEvent
from console.models import UserSession

NEW = "a-Long-pass-phrase-9"


def signed_in(client) -> bool:
    return client.get("/account/").status_code == 200


def test_a_changed_password_ends_the_other_sessions_only(client, bob):
    elsewhere = Client()
    elsewhere.force_login(bob)
    client.force_login(bob)
    response = client.post("/account/", {"password": "1", "old_password": "demo-password", "new_password1": NEW, "new_password2": NEW})
    assert response.status_code == 302
    assert signed_in(client) and not signed_in(elsewhere)
    assert UserSession.objects.get(user=bob).session_key == client.session.session_key
    assert AuditEvent.objects.get(action="auth.password_change").details["signed_out"] == 1
    bob.refresh_from_db()
    assert bob.check_password(NEW)


def test_the_password_policy_applies(client, bob):
    client.force_login(bob)
    for weak, why in [("short1", "too short"), ("password1234", "too common"), ("123456789012", "entirely numeric"), ("bob@example.com", "too similar")]:
        page = client.post("/account/", {"password": "1", "old_password": "demo-password", "new_password1": weak, "new_password2": weak}).content.decode()
        assert why in page, weak
    bob.refresh_from_db()
    assert bob.check_password("demo-password")


def test_a_wrong_old_password_changes_nothing(client, bob):
    client.force_login(bob)
    client.post("/account/", {"password": "1", "old_password": "nope", "new_password1": NEW, "new_password2": NEW})
    bob.refresh_from_db()
    assert bob.check_password("demo-password")
    assert not AuditEvent.objects.filter(action="auth.password_change").exists()


def test_sign_out_everywhere(client, bob):
    elsewhere = Client()
    elsewhere.force_login(bob)
    client.force_login(bob)
    assert "Sign out everywhere" in client.get("/account/").content.decode()
    response = client.post("/account/sessions/end/")
    assert response.url == "/login/"
    assert not signed_in(client) and not signed_in(elsewhere)
    assert not UserSession.objects.filter(user=bob).exists()
    assert AuditEvent.objects.get(action="auth.sessions_ended").details["signed_out"] == 2


def test_the_account_page_lists_sessions(client, bob):
    client.post("/login/", {"username": "bob", "password": "demo-password"}, REMOTE_ADDR="203.0.113.8", HTTP_USER_AGENT="Firefox/140")
    page = client.get("/account/").content.decode()
    assert "203.0.113.8" in page and "Firefox/140" in page and "this one" in page
