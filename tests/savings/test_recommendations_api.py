"""GET /api/v1/recommendations/?team=: a team's admins and operators see its advice;
members, other teams and bad input do not get it. Dismiss and snooze are audited."""

from audit.models import AuditEvent
from savings.models import Kind


def test_alice_sees_her_teams_advice(alice, acme, running, telemetry, api):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0)
    body = api(alice).get(f"/api/v1/recommendations/?team={acme.pk}").json()
    assert [(r["instance_name"], r["kind"], r["monthly_saving"]) for r in body["results"]] == [
        ("held", "stop", "2190.00")]
    assert body["results"][0]["reason"] and body["results"][0]["risk"]


def test_charlie_and_bob_do_not(alice, bob, charlie, acme, running, telemetry, api):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0)
    assert api(charlie).get(f"/api/v1/recommendations/?team={acme.pk}").json()["count"] == 0
    assert api(bob).get("/api/v1/recommendations/").json()["count"] == 0


def test_operators_see_every_team(alice, ops, acme, running, telemetry, api):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0)
    assert api(ops).get("/api/v1/recommendations/").json()["count"] == 1


def test_bad_parameters_are_named(alice, api):
    assert "team" in api(alice).get("/api/v1/recommendations/?team=acme").json()
    assert "days" in api(alice).get("/api/v1/recommendations/?days=30").json()


def test_snooze_is_audited_and_hides_the_advice(alice, acme, running, telemetry, api):
    instance = running(alice, acme, "held")
    telemetry(instance, mem_gb=70, activity=0)
    answer = api(alice).post(f"/api/v1/recommendations/{instance.pk}/dismiss/", {"kind": "stop", "days": 7},
                             format="json")
    assert answer.status_code == 200 and answer.json()["until"]
    assert AuditEvent.objects.filter(action="savings.recommendation.snooze", target_id=str(instance.pk)).exists()
    assert api(alice).get("/api/v1/recommendations/").json()["count"] == 0
    assert api(alice).get("/api/v1/recommendations/?dismissed=1").json()["results"][0]["snoozed_until"]


def test_a_bad_dismissal_is_refused_and_writes_nothing(alice, bob, charlie, acme, running, telemetry, api):
    instance = running(alice, acme, "held")
    url = f"/api/v1/recommendations/{instance.pk}/dismiss/"
    assert "kind" in api(alice).post(url, {"kind": "shrink"}, format="json").json()
    assert "days" in api(alice).post(url, {"kind": "stop", "days": "0"}, format="json").json()
    assert api(bob).post(url, {"kind": "stop"}, format="json").status_code in (403, 404)
    assert api(charlie).post(url, {"kind": "stop"}, format="json").status_code == 404
    assert not AuditEvent.objects.filter(action__startswith="savings.").exists()


def test_options_describe_the_bodies_of_dismiss_and_restore(alice, acme, running, api):
    instance = running(alice, acme, "held")
    for verb, fields in (("dismiss", {"kind", "days", "reason"}), ("restore", {"kind"})):
        answer = api(alice).options(f"/api/v1/recommendations/{instance.pk}/{verb}/")
        assert answer.status_code == 200, answer.content
        assert set(answer.json()["actions"]["POST"]) == fields
        assert [c["value"] for c in answer.json()["actions"]["POST"]["kind"]["choices"]] == Kind.values


def test_a_lone_surrogate_in_a_reason_is_refused_by_name(alice, acme, running, api):
    instance = running(alice, acme, "held")
    answer = api(alice).post(f"/api/v1/recommendations/{instance.pk}/dismiss/",
                             '{"kind": "stop", "reason": "x\\ud800"}', content_type="application/json")
    assert answer.status_code == 400
    assert answer.json() == {"reason": ["A lone UTF-16 surrogate (U+D800 to U+DFFF) is not text and is not allowed."]}
    assert not AuditEvent.objects.filter(action__startswith="savings.").exists()
