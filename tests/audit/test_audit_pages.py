import re

from audit_support import events_after, head_seq
from django.utils import timezone

from audit import checkpoints, recording
from audit.models import AuditEvent, Verification


def test_audrey_finds_her_own_sign_in_in_the_last_hour(client, audrey):
    client.post("/login/", {"username": "audrey", "password": "demo-password"})
    page = client.get(
        "/audit/",
        {"since": timezone.now().strftime("%Y-%m-%dT%H:00"), "action": "auth.login"},
    )
    assert page.status_code == 200
    assert [(e.action, e.actor_name) for e in page.context["rows"]] == [("auth.login", "audrey")]


def test_the_page_lists_only_visible_teams(logged_in, alice, acme, globex):
    recording.record_event(actor="system", action="x.acme", team=acme)
    recording.record_event(actor="system", action="x.globex", team=globex)
    html = logged_in(alice).get("/audit/").content.decode()
    assert "x.acme" in html and "x.globex" not in html


def test_a_member_gets_403_and_it_is_audited(logged_in, bob):
    before = head_seq()
    assert logged_in(bob).get("/audit/").status_code == 403
    assert [(e.action, e.outcome) for e in events_after(before)] == [("page.denied", "denied")]


def test_the_event_page_shows_its_chain_fields(logged_in, audrey, acme):
    event = recording.record_event(actor="system", action="x.acme", team=acme)
    checkpoints.write_checkpoint()
    page = logged_in(audrey).get(f"/audit/{event.seq}/")
    html = page.content.decode()
    assert event.hash in html and event.prev_hash in html
    assert page.context["chain"]["hash_ok"] and page.context["chain"]["checkpoint_signed"]


def test_another_teams_event_page_is_404(logged_in, alice, globex):
    event = recording.record_event(actor="system", action="x.globex", team=globex)
    assert logged_in(alice).get(f"/audit/{event.seq}/").status_code == 404


def test_verify_now_records_the_result_and_shows_it(logged_in, audrey, events):
    events(3)
    client = logged_in(audrey)
    response = client.post("/audit/verify/", follow=True)
    run = Verification.objects.get()
    assert run.valid and run.actor_name == "audrey"
    assert b"The audit log verifies" in response.content and response.context["verification"] == run


def test_a_broken_chain_shows_invalid_with_the_record(logged_in, audrey, acme, events, tamper):
    events(3, team=acme)
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 2")
    html = logged_in(audrey).post("/audit/verify/", follow=True).content.decode()
    assert "INVALID" in html and 'href="/audit/2/"' in html


def test_a_bad_filter_answers_400_naming_the_field(logged_in, audrey):
    page = logged_in(audrey).get("/audit/", {"since": "soon"})
    assert page.status_code == 400 and "since" in page.context["form"].errors


def test_export_links_carry_the_filters(logged_in, audrey):
    html = logged_in(audrey).get("/audit/", {"action": "auth.*"}).content.decode()
    assert "/api/v1/audit/export/?format=csv&amp;action=auth.%2A" in html


def test_older_pages_continue_below_the_last_row(logged_in, ops, events):
    events(60)
    client = logged_in(ops)
    first = client.get("/audit/")
    second = client.get("/audit/", {"before": first.context["older"]})
    seen = [e.seq for e in first.context["rows"]] + [e.seq for e in second.context["rows"]]
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == len(seen) >= 60


def test_verify_now_keeps_the_filters(logged_in, audrey, events):
    events(1)
    response = logged_in(audrey).post(
        "/audit/verify/", {"query": "action=auth.%2A&outcome=failure"}
    )
    assert response.url == "/audit/?action=auth.%2A&outcome=failure"


def test_a_team_admin_sees_the_verdict_but_not_the_whole_logs_counts(
    logged_in, alice, acme, globex, events, tamper
):
    events(2, team=acme)
    events(3, team=globex)
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 4")
    response = logged_in(alice).post("/audit/verify/", follow=True)
    body = response.content.decode()
    assert "a record of another team is broken" in body
    assert "first broken record #4" not in body and "First broken record" not in body
    assert 'href="/audit/4/"' not in body
    assert "segment" not in body.lower().replace("segments</summary>", "")
    # her own log keeps the verification as she saw it: no whole-log count, no other team's record
    event = AuditEvent.objects.filter(action="audit.verify").latest("seq")
    assert event.details == {"valid": False, "from": None, "to": None, "broken": "a record of another team"}
    assert event.target_name == "INVALID"
    own_log = logged_in(alice).get("/audit/").content.decode()
    assert "audit.verify" in own_log and not re.search(r"\(\d+ events\)", own_log)


def test_a_team_admin_keeps_the_broken_seq_of_her_own_teams_record(logged_in, alice, acme, events, tamper):
    events(2, team=acme)
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 2")
    logged_in(alice).post("/audit/verify/")
    details = AuditEvent.objects.filter(action="audit.verify").latest("seq").details
    assert details["first_broken_seq"] == 2 and "checked" not in details


def test_an_operators_verification_keeps_the_whole_count(logged_in, ops, events):
    events(3)
    logged_in(ops).post("/audit/verify/")
    details = AuditEvent.objects.filter(action="audit.verify").latest("seq").details
    assert details["valid"] and details["checked"] >= 3


def test_an_operator_sees_the_whole_report(logged_in, ops, events):
    events(3)
    body = logged_in(ops).post("/audit/verify/", follow=True).content.decode()
    assert "3 events, every segment valid" in body and "Segments" in body
