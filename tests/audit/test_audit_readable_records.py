"""Records read as what happened: target names beside ids, the actor's role, details as a
small table."""

from audit import recording


def test_the_list_shows_names_roles_and_details(logged_in, audrey, alice, acme):
    recording.record_event(
        actor=alice,
        action="team.rename",
        target=acme,
        team=acme,
        details={"from": "A", "to": "Acme"},
    )
    body = logged_in(audrey).get("/audit/").content.decode()
    assert '<span class="name">Acme</span>' in body and "team #" in body
    assert '<span class="badge role">admin</span>' in body
    assert "<th>from</th><td>A</td>" in body


def test_the_event_page_shows_details_as_a_table(logged_in, audrey, alice, acme):
    event = recording.record_event(
        actor=alice,
        action="team.rename",
        target=acme,
        team=acme,
        details={"to": "Acme", "gpus": [1, 2]},
    )
    body = logged_in(audrey).get(f"/audit/{event.seq}/").content.decode()
    assert '<table class="kv-table" id="details">' in body
    assert '<th>gpus</th><td class="wrap">[1, 2]</td>' in body
    assert "Role at the time</dt><dd>admin" in body
