def launch_body(team, **extra):
    return {"team": team.pk, "name": "job-1", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand"} | extra


def test_bob_launches_an_instance(api, bob, acme, fleet):
    response = api(bob).post("/api/v1/instances/", launch_body(acme))
    assert response.status_code == 201, response.json()
    assert response.json()["state"] in ("pending", "running")
    assert len(response.json()["gpus"]) == 1


def test_audrey_cannot_launch(api, audrey, acme, fleet):
    response = api(audrey).post("/api/v1/instances/", launch_body(acme))
    assert response.status_code == 403
    assert "launch" in response.json()["detail"]


def test_audrey_cannot_stop(api, audrey, acme_instance):
    assert api(audrey).post(f"/api/v1/instances/{acme_instance.pk}/stop/").status_code == 403


def test_audrey_reads_both_teams(api, audrey, acme_instance, globex_instance):
    assert api(audrey).get("/api/v1/instances/").json()["count"] == 2


def test_bob_cannot_manage_members(api, bob, acme, alice):
    response = api(bob).post("/api/v1/members/", {"team": acme.pk, "username": "alice", "role": "admin"})
    assert response.status_code == 403


def test_alice_adds_a_member(api, alice, acme, charlie):
    response = api(alice).post("/api/v1/members/", {"team": acme.pk, "username": "charlie", "role": "member"})
    assert response.status_code == 201, response.json()


def test_alice_changes_a_role(api, alice, bob):
    membership = bob.memberships.get()
    response = api(alice).patch(f"/api/v1/members/{membership.pk}/", {"role": "admin"})
    assert response.json()["role"] == "admin"


def test_alice_cannot_add_members_to_globex(api, alice, globex, bob):
    response = api(alice).post("/api/v1/members/", {"team": globex.pk, "username": "bob", "role": "member"})
    assert response.status_code == 400
    assert "team" in response.json()


def test_only_operators_see_hosts(api, bob, ops, fleet):
    assert api(bob).get("/api/v1/hosts/").status_code == 403
    assert api(ops).get("/api/v1/hosts/").json()["count"] == 4


def test_operator_drains_a_host(api, ops, fleet):
    host = fleet["hosts"]["h100-a"]
    response = api(ops).patch(f"/api/v1/hosts/{host.pk}/", {"state": "draining"})
    assert response.json()["state"] == "draining"


def test_only_operators_create_teams(api, alice, ops):
    assert api(alice).post("/api/v1/teams/", {"name": "Initech"}).status_code == 403
    assert api(ops).post("/api/v1/teams/", {"name": "Initech"}).status_code == 201
