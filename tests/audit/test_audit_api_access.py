"""Who reads which audit events through the API."""

from audit_support import events_after, head_seq

from audit import recording
from audit.models import AuditEvent

URL = "/api/v1/audit/events/"


def _seqs(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {row["seq"] for row in response.json()["results"]}


def _team_events(acme, globex):
    return (
        recording.record_event(actor="system", action="x.acme", team=acme),
        recording.record_event(actor="system", action="x.globex", team=globex),
        recording.record_event(actor="system", action="x.fleet"),
    )


def test_an_auditor_of_both_teams_sees_both(api, audrey, acme, globex):
    a, g, fleet = _team_events(acme, globex)
    assert _seqs(api(audrey).get(URL)) >= {a.seq, g.seq} and fleet.seq not in _seqs(
        api(audrey).get(URL)
    )


def test_a_team_admin_sees_only_their_team(api, alice, charlie, acme, globex):
    a, g, _ = _team_events(acme, globex)
    assert a.seq in _seqs(api(alice).get(URL)) and g.seq not in _seqs(api(alice).get(URL))
    assert g.seq in _seqs(api(charlie).get(URL)) and a.seq not in _seqs(api(charlie).get(URL))


def test_operators_see_everything(api, ops, acme, globex):
    assert {e.seq for e in _team_events(acme, globex)} <= _seqs(api(ops).get(URL))


def test_a_member_is_refused_and_the_refusal_is_audited(api, bob):
    before = head_seq()
    response = api(bob).get(URL)
    assert response.status_code == 403
    (denied,) = events_after(before)
    assert (denied.action, denied.outcome, denied.actor_name) == ("api.denied", "denied", "bob")


def test_another_teams_event_answers_404(api, alice, globex):
    event = recording.record_event(actor="system", action="x.globex", team=globex)
    assert api(alice).get(f"{URL}{event.seq}/").status_code == 404


def test_asking_for_another_teams_events_answers_404(api, alice, globex):
    assert api(alice).get(URL, {"team": globex.pk}).status_code == 404


def test_a_user_sees_their_own_sign_in_but_not_an_outsiders(api, client, charlie, alice):
    client.post("/login/", {"username": "charlie", "password": "demo-password"})
    login = AuditEvent.objects.get(action="auth.login", actor_name="charlie")
    assert login.team_id is None
    assert login.seq in _seqs(api(charlie).get(URL))
    assert login.seq not in _seqs(api(alice).get(URL))


def test_the_detail_carries_the_chain_fields(api, ops, acme):
    event = recording.record_event(actor="system", action="x.acme", team=acme)
    body = api(ops).get(f"{URL}{event.seq}/").json()
    assert (body["seq"], body["prev_hash"], body["hash"], body["team_name"]) == (
        event.seq,
        event.prev_hash,
        event.hash,
        "Acme",
    )


def test_anonymous_callers_are_turned_away(api, db):
    assert api().get(URL).status_code in (401, 403)
