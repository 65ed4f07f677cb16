import pytest

from network.models import Subnet


@pytest.fixture
def vpc(api, acme, bob):
    return api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "lab", "cidr": "10.60.0.0/16"},
                         format="json").json()


def test_a_subnet_inside_its_vpc_is_made(api, bob, vpc):
    r = api(bob).post("/api/v1/subnets/", {"vpc": vpc["id"], "name": "a", "cidr": "10.60.1.0/24"}, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["free_addresses"] == 253


def test_a_subnet_outside_its_vpc_is_named(api, bob, vpc):
    r = api(bob).post("/api/v1/subnets/", {"vpc": vpc["id"], "name": "a", "cidr": "10.61.1.0/24"}, format="json")
    assert r.status_code == 400
    assert r.json()["cidr"] == ["10.61.1.0/24 is not inside VPC lab (10.60.0.0/16)."]


def test_overlapping_subnets_are_refused_by_name(api, bob, vpc):
    api(bob).post("/api/v1/subnets/", {"vpc": vpc["id"], "name": "a", "cidr": "10.60.0.0/20"}, format="json")
    r = api(bob).post("/api/v1/subnets/", {"vpc": vpc["id"], "name": "b", "cidr": "10.60.4.0/24"}, format="json")
    assert r.status_code == 400
    assert r.json()["cidr"] == ["10.60.4.0/24 overlaps subnet a (10.60.0.0/20)."]
    assert Subnet.objects.count() == 1


def test_an_outsider_cannot_put_a_subnet_in_the_teams_vpc(api, charlie, vpc):
    r = api(charlie).post("/api/v1/subnets/", {"vpc": vpc["id"], "name": "x", "cidr": "10.60.9.0/24"}, format="json")
    assert r.status_code == 400
    assert "vpc" in r.json()
    assert not Subnet.objects.exists()


def test_a_subnet_with_instances_is_not_deleted(api, acme, bob, running, acme_net):
    from network import vpcs

    gpu = vpcs.create_subnet(actor=bob, vpc=acme_net["vpc"], name="gpu", cidr="10.0.64.0/24")
    running(bob, acme, "web", subnet=gpu.pk)
    r = api(bob).delete(f"/api/v1/subnets/{gpu.pk}/")
    assert r.status_code == 400
    assert "still has instances" in r.json()["subnet"][0]


def test_the_default_subnet_is_not_deleted(api, bob, acme_net):
    r = api(bob).delete(f"/api/v1/subnets/{acme_net['subnet'].pk}/")
    assert r.status_code == 400
    assert "default subnet cannot be deleted" in r.json()["subnet"][0]
