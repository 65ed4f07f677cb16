from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from console import services
from console.models import ApiToken, Invitation, Membership


def invite(client, team, email="dana@example.com", role="member", capture=None):
    return client.post("/team/", {"action": "invite", "team": team.pk, "email": email, "role": role})


def link_from_mail() -> str:
    return next(line for line in mail.outbox[-1].body.splitlines() if "/invite/" in line).split("testserver")[1]


@pytest.fixture
def as_alice(client, alice):
    client.force_login(alice)
    return client


def test_team_admins_find_the_page_in_the_navigation_and_members_read_it(as_alice, bob):
    page = as_alice.get("/").content.decode()
    assert 'href="/team/"' in page
    bobs = Client()
    bobs.force_login(bob)
    assert 'href="/team/"' in bobs.get("/").content.decode()
    assert 'id="invite-form"' not in bobs.get("/team/").content.decode()


def test_an_admin_invites_by_email_and_the_link_works_once(as_alice, acme, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        invite(as_alice, acme, role="auditor")
    assert mail.outbox[0].to == ["dana@example.com"]
    link = link_from_mail()
    stranger = Client()
    assert "Create account and join" in stranger.get(link).content.decode()
    response = stranger.post(link, {"username": "dana", "password1": "a-Long-pass-phrase-9", "password2": "a-Long-pass-phrase-9"})
    assert response.status_code == 302
    assert Membership.objects.get(user__username="dana", team=acme).role == "auditor"
    assert stranger.get("/account/").status_code == 200  # signed in
    again = Client().get(link)
    assert again.status_code == 410 and "already used" in again.content.decode()


def test_only_the_hash_of_the_link_is_kept(as_alice, acme, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        invite(as_alice, acme)
    key = link_from_mail().strip("/").split("/")[-1]
    assert key not in str(list(Invitation.objects.values()))
    assert key not in str(list(AuditEvent.objects.values()))


def test_an_expired_invitation_is_refused(alice, acme):
    _, raw = services.invite_member(actor=alice, team=acme, email="d@example.com", role="member", accept_url=str)
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = Client().post(f"/invite/{raw}/", {"username": "d", "password1": "a-Long-pass-phrase-9", "password2": "a-Long-pass-phrase-9"})
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert not Membership.objects.filter(user__username="d").exists()


def test_a_forged_or_cancelled_link_is_refused(as_alice, alice, acme):
    assert Client().get("/invite/gpi_forged/").status_code == 410
    invitation, raw = services.invite_member(actor=alice, team=acme, email="d@example.com", role="member", accept_url=str)
    as_alice.post("/team/", {"action": "cancel", "invitation": invitation.pk})
    assert "cancelled" in Client().get(f"/invite/{raw}/").content.decode()


def test_a_weak_password_is_refused_at_sign_up(alice, acme):
    _, raw = services.invite_member(actor=alice, team=acme, email="d@example.com", role="member", accept_url=str)
    response = Client().post(f"/invite/{raw}/", {"username": "d", "password1": "password", "password2": "password"})
    page = response.content.decode()
    assert "too common" in page and "too short" in page
    assert not Invitation.objects.filter(accepted_at__isnull=False).exists()


def test_a_signed_in_user_joins_with_their_account(alice, acme, charlie):
    _, raw = services.invite_member(actor=alice, team=acme, email="Charlie@Example.com", role="member", accept_url=str)
    theirs = Client()
    theirs.force_login(charlie)
    theirs.post(f"/invite/{raw}/")
    assert Membership.objects.get(user=charlie, team=acme).role == "member"


def test_an_admin_promotes_a_member(as_alice, bob):
    membership = Membership.objects.get(user=bob)
    as_alice.post("/team/", {"action": "role", "membership": membership.pk, "role": "admin"})
    membership.refresh_from_db()
    assert membership.role == "admin"
    event = AuditEvent.objects.get(action="member.change_role")
    assert (event.details["from"], event.details["to"]) == ("member", "admin")


def test_the_last_admin_stays(as_alice, alice):
    own = Membership.objects.get(user=alice)
    response = as_alice.post("/team/", {"action": "role", "membership": own.pk, "role": "member"}, follow=True)
    assert "at least one admin" in response.content.decode()
    own.refresh_from_db()
    assert own.role == "admin"


def test_removing_a_member_ends_their_sessions_and_team_tokens(as_alice, bob, acme, audrey, globex):
    theirs = Client()
    theirs.force_login(bob)
    _, raw = services.create_api_token(actor=bob, user=bob, name="acme only", scopes=["read"], teams=[acme])
    membership = Membership.objects.get(user=bob, team=acme)
    as_alice.post("/team/", {"action": "remove", "membership": membership.pk})
    assert not Membership.objects.filter(user=bob).exists()
    assert theirs.get("/account/").status_code == 302
    assert ApiToken.objects.get().revoked_at is not None
    event = AuditEvent.objects.get(action="member.remove")
    assert event.team_id == acme.pk and event.details["signed_out"] == 1


def test_a_token_of_several_teams_only_loses_the_one(alice, audrey, acme, globex):
    token, _ = services.create_api_token(actor=audrey, user=audrey, name="both", scopes=["read"], teams=[acme, globex])
    services.remove_member(actor=alice, membership=Membership.objects.get(user=audrey, team=acme))
    token.refresh_from_db()
    assert token.revoked_at is None and [t.name for t in token.teams.all()] == ["Globex"]


@pytest.mark.parametrize("who", ["bob", "audrey", "charlie"])
def test_others_cannot_manage_acme(client, request, who, acme, bob):
    client.force_login(request.getfixturevalue(who))
    membership = Membership.objects.get(user=bob, team=acme)
    assert client.post("/team/", {"action": "remove", "membership": membership.pk}).status_code == 404
    assert client.post("/team/", {"action": "role", "membership": membership.pk, "role": "admin"}).status_code == 404
    invite(client, acme)
    assert not Invitation.objects.exists()
    assert Membership.objects.get(pk=membership.pk).role == "member"


def test_bad_input_is_refused(as_alice, acme, bob):
    membership = Membership.objects.get(user=bob)
    assert as_alice.post("/team/", {"action": "role", "membership": "x"}).status_code == 404
    response = as_alice.post("/team/", {"action": "role", "membership": membership.pk, "role": "owner"}, follow=True)
    assert "Choose a role" in response.content.decode()
    response = invite(as_alice, acme, email="not-an-email")
    assert "valid email" in response.content.decode() and not Invitation.objects.exists()


def test_an_auditor_sees_it_in_the_audit_log(as_alice, bob, audrey, acme):
    membership = Membership.objects.get(user=bob)
    as_alice.post("/team/", {"action": "role", "membership": membership.pk, "role": "auditor"})
    auditor = Client()
    auditor.force_login(audrey)
    actions = [e["action"] for e in auditor.get(f"/api/v1/audit/events/?team={acme.pk}").json()["results"]]
    assert "member.change_role" in actions


def test_the_admin_sees_the_link_once_after_inviting(as_alice, acme, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        shown = as_alice.post("/team/", {"action": "invite", "team": acme.pk, "email": "dana@example.com",
                                         "role": "member"}, follow=True).content.decode()
    box = shown.split('id="invite-link"')[1].split("</div></div>")[0]
    assert "dana@example.com" in box and link_from_mail() in box
    assert 'id="invite-link"' not in as_alice.get("/team/").content.decode()
