from audit_support import events_after, head_seq

URL = "/api/v1/audit/verify/"


def test_an_operator_verifies_the_chain(api, ops, events):
    events(3)
    body = api(ops).get(URL).json()
    assert body["valid"] and body["checked"] == 3 and body["segments"][0]["valid"]


def test_a_tampered_record_is_named(api, ops, events, tamper):
    events(3)
    tamper("UPDATE audit_auditevent SET outcome = 'denied' WHERE seq = 2")
    body = api(ops).get(URL).json()
    assert (body["valid"], body["first_broken_seq"]) == (False, 2)
    assert body["reason"].startswith("hash mismatch")


def test_a_range_can_be_verified(api, ops, events):
    events(5)
    body = api(ops).get(URL, {"from": 2, "to": 4}).json()
    assert (body["first_seq"], body["last_seq"], body["checked"]) == (2, 4, 3)


def test_a_team_admin_learns_nothing_about_other_teams(api, alice, acme, globex, events, tamper):
    events(2, team=acme)
    events(3, team=globex)
    body = api(alice).get(URL).json()
    assert (
        body["valid"] and body["checked"] == 2 and (body["first_seq"], body["last_seq"]) == (1, 2)
    )
    assert "segments" not in body
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 4")
    body = api(alice).get(URL).json()
    assert not body["valid"] and body["first_broken_seq"] is None
    assert body["reason"] == "a record of another team does not verify"


def test_a_team_admin_is_told_which_of_their_records_broke(api, alice, acme, events, tamper):
    events(3, team=acme)
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 2")
    body = api(alice).get(URL).json()
    assert body["first_broken_seq"] == 2 and body["reason"].startswith("hash mismatch")


def test_a_bad_bound_names_the_field(api, audrey):
    response = api(audrey).get(URL, {"to": "whenever"})
    assert response.status_code == 400 and "to" in response.json()


def test_a_member_is_refused(api, bob):
    before = head_seq()
    assert api(bob).get(URL).status_code == 403
    assert [e.action for e in events_after(before)] == ["api.denied"]


def test_each_run_is_audited(api, audrey, events):
    events(1)
    before = head_seq()
    api(audrey).get(URL)
    assert [(e.action, e.actor_name) for e in events_after(before)] == [("audit.verify", "audrey")]
