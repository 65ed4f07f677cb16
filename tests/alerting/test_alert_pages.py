"""The alert pages: every category on one page with counts that match the overview;
resolve and silence from the page; rules and channels pages for admins and operators;
an instance page shows its open alerts."""

import re

import pytest

from alerting import alerts
from alerting.models import Alert, AlertRule, NotificationChannel, Silence
from audit.models import AuditEvent


def open_alert(team, instance=None, category="telemetry", kind="temperature", key="k1", message="hot GPU"):
    return alerts.raise_alert(kind, alerts.Condition(key=key, message=message, team_id=team.pk,
                                                     instance_id=getattr(instance, "pk", None), category=category))


@pytest.fixture
def mixed(acme, acme_instance):
    return [open_alert(acme, acme_instance), open_alert(acme, category="budget", kind="budget", key="b1",
                                                        message="50% of the budget")]


def count_on(html: str, attr: str) -> int:
    return int(re.search(rf'{attr}>(\d+)<', html).group(1))


def test_the_page_counts_match_the_overview(client, bob, mixed):
    client.force_login(bob)
    page = client.get("/alerts/").content.decode()
    overview = client.get("/").content.decode()
    assert count_on(page, "data-alert-count") == count_on(overview, "data-alert-count") == 2
    assert "50% of the budget" in page and "hot GPU" in page


def test_the_category_filter_narrows_and_a_bad_one_is_a_400(client, bob, mixed):
    client.force_login(bob)
    page = client.get("/alerts/?category=budget").content.decode()
    assert "50% of the budget" in page and "hot GPU" not in page
    assert client.get("/alerts/?category=nope").status_code == 400


def test_a_member_resolves_and_silences_from_the_page(client, bob, mixed):
    client.force_login(bob)
    client.post(f"/alerts/{mixed[0].pk}/silence/", {"hours": "2"})
    assert Silence.objects.get().key == mixed[0].key
    client.post(f"/alerts/{mixed[0].pk}/resolve/")
    alert = Alert.objects.get(pk=mixed[0].pk)
    assert (alert.state, alert.resolved_by.username) == ("resolved", "bob")
    assert AuditEvent.objects.filter(action__in=("alert.silence", "alert.resolve"), actor_name="bob").count() == 2


def test_an_auditor_and_an_outsider_cannot_resolve(client, audrey, charlie, mixed):
    client.force_login(audrey)
    assert client.post(f"/alerts/{mixed[0].pk}/resolve/").status_code == 403
    client.force_login(charlie)
    assert client.post(f"/alerts/{mixed[0].pk}/resolve/").status_code == 404


def test_the_instance_page_shows_its_open_alerts(client, bob, mixed, acme_instance):
    client.force_login(bob)
    page = client.get(f"/instances/{acme_instance.pk}/").content.decode()
    assert "hot GPU" in page and "50% of the budget" not in page


def test_an_admin_adds_a_rule_on_the_rules_page(client, alice, acme):
    client.force_login(alice)
    assert "Power-cap throttling" in client.get("/alerts/rules/").content.decode()
    client.post("/alerts/rules/", {"owner": str(acme.pk), "name": "busy", "metric": "gpu_util", "comparison": ">=",
                                   "threshold": "90", "hold_s": "5", "severity": "critical"})
    assert AlertRule.objects.get(name="busy").team == acme


def test_a_member_sees_rules_but_no_form(client, bob, acme):
    client.force_login(bob)
    page = client.get("/alerts/rules/").content.decode()
    assert "Power-cap throttling" in page and 'id="rule-form"' not in page
    rule = AlertRule.objects.filter(team=acme).first()
    assert client.post(f"/alerts/rules/{rule.pk}/", {"action": "delete"}).status_code == 403


def test_a_refused_channel_target_is_said_on_the_form(client, alice, acme):
    client.force_login(alice)
    page = client.post("/alerts/channels/", {"owner": str(acme.pk), "name": "hook", "kind": "webhook",
                                             "target": "http://127.0.0.1/x", "min_severity": "info"})
    assert "ALERT_WEBHOOK_ALLOW_HOSTS" in page.content.decode() and not NotificationChannel.objects.exists()


def test_operators_make_fleet_rules_on_the_page(client, ops, fleet):
    client.force_login(ops)
    client.post("/alerts/rules/", {"owner": "operators", "name": "h100-a busy", "metric": "gpu_util",
                                   "comparison": ">=", "threshold": "90", "hold_s": "5", "severity": "warning",
                                   "host": "h100-a"})
    rule = AlertRule.objects.get(name="h100-a busy")
    assert rule.team is None and rule.host.name == "h100-a"
