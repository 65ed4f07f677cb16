from audit.models import AuditEvent
from network.models import Vpc


def test_a_member_creates_a_vpc_and_it_is_audited(api, acme, bob):
    r = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "training", "cidr": "10.40.0.0/16"}, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["cidr"] == "10.40.0.0/16"
    assert AuditEvent.objects.filter(action="network.vpc.create", team_id=acme.pk).count() == 1


def test_it_names_a_cidr_that_is_not_one(api, acme, bob):
    r = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "x", "cidr": "10.40.0.0"}, format="json")
    assert r.status_code == 400
    assert "not an IPv4 CIDR" in r.json()["cidr"][0]


def test_it_names_host_bits(api, acme, bob):
    r = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "x", "cidr": "10.40.1.0/16"}, format="json")
    assert r.status_code == 400
    assert "host bits set; the network is 10.40.0.0/16" in r.json()["cidr"][0]


def test_it_refuses_public_and_oversized_ranges(api, acme, bob):
    public = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "x", "cidr": "8.8.0.0/16"}, format="json")
    huge = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "x", "cidr": "10.0.0.0/8"}, format="json")
    assert "not a private range" in public.json()["cidr"][0]
    assert "between a /16 and a /28" in huge.json()["cidr"][0]
    assert not Vpc.objects.exists()


def test_it_refuses_overlap_with_its_own_vpc_by_name(api, acme, bob):
    api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "a", "cidr": "10.40.0.0/16"}, format="json")
    r = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "b", "cidr": "10.40.8.0/24"}, format="json")
    assert r.status_code == 400
    assert r.json()["cidr"] == ["10.40.8.0/24 overlaps VPC a (10.40.0.0/16)."]


def test_it_refuses_overlap_with_another_teams_range_without_naming_it(api, acme, globex, bob, charlie):
    api(charlie).post("/api/v1/vpcs/", {"team": globex.pk, "name": "secret-lab", "cidr": "10.50.0.0/16"}, format="json")
    r = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "a", "cidr": "10.50.0.0/20"}, format="json")
    assert r.status_code == 400
    assert "another team uses" in r.json()["cidr"][0]
    assert "secret-lab" not in r.content.decode()


def test_an_outsider_sees_no_vpc_of_the_team(api, acme, bob, charlie):
    made = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "a", "cidr": "10.40.0.0/16"}, format="json")
    assert api(charlie).get(f"/api/v1/vpcs/{made.json()['id']}/").status_code == 404
    assert api(charlie).get("/api/v1/vpcs/").json()["results"] == []
    r = api(charlie).post("/api/v1/vpcs/", {"team": acme.pk, "name": "b", "cidr": "10.41.0.0/16"}, format="json")
    assert r.status_code == 400 and "team" in r.json()


def test_a_taken_name_is_named(api, acme, bob):
    api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "a", "cidr": "10.40.0.0/16"}, format="json")
    r = api(bob).post("/api/v1/vpcs/", {"team": acme.pk, "name": "a", "cidr": "10.41.0.0/16"}, format="json")
    assert r.json() == {"name": ["Team Acme already has a VPC named a."]}
