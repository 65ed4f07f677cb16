"""The network pages: VPCs and subnets, security groups and their rules, and the
instance page's network panel; each bad input shown on the form by name."""

import pytest

from network import security_groups
from network.models import SecurityRule, Vpc


@pytest.fixture
def logged_in(client):
    def _as(user):
        client.force_login(user)
        return client

    return _as


def test_a_vpc_is_created_from_the_page(logged_in, acme, bob):
    r = logged_in(bob).post("/networks/", {"team": acme.pk, "name": "lab", "cidr": "10.70.0.0/16"})
    vpc = Vpc.objects.get(name="lab")
    assert r.status_code == 302 and r.url == f"/networks/{vpc.pk}/"


def test_a_bad_range_is_shown_on_the_form(logged_in, acme, bob):
    r = logged_in(bob).post("/networks/", {"team": acme.pk, "name": "lab", "cidr": "10.70.0.1/16"})
    assert r.status_code == 400
    assert "10.70.0.1/16 has host bits set; the network is 10.70.0.0/16." in r.content.decode()


def test_an_overlapping_subnet_is_shown_on_the_form(logged_in, acme, bob, acme_net):
    r = logged_in(bob).post(f"/networks/{acme_net['vpc'].pk}/", {"name": "x", "cidr": "10.0.1.0/24"})
    assert r.status_code == 400
    assert "overlaps subnet default (10.0.0.0/20)" in r.content.decode()


def test_an_outsider_gets_404_on_the_teams_pages(logged_in, charlie, acme_net):
    client = logged_in(charlie)
    assert client.get(f"/networks/{acme_net['vpc'].pk}/").status_code == 404
    assert client.get(f"/security-groups/{acme_net['group'].pk}/").status_code == 404
    assert f'data-group="{acme_net["group"].pk}"' not in client.get("/security-groups/").content.decode()


def test_a_rule_is_added_and_removed_on_the_group_page(logged_in, bob, acme_net):
    client, group = logged_in(bob), acme_net["group"]
    r = client.post(f"/security-groups/{group.pk}/", {"direction": "inbound", "protocol": "tcp", "port_from": "22",
                                                     "cidr": "10.8.0.0/16"})
    assert r.status_code == 302
    rule = SecurityRule.objects.get(group=group, port_from=22)
    assert "10.8.0.0/16" in client.get(f"/security-groups/{group.pk}/").content.decode()
    client.post(f"/security-groups/{group.pk}/rules/{rule.pk}/remove/")
    assert not SecurityRule.objects.filter(pk=rule.pk).exists()


@pytest.mark.parametrize("fields, message", [
    ({"port_from": "70000"}, "A port is from 0 to 65535; got 70000."),
    ({"cidr": "0.0.0.0/0"}, "confirm it (API: confirm_open: true)"),
    ({"cidr": "", "port_from": "22"}, "Name exactly one source"),
])
def test_each_bad_rule_is_shown_by_name(logged_in, bob, acme_net, fields, message):
    group = acme_net["group"]
    body = {"direction": "inbound", "protocol": "tcp", "port_from": "443", "cidr": "10.8.0.0/16", **fields}
    r = logged_in(bob).post(f"/security-groups/{group.pk}/", body)
    assert r.status_code == 400
    assert message in r.content.decode()


def test_the_confirmation_opens_to_the_world(logged_in, bob, acme_net):
    group = acme_net["group"]
    r = logged_in(bob).post(f"/security-groups/{group.pk}/", {"direction": "inbound", "protocol": "tcp",
                                                             "port_from": "443", "cidr": "0.0.0.0/0",
                                                             "confirm_open": "on"})
    assert r.status_code == 302


def test_the_instance_page_shows_address_groups_and_applied_state(logged_in, fleet, acme, bob, running):
    web = running(bob, acme, "web", host=fleet["hosts"]["h100-a"])
    page = logged_in(bob).get(f"/instances/{web.pk}/").content.decode()
    assert web.interface.address in page
    assert 'id="instance-groups"><a href' in page
    assert "applying: version 1 wanted, nothing applied" in page


def test_groups_are_changed_from_the_instance_page(logged_in, fleet, acme, bob, running):
    web = running(bob, acme, "web", host=fleet["hosts"]["h100-a"])
    other = security_groups.create_group(actor=bob, team=acme, name="ssh")
    r = logged_in(bob).post(f"/network-interfaces/{web.interface.pk}/groups/", {"security_groups": [other.pk]})
    assert r.status_code == 302
    assert [g.name for g in web.interface.groups.all()] == ["ssh"]
