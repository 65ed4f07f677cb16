import pytest

from audit.models import AuditEvent
from network.models import SecurityRule


@pytest.fixture
def group(api, acme, bob):
    r = api(bob).post("/api/v1/security-groups/", {"team": acme.pk, "name": "web", "rules": []}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()


def test_a_new_group_lets_nothing_in_and_everything_out(api, acme, bob):
    r = api(bob).post("/api/v1/security-groups/", {"team": acme.pk, "name": "db"}, format="json")
    assert [(x["direction"], x["protocol"], x["cidr"]) for x in r.json()["rules"]] == [("outbound", "any", "0.0.0.0/0")]


def add(client, group, **rule):
    return client.post(f"/api/v1/security-groups/{group['id']}/rules/", rule, format="json")


def test_a_port_rule_is_added_and_audited(api, bob, group):
    r = add(api(bob), group, direction="inbound", protocol="tcp", port_from=443, cidr="10.0.0.0/8")
    assert r.status_code == 201, r.json()
    assert r.json()["port_to"] == 443
    assert AuditEvent.objects.filter(action="network.rule.add").count() == 1


@pytest.mark.parametrize("rule, field, words", [
    ({"port_from": 70000}, "port_from", "from 0 to 65535"),
    ({"port_from": -1}, "port_from", "whole number from 0 to 65535"),
    ({"port_from": "²"}, "port_from", "whole number from 0 to 65535"),
    ({"port_from": "9" * 30}, "port_from", "whole number from 0 to 65535"),
    ({"peer_group": "²", "cidr": None}, "peer_group", "not one of team"),
    ({"port_from": 90, "port_to": 80}, "port_to", "ends (80) before it starts (90)"),
    ({"protocol": "sctp"}, "protocol", "one of tcp, udp, icmp or any"),
    ({"direction": "sideways"}, "direction", "inbound or outbound"),
    ({"protocol": "icmp", "port_from": 1}, "port_from", "ports apply to tcp and udp only"),
    ({"cidr": ""}, "cidr", "exactly one source"),
    ({"cidr": "10.0.0.1/8"}, "cidr", "host bits set"),
    ({"cidr": "0.0.0.0/0"}, "confirm_open", "whole internet"),
])
def test_each_bad_rule_is_named(api, bob, group, rule, field, words):
    body = {"direction": "inbound", "protocol": "tcp", "port_from": 22, "cidr": "10.0.0.0/8", **rule}
    r = add(api(bob), group, **body)
    assert r.status_code == 400
    assert words in r.json()[field][0]
    assert not SecurityRule.objects.filter(group_id=group["id"]).exists()


def test_open_to_the_world_needs_confirmation(api, bob, group):
    r = add(api(bob), group, direction="inbound", protocol="tcp", port_from=22, cidr="0.0.0.0/0", confirm_open=True)
    assert r.status_code == 201


def test_outbound_to_everywhere_needs_no_confirmation(api, bob, group):
    assert add(api(bob), group, direction="outbound", protocol="any", cidr="0.0.0.0/0").status_code == 201


def test_another_teams_group_as_source_is_refused(api, globex, bob, charlie, group):
    theirs = api(charlie).post("/api/v1/security-groups/", {"team": globex.pk, "name": "db"}, format="json").json()
    r = add(api(bob), group, direction="inbound", protocol="tcp", port_from=5432, peer_group=theirs["id"])
    assert r.status_code == 400
    assert "not one of team Acme's groups" in r.json()["peer_group"][0]


def test_a_group_of_the_same_team_is_a_source(api, acme, bob, group):
    other = api(bob).post("/api/v1/security-groups/", {"team": acme.pk, "name": "lb"}, format="json").json()
    r = add(api(bob), group, direction="inbound", protocol="tcp", port_from=8080, peer_group=other["id"])
    assert r.status_code == 201
    assert r.json()["peer_group"] == other["id"]


def test_replacing_the_rules_is_all_or_nothing(api, bob, group):
    add(api(bob), group, direction="inbound", protocol="tcp", port_from=22, cidr="10.0.0.0/8")
    r = api(bob).patch(f"/api/v1/security-groups/{group['id']}/", {"rules": [
        {"direction": "inbound", "protocol": "udp", "port_from": 53, "cidr": "10.1.0.0/16"},
        {"direction": "inbound", "protocol": "tcp", "port_from": 99999, "cidr": "10.1.0.0/16"},
    ]}, format="json")
    assert r.status_code == 400
    assert "rules[1].port_from" in r.json()
    assert list(SecurityRule.objects.filter(group_id=group["id"]).values_list("port_from", flat=True)) == [22]


def test_a_rule_is_removed(api, bob, group):
    rule = add(api(bob), group, direction="inbound", protocol="tcp", port_from=22, cidr="10.0.0.0/8").json()
    assert api(bob).delete(f"/api/v1/security-groups/{group['id']}/rules/{rule['id']}/").status_code == 204
    assert AuditEvent.objects.filter(action="network.rule.remove").count() == 1


def test_an_outsider_cannot_touch_the_group(api, charlie, group):
    r = add(api(charlie), group, direction="inbound", protocol="tcp", port_from=22, cidr="10.0.0.0/8")
    assert r.status_code == 404


@pytest.mark.parametrize("cidr", [42, ["10.0.0.0/8"], {"a": 1}])
def test_a_cidr_that_is_not_text_is_named(api, bob, group, cidr):
    r = add(api(bob), group, direction="inbound", protocol="tcp", port_from=22, cidr=cidr)
    assert r.status_code == 400
    assert "cidr" in r.json()
