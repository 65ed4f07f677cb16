"""An invitation link is for the invited address: another signed-in account is refused
(and that is audited), a sign-up cannot take an address that has an account, and the
link works once."""

from django.test import Client

from audit.models import AuditEvent
from console import services
from console.models import Invitation, Membership

PASSWORD = {"password1": "a-Long-pass-phrase-9", "password2": "a-Long-pass-phrase-9"}


def invitation_for(alice, acme, email, role="member") -> str:
    return services.invite_member(actor=alice, team=acme, email=email, role=role, accept_url=str)[1]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_charlie_cannot_join_with_a_link_for_someone_else(alice, acme, charlie):
    raw = invitation_for(alice, acme, "dana@example.com", role="admin")
    response = signed_in(charlie).post(f"/invite/{raw}/")
    assert response.status_code == 403 and "another email address" in response.content.decode()
    assert not Membership.objects.filter(user=charlie, team=acme).exists()
    assert Invitation.objects.get().status == "pending"  # dana can still use it


def test_the_refusal_is_audited_for_acmes_admins(alice, acme, charlie):
    raw = invitation_for(alice, acme, "dana@example.com")
    signed_in(charlie).post(f"/invite/{raw}/")
    event = AuditEvent.objects.get(action="member.accept_invite")
    assert (event.outcome, event.actor_name, event.team_id) == ("denied", "charlie", acme.pk)


def test_the_invited_account_joins_and_the_link_is_spent(alice, acme, charlie):
    raw = invitation_for(alice, acme, "charlie@example.com")
    assert signed_in(charlie).post(f"/invite/{raw}/").status_code == 302
    assert Membership.objects.get(user=charlie, team=acme).role == "member"
    again = signed_in(charlie).post(f"/invite/{raw}/")
    assert again.status_code == 410 and "already used" in again.content.decode()


def test_a_sign_up_cannot_take_an_address_with_an_account(alice, acme, charlie):
    raw = invitation_for(alice, acme, "charlie@example.com", role="admin")
    response = Client().post(f"/invite/{raw}/", {"username": "charlie2", **PASSWORD})
    assert response.status_code == 403 and "sign in with it" in response.content.decode()
    assert not Membership.objects.filter(team=acme, user__username="charlie2").exists()


def test_a_stranger_signs_up_with_the_invited_address_only(alice, acme):
    raw = invitation_for(alice, acme, "dana@example.com")
    Client().post(f"/invite/{raw}/", {"username": "dana", "email": "mallory@example.com", **PASSWORD})
    assert Membership.objects.get(team=acme, user__username="dana").user.email == "dana@example.com"
