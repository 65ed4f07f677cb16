"""/api/v1/alert-rules/: team admins manage their team's rules, operators the fleet's;
every change is audited; bad input is a 400 that writes nothing."""

import pytest

from alerting.models import AlertRule
from audit.models import AuditEvent

RULE = {"name": "busy", "metric": "gpu_util", "comparison": ">=", "threshold": 90, "hold_s": 5}


def test_an_admin_creates_a_team_rule_and_it_is_audited(api, alice, acme):
    response = api(alice).post("/api/v1/alert-rules/", RULE | {"team": acme.pk, "severity": "critical"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["scope"], body["condition"]) == ("team", "Utilization >= 90 % for 5 s")
    event = AuditEvent.objects.get(action="alert_rule.create")
    assert (event.actor_name, event.team_id, event.details["metric"]) == ("alice", acme.pk, "gpu_util")


def test_a_member_may_read_but_not_write_rules(api, bob, acme):
    assert api(bob).get("/api/v1/alert-rules/").json()["count"] == 7
    assert api(bob).post("/api/v1/alert-rules/", RULE | {"team": acme.pk}, format="json").status_code == 403


def test_a_team_sees_only_its_rules(api, charlie, acme, globex):
    teams = {r["team"] for r in api(charlie).get("/api/v1/alert-rules/").json()["results"]}
    assert teams == {globex.pk}


def test_another_teams_rule_is_a_404(api, charlie, acme):
    rule = AlertRule.objects.filter(team=acme).first()
    assert api(charlie).patch(f"/api/v1/alert-rules/{rule.pk}/", {"threshold": 1}, format="json").status_code == 404


def test_only_operators_make_fleet_host_and_model_rules(api, alice, ops, fleet):
    assert api(alice).post("/api/v1/alert-rules/", RULE, format="json").status_code == 403
    response = api(ops).post("/api/v1/alert-rules/", RULE | {"host": "h100-a"}, format="json")
    assert response.status_code == 201 and response.json()["scope"] == "host"
    response = api(ops).post("/api/v1/alert-rules/", RULE | {"gpu_model": "H100-80GB"}, format="json")
    assert response.json()["scope"] == "gpu_model"


def test_a_team_rule_cannot_name_a_host(api, alice, acme, fleet):
    response = api(alice).post("/api/v1/alert-rules/", RULE | {"team": acme.pk, "host": "h100-a"}, format="json")
    assert response.status_code == 400 and "host" in response.json()


@pytest.mark.parametrize("bad", [{"metric": "gpu_mood"}, {"threshold": "hot"}, {"hold_s": -1}, {"name": "a\x00b"},
                                 {"comparison": "=="}, {"severity": "apocalyptic"}, {"name": ""}])
def test_bad_input_is_a_400_that_writes_nothing(api, alice, acme, bad):
    before = AlertRule.objects.count()
    response = api(alice).post("/api/v1/alert-rules/", RULE | {"team": acme.pk} | bad, format="json")
    assert response.status_code == 400 and set(bad) <= set(response.json())
    assert AlertRule.objects.count() == before


def test_an_update_and_a_delete_are_audited_with_what_changed(api, alice, acme):
    rule = AlertRule.objects.get(team=acme, metric="temp_c")
    response = api(alice).patch(f"/api/v1/alert-rules/{rule.pk}/", {"threshold": 80, "enabled": False}, format="json")
    assert response.json()["threshold"] == 80
    event = AuditEvent.objects.get(action="alert_rule.update")
    assert event.details["before"] == {"threshold": 85.0, "enabled": True}
    assert api(alice).delete(f"/api/v1/alert-rules/{rule.pk}/").status_code == 204
    assert AuditEvent.objects.filter(action="alert_rule.delete", target_id=str(rule.pk)).exists()


def test_a_rule_silence_is_audited(api, alice, acme):
    rule = AlertRule.objects.get(team=acme, metric="temp_c")
    response = api(alice).post(f"/api/v1/alert-rules/{rule.pk}/silence/", {"ends_at": "2099-01-01T00:00:00Z"},
                               format="json")
    assert response.status_code == 400  # beyond 30 days
    response = api(alice).post(f"/api/v1/alert-rules/{rule.pk}/silence/", {}, format="json")
    assert response.status_code == 400 and "ends_at" in response.json()
