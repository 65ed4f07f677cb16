"""A launch (API or form) gets a private address and groups: the team's default subnet
and group when none are named, made on demand."""

import pytest

from audit.models import AuditEvent
from instances.models import Instance
from network.models import Interface, SecurityGroup, Subnet, Vpc

LAUNCH = {"name": "web", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand"}


def test_a_launch_without_a_network_gets_the_teams_defaults(api, fleet, acme, bob):
    r = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk}, format="json")
    assert r.status_code == 201, r.json()
    interface = Interface.objects.get(instance_id=r.json()["id"])
    assert r.json()["private_address"] == interface.address
    assert interface.subnet == Subnet.objects.get(vpc__team=acme, is_default=True)
    assert [g.name for g in interface.groups.all()] == ["default"]
    assert Vpc.objects.get(team=acme).is_default
    assert AuditEvent.objects.filter(action="network.interface.attach", team_id=acme.pk).count() == 1


def test_a_launch_names_its_subnet_and_groups(api, fleet, acme, bob, acme_net):
    subnet = api(bob).post("/api/v1/subnets/", {"vpc": acme_net["vpc"].pk, "name": "gpu", "cidr": "10.0.64.0/24"},
                           format="json").json()
    group = api(bob).post("/api/v1/security-groups/", {"team": acme.pk, "name": "ssh"}, format="json").json()
    r = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk, "subnet": subnet["id"],
                                             "security_groups": [group["id"], acme_net["group"].pk]}, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["private_address"] == "10.0.64.2"
    assert sorted(g.name for g in Interface.objects.get(instance_id=r.json()["id"]).groups.all()) == ["default", "ssh"]


@pytest.mark.parametrize("field", ["subnet", "security_groups"])
def test_another_teams_network_is_refused_before_anything_is_placed(api, fleet, acme, globex, bob, charlie, field):
    _ = charlie
    from network import vpcs

    _, subnet, group = vpcs.ensure_defaults(actor=charlie, team=globex)
    value = subnet.pk if field == "subnet" else [group.pk]
    r = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk, field: value}, format="json")
    assert r.status_code == 400
    assert "is not one of team Acme's" in r.json()[field][0]
    assert not Instance.objects.exists()


def test_a_full_subnet_is_named(api, fleet, acme, bob, acme_net, running):
    from network import vpcs

    tiny = vpcs.create_subnet(actor=bob, vpc=acme_net["vpc"], name="tiny", cidr="10.0.99.0/28")
    for n in range(13):  # 16 addresses less the network, the gateway and the broadcast
        running(bob, acme, f"w{n}", subnet=tiny.pk)
    r = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk, "subnet": tiny.pk}, format="json")
    assert r.status_code == 400
    assert "has no free address" in r.json()["subnet"][0]
    assert Instance.objects.count() == 13


def test_the_launch_form_offers_the_teams_subnets_and_groups(client, fleet, acme, bob, acme_net):
    client.force_login(bob)
    page = client.get("/instances/new/")
    assert "Acme · default / default (10.0.0.0/20)" in page.content.decode()
    r = client.post("/instances/new/", {"team": acme.pk, "name": "web", "gpu_model": "H100-80GB", "gpu_count": 1,
                                           "pricing_model": "on_demand", "subnet": acme_net["subnet"].pk,
                                           "security_groups": [acme_net["group"].pk]})
    assert r.status_code == 302, r.content.decode()[:2000]
    assert Interface.objects.get(instance__name="web").address == "10.0.0.2"


def test_groups_change_while_running(api, fleet, acme, bob, acme_net):
    made = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk}, format="json").json()
    group = SecurityGroup.objects.create(team=acme, name="extra")
    interface = Interface.objects.get(instance_id=made["id"])
    r = api(bob).patch(f"/api/v1/network-interfaces/{interface.pk}/", {"security_groups": [group.pk]}, format="json")
    assert r.status_code == 200, r.json()
    assert r.json()["security_groups"] == [group.pk]
    assert AuditEvent.objects.filter(action="network.interface.groups").count() == 1


def test_an_outsider_cannot_change_an_instances_groups(api, fleet, acme, bob, charlie, acme_net):
    made = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk}, format="json").json()
    interface = Interface.objects.get(instance_id=made["id"])
    r = api(charlie).patch(f"/api/v1/network-interfaces/{interface.pk}/", {"security_groups": [1]}, format="json")
    assert r.status_code == 404


@pytest.mark.parametrize("groups", [[2**63], [2**64], [0], [-1], [True]])
def test_group_ids_past_a_bigint_are_refused(api, fleet, acme, bob, acme_net, groups):
    made = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk}, format="json").json()
    interface = Interface.objects.get(instance_id=made["id"])
    r = api(bob).patch(f"/api/v1/network-interfaces/{interface.pk}/", {"security_groups": groups}, format="json")
    assert r.status_code == 400, r.content
    assert "security_groups" in r.json()
    assert [g.name for g in interface.groups.all()] == ["default"]
    r = api(bob).post("/api/v1/instances/", {**LAUNCH, "team": acme.pk, "name": "db", "security_groups": groups},
                      format="json")
    assert r.status_code == 400 and "security_groups" in r.json(), r.content
