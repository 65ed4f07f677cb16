import time

from audit.models import AuditEvent
from console.models import UserSession
from console.sessions import SEEN, STARTED


def age(client, **seconds_ago):
    session = client.session
    for key, ago in seconds_ago.items():
        session[{"started": STARTED, "seen": SEEN}[key]] = time.time() - ago
    session.save()


def test_it_records_the_sign_in(client, bob):
    client.post("/login/", {"username": "bob", "password": "demo-password"}, REMOTE_ADDR="192.0.2.5")
    row = UserSession.objects.get(user=bob)
    assert row.session_key == client.session.session_key and row.ip == "192.0.2.5"


def test_an_idle_session_ends(client, bob, settings):
    settings.SESSION_IDLE_SECONDS = 600
    client.force_login(bob)
    age(client, seen=601)
    response = client.get("/account/tokens/")
    assert response.status_code == 302 and response.url.startswith("/login/")
    assert AuditEvent.objects.get(action="auth.session_expired").details == {"why": "idle"}


def test_an_active_session_stays(client, bob, settings):
    settings.SESSION_IDLE_SECONDS = 600
    client.force_login(bob)
    age(client, seen=590)
    assert client.get("/account/tokens/").status_code == 200
    assert time.time() - client.session[SEEN] < 5  # the request counts as activity


def test_a_session_ends_at_its_absolute_lifetime_even_when_busy(client, bob, settings):
    settings.SESSION_ABSOLUTE_SECONDS = 3600
    client.force_login(bob)
    age(client, started=3601, seen=1)
    response = client.get("/account/tokens/", follow=True)
    assert "maximum length" in response.content.decode()
    assert not UserSession.objects.filter(user=bob).exists()


def test_an_ended_session_is_refused_by_the_api(client, bob, settings):
    settings.SESSION_IDLE_SECONDS = 600
    client.force_login(bob)
    age(client, seen=601)
    assert client.get("/api/v1/teams/").status_code in (401, 403)
