"""Admins and auditors see the sign-ins, failed sign-ins and refusals of their teams'
members; not those of other teams' members."""

from audit import access, recording
from console import services as console_services


def _seen(user):
    return list(access.visible_events(user).values_list("action", "actor_name", "target_name"))


def test_an_admin_sees_a_members_sign_ins_and_refusals(alice, bob, charlie):
    console_services.record_login(user=bob, success=True)
    console_services.record_login(user=None, success=False, username="bob")
    recording.record_event(actor=bob, action="api.denied", outcome="denied")
    seen = _seen(alice)
    assert ("auth.login", "bob", "bob") in seen
    assert ("auth.login_failed", "anonymous", "bob") in seen
    assert ("api.denied", "bob", "") in seen


def test_an_auditor_sees_them_too_but_not_other_teams_members(audrey, bob, charlie, alice):
    console_services.record_login(user=bob, success=True)
    console_services.record_login(user=charlie, success=True)
    assert ("auth.login", "bob", "bob") in _seen(audrey)
    assert ("auth.login", "charlie", "charlie") not in _seen(alice)


def test_a_members_other_team_less_events_stay_private(alice, bob):
    recording.record_event(actor=bob, action="api_token.create", target_name="laptop")
    assert not any(action == "api_token.create" for action, *_ in _seen(alice))


def test_the_record_keeps_the_role_and_target_name_of_the_time(alice, acme):
    event = recording.record_event(actor=alice, action="team.rename", target=acme, team=acme)
    acme.name = "Acme Two"
    acme.save()
    event.refresh_from_db()
    assert (event.actor_role, event.target_name) == ("admin", "Acme")
