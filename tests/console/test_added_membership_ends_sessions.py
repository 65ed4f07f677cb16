"""A membership added to someone who is signed in (bob, member of Acme, made admin of
Globex) ends their other sessions and live sockets, and their API tokens keep the teams
they reached before: the new role applies only to credentials made after it."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEvent
from console import services
from console.models import ApiToken, Membership


def session_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_adding_bob_to_globex_as_admin_signs_him_out(ops, bob, globex):
    bobs = session_of(bob)
    services.add_member(actor=ops, team=globex, user=bob, role="admin")
    assert bobs.get("/team/").status_code == 302  # to the sign-in page
    event = AuditEvent.objects.get(action="member.add")
    assert event.details["signed_out"] == 1


def test_bobs_old_token_does_not_reach_globex(ops, bob, acme, globex):
    _, raw = services.create_api_token(actor=bob, user=bob, name="old")
    services.add_member(actor=ops, team=globex, user=bob, role="admin")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    seen = client.get("/api/v1/audit/events/").json()["results"]
    assert AuditEvent.objects.filter(team=globex).exists()
    assert [event["action"] for event in seen] == ["api_token.create"]  # his own, team-less
    teams = [team["name"] for team in client.get("/api/v1/teams/").json()["results"]]
    assert teams == ["Acme"]
    assert list(ApiToken.objects.get().teams.all()) == [acme]


def test_a_token_made_after_reaches_the_new_team(ops, bob, globex):
    services.add_member(actor=ops, team=globex, user=bob, role="member")
    _, raw = services.create_api_token(actor=bob, user=bob, name="new")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    teams = {team["name"] for team in client.get("/api/v1/teams/").json()["results"]}
    assert teams == {"Acme", "Globex"}


def test_a_token_of_someone_with_no_team_yet_is_revoked(ops, acme, django_user_model):
    dana = django_user_model.objects.create_user("dana", "dana@example.com", "demo-password")
    token, _ = services.create_api_token(actor=dana, user=dana, name="early")
    services.add_member(actor=ops, team=acme, user=dana, role="member")
    token.refresh_from_db()
    assert token.status == "revoked"
    assert AuditEvent.objects.get(action="member.add").details["api_revoked"] == [token.prefix]


def test_an_admin_adding_themselves_keeps_their_session(alice, globex):
    alices = session_of(alice)
    services.add_member(actor=alice, team=globex, user=alice, role="member")
    assert alices.get("/team/").status_code == 200
    assert Membership.objects.filter(user=alice).count() == 2


@pytest.mark.django_db(transaction=True)
def test_others_sessions_stay(ops, bob, alice, globex):
    alices = session_of(alice)
    services.add_member(actor=ops, team=globex, user=bob, role="admin")
    assert alices.get("/team/").status_code == 200
